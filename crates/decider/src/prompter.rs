//! What turns requests into rows without a model: the tokenizer and `decider_config.json`
//! (`decider prompt` needs only this), on both of decider-ai's prompt paths.

use std::path::Path;

use crate::config::DeciderConfig;
use crate::demo::DEMO_DECIDER_CONFIG;
use crate::error::DeciderError;
use crate::plan_budget::{Meter, PlanBudget};
use crate::prompt::{Plan, PlanOptions, Row, RowQuestion, context_ids, neutralize, plan, row};
use crate::question::AnswerType;
use crate::tokenizer::{MAX_OPTIONS, Tokenizer};
use crate::wire::{DecideQuestion, SystemOneRequest};

/// The context cap of [`crate::Decider::decide`] (and `/decide`).
pub const DECIDE_MAX_CONTEXT_TOKENS: usize = 1536;

/// What turns requests into rows without a model: the tokenizer and `decider_config.json`.
/// `decider prompt` needs only this.
#[derive(Clone)]
pub struct Prompter {
    pub tokenizer: Tokenizer,
    pub config: DeciderConfig,
}

impl Prompter {
    /// `tokenizer.json` and `decider_config.json` (optional) of a model folder.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self, DeciderError> {
        let dir = dir.as_ref();
        Self::with_config(dir, DeciderConfig::from_dir(dir)?)
    }

    /// `tokenizer.json` of a model folder, with its `decider_config.json` already read.
    pub fn with_config(dir: &Path, config: DeciderConfig) -> Result<Self, DeciderError> {
        Ok(Self { tokenizer: Tokenizer::from_file(dir.join("tokenizer.json"))?, config })
    }

    /// The demo model's tokenizer (the Qwen3.5 test tokenizer) and config.
    pub fn demo() -> Self {
        Self {
            tokenizer: Tokenizer::test_tokenizer(),
            config: DeciderConfig::from_json(DEMO_DECIDER_CONFIG).expect("the demo config is valid"),
        }
    }

    /// The rows of a `/v1/systemone` request as the reference *server* builds them
    /// (`decider.serve.prepare`): options exactly as given.
    pub fn plan(&self, request: &SystemOneRequest) -> Result<Plan, DeciderError> {
        self.plan_with(&mut Meter::unbounded(&self.tokenizer), request, false)
    }

    /// [`Prompter::plan`], asking `budget` before tokenizing each text and keeping each row.
    pub fn plan_within(&self, request: &SystemOneRequest, budget: &mut dyn PlanBudget) -> Result<Plan, DeciderError> {
        self.plan_with(&mut Meter::new(&self.tokenizer, budget), request, false)
    }

    /// The rows of the same request as the reference *library* builds them
    /// (`decider.infer.Decider.system_one`): "none of the above"-like options are shown to the
    /// model as "not listed here" when `decider_config.json` sets `neutralize_none` (answers
    /// keep the options as given).
    pub fn plan_library(&self, request: &SystemOneRequest) -> Result<Plan, DeciderError> {
        self.plan_with(&mut Meter::unbounded(&self.tokenizer), request, self.config.neutralize_none)
    }

    fn plan_with(
        &self,
        meter: &mut Meter,
        request: &SystemOneRequest,
        neutralize_none: bool,
    ) -> Result<Plan, DeciderError> {
        let options = PlanOptions {
            independent: request.independent,
            isolated_levels: self.config.isolated_levels,
            max_state_tokens: request.max_state_tokens,
            neutralize_none,
        };
        plan(meter, &request.state, &request.questions, options)
    }

    /// The one row of `Decider.decide(context, questions)`: the context capped at 1,536 tokens,
    /// then every question with its options as given (none-of-the-above options neutralised
    /// when the config asks).
    pub fn decide_row(&self, context: &str, questions: &[DecideQuestion]) -> Result<Row, DeciderError> {
        if let Some(q) = questions.iter().find(|q| q.options.is_empty() || q.options.len() > MAX_OPTIONS) {
            return Err(DeciderError::InvalidQuestion(format!(
                "decide: question {:?} has {} options; 1..{MAX_OPTIONS} are supported",
                q.question,
                q.options.len()
            )));
        }
        let neutral = self.config.neutralize_none;
        let row_questions: Vec<RowQuestion> = questions
            .iter()
            .map(|q| {
                let shown = q.options.iter().map(|o| if neutral { neutralize(o) } else { o.clone() }).collect();
                (q.question.clone(), shown, AnswerType::Choice)
            })
            .collect();
        context_row(&mut Meter::unbounded(&self.tokenizer), context, &row_questions)
    }

    /// The temperature of every slot of `rows`, in row order.
    pub fn slot_temperatures(&self, rows: &[Row]) -> Vec<f64> {
        rows.iter()
            .flat_map(|row| row.types.iter().zip(&row.nopts).map(|(&kind, &n)| self.config.temperatures.of(kind, n)))
            .collect()
    }
}

/// The one row of `Decider.decide` and of the `/decide` form: `context` capped at
/// [`DECIDE_MAX_CONTEXT_TOKENS`], then every question packed after it.
pub(crate) fn context_row(meter: &mut Meter, context: &str, questions: &[RowQuestion]) -> Result<Row, DeciderError> {
    let context = context_ids(meter, context, DECIDE_MAX_CONTEXT_TOKENS)?;
    row(meter, &context, questions)
}
