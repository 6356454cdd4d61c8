//! `decider prompt`: the rows of a request (ids and slots) without running the model, on the
//! library's prompt path or, with `--server`, the server's; only the folder's tokenizer.json and
//! decider_config.json are read.

use anyhow::Context;
use decider::SystemOneRequest;
use decider::python_json::{Json, loads};
use serde_json::{Value, json};

use decider_cli::model_source::{MODEL_HELP, ModelSource};

#[derive(clap::Args)]
pub struct PromptArgs {
    #[arg(long, help = MODEL_HELP)]
    pub model: ModelSource,
    /// A /v1/systemone request body as JSON, or a file holding it (FILE or @FILE):
    /// {"state": ..., "questions": {...}, "independent": true}.
    #[arg(long)]
    pub request: String,
    /// The rows `decider serve` runs (`/v1/systemone`: options as given) instead of the
    /// library's (`Decider.system_one`: "none of the above" options neutralised when
    /// decider_config.json's `neutralize_none` is true).
    #[arg(long)]
    pub server: bool,
}

/// The body given inline, or read from a file: a body is an object, so an argument that does
/// not start with `{` names a file (with or without the `@` that `decide` takes).
fn request_text(argument: &str) -> anyhow::Result<String> {
    match argument.trim_start().starts_with(['{', '@']) {
        true => crate::decide::text_or_file(argument),
        false => crate::decide::text_or_file(&format!("@{argument}")),
    }
}

pub fn run(args: &PromptArgs) -> anyhow::Result<()> {
    let text = request_text(&args.request)?;
    // Read as the server reads a body (Python's `json.loads`), so both print the same prompt.
    let body = loads(text.as_bytes()).context("the request is not valid JSON")?;
    let field = |name: &str| body.get(name).with_context(|| format!("the request has no \"{name}\""));
    let questions = field("questions")?.as_dict().context("\"questions\" must be an object {id: question}")?.clone();
    let mut request = SystemOneRequest::new(field("state")?.clone(), questions);
    if let Some(independent) = body.get("independent") {
        let Json::Bool(independent) = independent else { anyhow::bail!("\"independent\" must be true or false") };
        request.independent = *independent;
    }
    let prompter = args.model.prompter()?;
    let plan = if args.server { prompter.plan(&request)? } else { prompter.plan_library(&request)? };
    let rows: Vec<Value> = plan.rows.iter().map(|r| json!({"ids": r.ids, "slots": r.slots})).collect();
    println!("{}", json!({ "rows": rows }));
    Ok(())
}
