//! What turns requests into rows without a model: the tokenizer and `decider_config.json`
//! (`decider prompt` needs only this), on both of decider-ai's prompt paths.

use std::path::Path;

use crate::config::DeciderConfig;
use crate::demo::DEMO_DECIDER_CONFIG;
use crate::error::DeciderError;
use crate::plan_budget::{Meter, PlanBudget};
use crate::prompt::{Plan, PlanOptions, Row, plan};
use crate::tokenizer::Tokenizer;
use crate::wire::SystemOneRequest;

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

    /// The tokenizer of GGUF file `path`, built from its vocabulary, and the `decider_config.json`
    /// beside it ([`DeciderConfig::beside_gguf`]).
    pub fn from_gguf(path: &Path) -> Result<Self, DeciderError> {
        let config = DeciderConfig::beside_gguf(path)?;
        let file = qwen35::gguf::GgufFile::open(path)?;
        Ok(Self { tokenizer: Tokenizer::from_gguf(&file)?, config })
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

    /// The temperature of every slot of `rows`, in row order.
    pub fn slot_temperatures(&self, rows: &[Row]) -> Vec<f64> {
        rows.iter()
            .flat_map(|row| row.types.iter().zip(&row.nopts).map(|(&kind, &n)| self.config.temperatures.of(kind, n)))
            .collect()
    }
}
