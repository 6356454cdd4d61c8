//! `decider decide`: one `/v1/systemone` request from the command line, answers printed as JSON.

use std::time::Instant;

use anyhow::{Context, bail};
use decider::SystemOneRequest;
use decider::python_json::{Json, JsonMap, loads};
use qwen35::Qwen35Ops;

use decider_cli::backend::{BackendName, GenericTask};
use decider_cli::model_source::{MODEL_HELP, ModelSource, WeightsArg};

#[derive(clap::Args)]
pub struct DecideArgs {
    #[arg(long, help = MODEL_HELP)]
    pub model: ModelSource,
    #[command(flatten)]
    pub weights: WeightsArg,
    /// The state as text, or @FILE to read it from a file (used as it is).
    #[arg(long, conflicts_with = "state_json")]
    pub state: Option<String>,
    /// The state as JSON, or @FILE holding JSON (rendered as the reference's json.dumps).
    #[arg(long)]
    pub state_json: Option<String>,
    /// A question object, e.g. '{"type": "noul", "instructions": "Is it urgent?"}', optionally
    /// prefixed with its id: 'urgent={...}'. Repeat for several; ids default to q1, q2, ...
    #[arg(long = "question", required = true)]
    pub questions: Vec<String>,
    /// Pack all questions into one row (`independent: false`).
    #[arg(long)]
    pub packed: bool,
    #[arg(long, env = "DECIDER_BACKEND", value_parser = BackendName::parser(), default_value_t = BackendName::default_name())]
    pub backend: BackendName,
}

/// `TEXT` as it is, or the contents of `FILE` for `@FILE`.
pub fn text_or_file(arg: &str) -> anyhow::Result<String> {
    match arg.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path).with_context(|| format!("reading {path}")),
        None => Ok(arg.to_string()),
    }
}

impl DecideArgs {
    fn request(&self) -> anyhow::Result<SystemOneRequest> {
        let state = match (&self.state, &self.state_json) {
            (Some(text), None) => Json::Str(text_or_file(text)?),
            (None, Some(json)) => loads(text_or_file(json)?.as_bytes()).context("--state-json is not valid JSON")?,
            _ => bail!("give the state with --state TEXT|@FILE or --state-json JSON|@FILE"),
        };
        let mut questions = JsonMap::new();
        for (i, arg) in self.questions.iter().enumerate() {
            let (id, json) = match arg.split_once('=') {
                Some((id, json)) if !id.trim_start().starts_with('{') => (id.to_string(), json),
                _ => (format!("q{}", i + 1), arg.as_str()),
            };
            let question =
                loads(json.as_bytes()).with_context(|| format!("--question {id}: not valid JSON: {json}"))?;
            if questions.insert(id.clone(), question).is_some() {
                bail!("--question: the id {id} is given twice");
            }
        }
        let mut request = SystemOneRequest::new(state, questions);
        request.independent = !self.packed;
        Ok(request)
    }
}

impl GenericTask for &DecideArgs {
    fn run<B: Qwen35Ops>(self, device: &B::Device) -> anyhow::Result<()> {
        let request = self.request()?;
        let start = Instant::now();
        let decider = self.model.load::<B>(self.weights.choice, device)?;
        let loaded = start.elapsed();
        let start = Instant::now();
        // The library's prompt path, as `decider prompt` prints by default.
        let response = decider.answer_plan(&decider.prompter().plan_library(&request)?)?;
        println!("{}", serde_json::to_string_pretty(&response)?);
        eprintln!(
            "backend {}: model loaded in {:.2} s, answered in {:.3} s{}",
            self.backend,
            loaded.as_secs_f64(),
            start.elapsed().as_secs_f64(),
            if self.model.is_random() { " (random weights: the answers mean nothing)" } else { "" }
        );
        Ok(())
    }
}
