//! A typed question as the model sees it: `systemone.render_question` of decider-ai 1.10.0
//! (decider-ai 1.10.0's question types), with the reference's validation messages.

use crate::error::DeciderError;
use crate::python_json::{Json, JsonMap, dumps, py_repr, py_str, py_truthy};
use crate::tokenizer::MAX_OPTIONS;

/// Most levels a Score question may have.
pub const MAX_LEVELS: usize = 10;

/// The question text of a noul question given without instructions.
pub const NOUL_WITHOUT_INSTRUCTIONS: &str = "Which answer fits the context?";

/// The three answer types; each has its own temperature and answer object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AnswerType {
    Choice,
    Score,
    Noul,
}

impl RenderedQuestion {
    /// About the bytes the question holds on the heap.
    pub fn heap_bytes(&self) -> usize {
        self.text.len()
            + strings_heap_bytes(&self.options)
            + strings_heap_bytes(&self.names)
            + strings_heap_bytes(&self.legend)
    }
}

/// About the bytes `strings` hold on the heap.
pub(crate) fn strings_heap_bytes(strings: &[String]) -> usize {
    strings.iter().map(|s| size_of::<String>() + s.len()).sum()
}

impl AnswerType {
    /// The wire name (`"choice"`, `"score"`, `"noul"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Choice => "choice",
            Self::Score => "score",
            Self::Noul => "noul",
        }
    }
}

/// A question rendered for the prompt.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderedQuestion {
    pub kind: AnswerType,
    /// The question text after `Question: `.
    pub text: String,
    /// Option texts in request order (`name`, `name: description`, `0: level`, `no`/`yes: ...`).
    pub options: Vec<String>,
    /// What the answer reports per option: choice names (Score and noul use indices).
    pub names: Vec<String>,
    /// Score level descriptions (the answer's `legend`).
    pub legend: Vec<String>,
    /// Score only: judge each level in its own yes/no row when the model supports it.
    pub isolated: bool,
}

/// A non-string JSON value as it enters the prompt: `json.dumps(v, ensure_ascii=False)`.
fn text_of(value: &Json) -> String {
    match value {
        Json::Str(s) => s.clone(),
        other => dumps(other),
    }
}

/// Python's `v in (None, "")`.
fn is_blank(value: Option<&Json>) -> bool {
    matches!(value, None | Some(Json::Null)) || value.and_then(Json::as_str) == Some("")
}

fn invalid(message: impl Into<String>) -> DeciderError {
    DeciderError::InvalidQuestion(message.into())
}

/// `render_question(spec)`: validates one question object and renders it.
pub fn render_question(spec: &JsonMap) -> Result<RenderedQuestion, DeciderError> {
    let choice = Json::Str("choice".into());
    let kind_value = spec.get("type").unwrap_or(&choice);
    let criteria = spec.get("criteria").or_else(|| spec.get("options"));
    let criteria = criteria.filter(|v| !v.is_null());
    let raw = spec.get("instructions").or_else(|| spec.get("question"));
    let kind_name = kind_value.as_str();
    let is_noul = matches!(kind_name, Some("noul" | "bool"));

    let text = if is_noul && is_blank(raw) {
        let described = criteria
            .and_then(Json::as_dict)
            .is_some_and(|c| [c.get("true"), c.get("false")].into_iter().any(|d| !is_blank(d)));
        if !described && criteria.is_none_or(Json::is_dict) {
            return Err(invalid("noul question without instructions: criteria must describe true or false"));
        }
        NOUL_WITHOUT_INSTRUCTIONS.to_string()
    } else {
        raw.map_or_else(String::new, text_of)
    };
    if text.is_empty() {
        return Err(invalid("question without instructions"));
    }

    let (kind, options, names, legend) = match kind_name {
        Some("choice") => {
            let map: JsonMap = match criteria {
                Some(Json::List(items)) => items.iter().map(|c| (py_str(c), Json::Null)).collect(),
                Some(Json::Dict(map)) => map.clone(),
                _ => JsonMap::new(),
            };
            if !(2..=MAX_OPTIONS).contains(&map.len()) {
                return Err(invalid(format!("choice criteria: a map of 2..{MAX_OPTIONS} options")));
            }
            let options = map
                .iter()
                .map(|(name, d)| if is_blank(Some(d)) { name.clone() } else { format!("{name}: {}", text_of(d)) })
                .collect();
            (AnswerType::Choice, options, map.keys().cloned().collect(), vec![])
        }
        Some("score") => {
            let levels: Vec<Json> = match criteria {
                Some(Json::Dict(legend)) => sorted_legend(legend)?,
                Some(Json::List(items)) => items.clone(),
                _ => vec![],
            };
            if !(2..=MAX_LEVELS).contains(&levels.len()) {
                return Err(invalid(format!("score criteria: an ordered list of 2..{MAX_LEVELS} level descriptions")));
            }
            let legend: Vec<String> = levels.iter().map(text_of).collect();
            let options = legend.iter().enumerate().map(|(i, d)| format!("{i}: {d}")).collect();
            (AnswerType::Score, options, (0..levels.len()).map(|i| i.to_string()).collect(), legend)
        }
        Some("noul" | "bool") => {
            let described = match criteria {
                None => JsonMap::new(),
                Some(Json::Dict(c)) => c.clone(),
                Some(_) => return Err(invalid("noul criteria: a map of optional true/false descriptions")),
            };
            let option = |word: &str, d: Option<&Json>| match d {
                d if is_blank(d) => word.to_string(),
                Some(d) => format!("{word}: {}", text_of(d)),
                None => unreachable!("a missing description is blank"),
            };
            let options = vec![option("no", described.get("false")), option("yes", described.get("true"))];
            (AnswerType::Noul, options, vec!["no".into(), "yes".into()], vec![])
        }
        _ => return Err(invalid(format!("unknown question type {}", py_repr(kind_value)))),
    };
    let isolated = spec.get("isolated").is_none_or(py_truthy);
    Ok(RenderedQuestion { kind, text, options, names, legend, isolated })
}

/// A legend object `{"0": d, "1": d, ...}` in the order of `float(key)` (stable for equal keys).
fn sorted_legend(legend: &JsonMap) -> Result<Vec<Json>, DeciderError> {
    let mut keyed = Vec::with_capacity(legend.len());
    for (key, value) in legend {
        let number = python_float(key).ok_or_else(|| {
            invalid(format!("could not convert string to float: {}", py_repr(&Json::Str(key.clone()))))
        })?;
        keyed.push((number, value.clone()));
    }
    keyed.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal));
    Ok(keyed.into_iter().map(|(_, v)| v).collect())
}

/// Python's `float(text)` for the forms a legend key takes: surrounding whitespace, and `_` only
/// between two digits (`"1_000"`; `"1_e5"` and `"_1"` are refused, as Python refuses them);
/// Rust's parser already reads `1e1`, `.5`, `inf` and `nan` in any case.
pub(crate) fn python_float(text: &str) -> Option<f64> {
    let text = text.trim();
    let bytes = text.as_bytes();
    let digit_at = |i: Option<usize>| i.and_then(|i| bytes.get(i)).is_some_and(u8::is_ascii_digit);
    let underscores_between_digits = bytes
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'_')
        .all(|(i, _)| digit_at(i.checked_sub(1)) && digit_at(Some(i + 1)));
    if !underscores_between_digits {
        return None;
    }
    text.replace('_', "").parse().ok()
}
