//! The `/decide` form (decider-ai 1.10.0's `/decide` route): `{"context": str, "schema": {question: field}}` with
//! fields `{"type": "choice", "options": [...]}`, `{"type": "bool"}` or
//! `{"type": "scale", "legend": [...] | {number: description}}`. All questions are packed into
//! one row after the context (capped at 1,536 tokens). A field of more than 255 options or
//! levels is answered over its first 255, as the reference's readout does (one label each).
//!
//! Planning (validation and tokenization, [`Prompter::plan_decide`]) needs no model, so a server
//! does it before queueing and checks the row against its limits; answering
//! ([`Decider::answer_decide`]) runs the one row. The library's [`Decider::decide`] (typed choice
//! questions) plans through the same builder ([`Prompter::plan_decide_questions`]), so both build
//! the row one way.

use indexmap::IndexMap;
use qwen35::Qwen35Ops;
use serde::Serialize;

use crate::python_json::Json;

use crate::answer::{argmax, py_round, rounded_by};
use crate::engine::Decider;
use crate::error::DeciderError;
use crate::plan_budget::{Meter, PlanBudget};
use crate::prompt::{Row, RowQuestion, context_ids, neutralize, row};
use crate::prompter::Prompter;
use crate::python_json::{py_repr, py_str, py_type_name};
use crate::question::{AnswerType, python_float, strings_heap_bytes};
use crate::tokenizer::MAX_OPTIONS;
use crate::wire::{DecideAnswer, DecideQuestion};

/// The context cap of the `/decide` form and of [`Decider::decide`].
pub const DECIDE_MAX_CONTEXT_TOKENS: usize = 1536;

const FORM: &str = "schema: a map {question: field}, each field one of {\"type\": \"choice\", \"options\": [option strings]}, {\"type\": \"bool\"} or {\"type\": \"scale\", \"legend\": [descriptions] or {level number: description}}";

/// A schema field's `type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FieldKind {
    Choice,
    Bool,
    Scale,
}

/// The `type` a `/decide` answer reports (`noul` for a bool field).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FieldAnswerType {
    Choice,
    Noul,
    Scale,
}

/// One `/decide` field's answer, written as the reference writes it: `type` after the value,
/// probabilities rounded to 4 digits, the score to 2.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum FieldAnswer {
    Bool {
        /// P(yes).
        noul: f64,
        #[serde(rename = "type")]
        kind: FieldAnswerType,
    },
    Choice {
        choice: String,
        /// The chosen option's probability.
        confidence: f64,
        #[serde(rename = "type")]
        kind: FieldAnswerType,
        probabilities: IndexMap<String, f64>,
    },
    Scale {
        /// The expected level number.
        score: f64,
        /// The most probable level's probability.
        confidence: f64,
        #[serde(rename = "type")]
        kind: FieldAnswerType,
        /// The legend as the request gave it.
        legend: serde_json::Value,
        /// By legend key, in level order.
        probabilities: IndexMap<String, f64>,
    },
}

/// A form's answers, by question in schema order.
pub type FormAnswers = IndexMap<String, FieldAnswer>;

/// One schema field, ready for the prompt.
struct Field {
    kind: FieldKind,
    /// Option texts shown to the model (neutralised where the config asks).
    shown: Vec<String>,
    /// Names reported back (the options as given).
    names: Vec<String>,
    /// Scale: the legend keys' values, in option order.
    keys: Vec<f64>,
    key_names: Vec<String>,
    /// Scale: the legend as given, echoed in the answer.
    legend: Json,
}

impl Field {
    /// A choice of `options`, shown neutralised where `neutralize_none` asks.
    fn choice(options: Vec<String>, neutralize_none: bool) -> Field {
        let shown = options.iter().map(|o| if neutralize_none { neutralize(o) } else { o.clone() }).collect();
        Field { kind: FieldKind::Choice, shown, names: options, keys: vec![], key_names: vec![], legend: Json::Null }
    }
}

/// A `/decide` request (or [`Decider::decide`]'s questions) turned into its one row.
pub struct DecidePlan {
    fields: Vec<(String, Field)>,
    /// `None` for an empty schema, answered `{}` without the model.
    row: Option<Row>,
}

impl DecidePlan {
    /// Questions answered.
    pub fn questions(&self) -> usize {
        self.fields.len()
    }

    /// The row's tokens (0 for an empty schema).
    pub fn row_tokens(&self) -> usize {
        self.row.as_ref().map_or(0, |r| r.ids.len())
    }
}

fn invalid(message: String) -> DeciderError {
    DeciderError::InvalidQuestion(message)
}

/// Whether `value` holds no NaN or infinite number, at any depth.
fn is_finite_json(value: &Json) -> bool {
    match value {
        Json::Float(f) => f.is_finite(),
        Json::List(items) => items.iter().all(is_finite_json),
        Json::Dict(map) => map.values().all(is_finite_json),
        _ => true,
    }
}

/// `Decider._check_schema` + `_schema_to_questions`.
fn fields(schema: Option<&Json>, neutralize_none: bool) -> Result<Vec<(String, Field)>, DeciderError> {
    let schema = match schema {
        None | Some(Json::Null) => return Err(invalid(format!("schema is required; {FORM}"))),
        Some(Json::Dict(map)) => map,
        Some(other) => return Err(invalid(format!("schema is a {}; {FORM}", py_type_name(other)))),
    };
    let mut out = Vec::with_capacity(schema.len());
    for (question, spec) in schema {
        let at = format!("schema[{}]", py_repr(&Json::Str(question.clone())));
        let spec = spec
            .as_dict()
            .ok_or_else(|| invalid(format!("{at} is a {}, not a field object; {FORM}", py_type_name(spec))))?;
        let kind = spec.get("type").cloned().unwrap_or(Json::Str("choice".into()));
        let field = match kind.as_str() {
            Some("choice") => {
                let options: Vec<String> = match spec.get("options") {
                    Some(Json::List(items)) if !items.is_empty() && items.iter().all(Json::is_str) => {
                        items.iter().map(py_str).collect()
                    }
                    Some(Json::Dict(map)) if !map.is_empty() => map.keys().cloned().collect(),
                    _ => return Err(invalid(format!("{at}: \"options\" must be a non-empty list of strings; {FORM}"))),
                };
                Field::choice(options.into_iter().take(MAX_OPTIONS).collect(), neutralize_none)
            }
            Some("bool") => {
                let options = vec!["no".to_string(), "yes".to_string()];
                Field {
                    kind: FieldKind::Bool,
                    shown: options.clone(),
                    names: options,
                    keys: vec![],
                    key_names: vec![],
                    legend: Json::Null,
                }
            }
            Some("scale") => {
                let legend = match spec.get("legend") {
                    Some(legend @ Json::List(items)) if !items.is_empty() => legend,
                    Some(legend @ Json::Dict(map)) if !map.is_empty() => legend,
                    _ => {
                        return Err(invalid(format!(
                            "{at}: \"legend\" must be a non-empty list or {{level number: description}} map; {FORM}"
                        )));
                    }
                };
                // The legend is echoed in the answer, which must serialise (`json.dumps(allow_nan=False)`).
                if !is_finite_json(legend) {
                    return Err(invalid(format!(
                        "{at}: the \"legend\" contains a value that is not finite JSON (NaN or Infinity); {FORM}"
                    )));
                }
                let (keys, key_names, descriptions): (Vec<f64>, Vec<String>, Vec<Json>) = match legend {
                    Json::Dict(map) => {
                        let mut keyed = Vec::new();
                        for (key, description) in map {
                            let value = python_float(key).filter(|v| v.is_finite()).ok_or_else(|| {
                                invalid(format!(
                                    "{at}: the keys of a \"legend\" map must be finite numbers, e.g. {{\"0\": \"none\", \"1\": \"low\"}}; {FORM}"
                                ))
                            })?;
                            keyed.push((value, key.clone(), description.clone()));
                        }
                        // Stable, and -0 equal to 0, as Python's `sorted(key=float)`.
                        keyed.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal));
                        (
                            keyed.iter().map(|k| k.0).collect(),
                            keyed.iter().map(|k| k.1.clone()).collect(),
                            keyed.into_iter().map(|k| k.2).collect(),
                        )
                    }
                    Json::List(items) => (
                        (0..items.len()).map(|i| i as f64).collect(),
                        (0..items.len()).map(|i| i.to_string()).collect(),
                        items.clone(),
                    ),
                    _ => unreachable!("the legend was checked to be a list or a map"),
                };
                let shown: Vec<String> = key_names
                    .iter()
                    .zip(&descriptions)
                    .take(MAX_OPTIONS)
                    .map(|(k, d)| format!("{k}: {}", py_str(d)))
                    .collect();
                let legend = legend.clone();
                Field { kind: FieldKind::Scale, names: shown.clone(), shown, keys, key_names, legend }
            }
            _ => return Err(invalid(format!("{at}: unknown field type {}; {FORM}", py_repr(&kind)))),
        };
        out.push((question.clone(), field));
    }
    Ok(out)
}

impl Prompter {
    /// Validates the `/decide` form and builds its row (`Decider._check_schema`,
    /// `_schema_to_questions`, then one packed row).
    pub fn plan_decide(&self, context: &str, schema: Option<&Json>) -> Result<DecidePlan, DeciderError> {
        self.plan_decide_in(&mut Meter::unbounded(&self.tokenizer), context, schema)
    }

    /// [`Prompter::plan_decide`], asking `budget` before tokenizing each text and keeping the row.
    pub fn plan_decide_within(
        &self,
        context: &str,
        schema: Option<&Json>,
        budget: &mut dyn PlanBudget,
    ) -> Result<DecidePlan, DeciderError> {
        self.plan_decide_in(&mut Meter::new(&self.tokenizer, budget), context, schema)
    }

    fn plan_decide_in(
        &self,
        meter: &mut Meter,
        context: &str,
        schema: Option<&Json>,
    ) -> Result<DecidePlan, DeciderError> {
        let fields = fields(schema, self.config.neutralize_none)?;
        plan_fields(meter, context, fields)
    }

    /// The row of [`Decider::decide`]: choice questions with their options as given, 1 to 255
    /// each (more is an error here, where the form answers over the first 255).
    pub fn plan_decide_questions(
        &self,
        context: &str,
        questions: &[DecideQuestion],
    ) -> Result<DecidePlan, DeciderError> {
        if let Some(q) = questions.iter().find(|q| q.options.is_empty() || q.options.len() > MAX_OPTIONS) {
            return Err(DeciderError::InvalidQuestion(format!(
                "decide: question {:?} has {} options; 1..{MAX_OPTIONS} are supported",
                q.question,
                q.options.len()
            )));
        }
        let neutralize_none = self.config.neutralize_none;
        let fields =
            questions.iter().map(|q| (q.question.clone(), Field::choice(q.options.clone(), neutralize_none))).collect();
        plan_fields(&mut Meter::unbounded(&self.tokenizer), context, fields)
    }
}

/// The one row of a `/decide` plan, however its fields came: `context` capped at
/// [`DECIDE_MAX_CONTEXT_TOKENS`], then every field's question and options packed after it. No
/// fields, no row.
fn plan_fields(meter: &mut Meter, context: &str, fields: Vec<(String, Field)>) -> Result<DecidePlan, DeciderError> {
    if fields.is_empty() {
        return Ok(DecidePlan { fields, row: None });
    }
    let questions: Vec<RowQuestion> = fields
        .iter()
        .map(|(q, f)| {
            let kind = match f.kind {
                FieldKind::Bool => AnswerType::Noul,
                FieldKind::Scale => AnswerType::Score,
                FieldKind::Choice => AnswerType::Choice,
            };
            (q.clone(), f.shown.clone(), kind)
        })
        .collect();
    let context = context_ids(meter, context, DECIDE_MAX_CONTEXT_TOKENS)?;
    Ok(DecidePlan { row: Some(row(meter, &context, &questions)?), fields })
}

impl<B: Qwen35Ops> Decider<B> {
    /// `Decider.decide(context, questions)`: choice questions packed into one row after the
    /// context (capped at 1,536 tokens), options as given (none-of-the-above options neutralised
    /// when the config asks); `abstain_below` leaves `choice` empty under that p_max.
    pub fn decide(
        &self,
        context: &str,
        questions: &[DecideQuestion],
        abstain_below: f64,
    ) -> Result<Vec<DecideAnswer>, DeciderError> {
        if questions.is_empty() {
            return Ok(vec![]);
        }
        let plan = self.prompter().plan_decide_questions(context, questions)?;
        let probabilities = self.slot_probabilities(plan.rows())?;
        Ok(questions
            .iter()
            .zip(probabilities)
            .map(|(q, p)| {
                let j = argmax(&p);
                let probs = q.options.iter().cloned().zip(p.iter().copied()).collect();
                DecideAnswer {
                    choice: (p[j] >= abstain_below).then(|| q.options[j].clone()),
                    confidence: p[j],
                    probs,
                    probs_list: p,
                }
            })
            .collect())
    }

    /// Answers the `/decide` form; an empty schema answers `{}` without running the model.
    pub fn decide_json(&self, context: &str, schema: Option<&Json>) -> Result<FormAnswers, DeciderError> {
        self.answer_decide(&self.prompter().plan_decide(context, schema)?)
    }

    /// Answers a planned `/decide` form.
    pub fn answer_decide(&self, plan: &DecidePlan) -> Result<FormAnswers, DeciderError> {
        Ok(plan.answers(&self.slot_probabilities(plan.rows())?))
    }
}

impl DecidePlan {
    /// The rows the form runs: its one row, or none for an empty schema.
    pub fn rows(&self) -> &[Row] {
        self.row.as_slice()
    }

    /// About the bytes the plan holds on the heap (what a server holds while it is queued).
    pub fn heap_bytes(&self) -> usize {
        let fields: usize = self
            .fields
            .iter()
            .map(|(question, f)| {
                let strings =
                    strings_heap_bytes(&f.shown) + strings_heap_bytes(&f.names) + strings_heap_bytes(&f.key_names);
                size_of::<(String, Field)>()
                    + question.len()
                    + strings
                    + f.keys.len() * size_of::<f64>()
                    + crate::python_json::dumps(&f.legend).len()
            })
            .sum();
        fields + self.rows().iter().map(Row::heap_bytes).sum::<usize>()
    }

    /// The form's answers from the probabilities of its row's slots.
    pub fn answers(&self, slot_probabilities: &[Vec<f64>]) -> FormAnswers {
        self.fields
            .iter()
            .zip(slot_probabilities)
            .map(|((question, field), p)| {
                let j = argmax(p);
                let answer = match field.kind {
                    FieldKind::Bool => FieldAnswer::Bool { noul: py_round(p[1], 4), kind: FieldAnswerType::Noul },
                    FieldKind::Choice => FieldAnswer::Choice {
                        choice: field.names[j].clone(),
                        confidence: py_round(p[j], 4),
                        kind: FieldAnswerType::Choice,
                        probabilities: rounded_by(field.names.iter().cloned(), p),
                    },
                    FieldKind::Scale => FieldAnswer::Scale {
                        score: py_round(field.keys.iter().zip(p).map(|(k, x)| k * x).sum(), 2),
                        confidence: py_round(p[j], 4),
                        kind: FieldAnswerType::Scale,
                        legend: field.legend.to_serde(),
                        probabilities: rounded_by(field.key_names.iter().cloned(), p),
                    },
                };
                (question.clone(), answer)
            })
            .collect()
    }
}
