//! `cargo xtask jevbench`: the JevBench public items against a model in this process or any
//! `/v1/systemone` endpoint, scored as JevBench scores them.

pub mod client;
pub mod items;
pub mod machine;
pub mod metrics;
pub mod model_card;
pub mod record;
pub mod report;
pub mod runner;
pub mod scoring;
pub mod summary;

use std::path::{Path, PathBuf};

use anyhow::Context;
use decider::Qwen35Ops;
use decider_cli::backend::{BackendName, GenericTask};
use decider_cli::model_source::{ModelSource, WeightsArg};
use serde_json::{Value, json};

use self::client::{Endpoint, Http, InProcess};
use self::items::{Item, TIERS, load_tier};
use self::summary::Summary;

#[derive(clap::Args, Clone)]
pub struct JevbenchArgs {
    /// Model folder, or `demo` (random weights). Ignored with --endpoint.
    #[arg(long, default_value = "demo")]
    pub model: ModelSource,
    #[command(flatten)]
    pub weights: WeightsArg,
    #[arg(long, value_enum, default_value_t = BackendName::default_name())]
    pub backend: BackendName,
    /// Tiers to run, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "easy,standard,hard")]
    pub tiers: Vec<String>,
    /// A /v1/systemone server (ours or another) instead of the model in-process: its base URL
    /// (`http://127.0.0.1:8000`) or the route's full URL (`…/v1/systemone`).
    #[arg(long)]
    pub endpoint: Option<String>,
    /// The `model` field sent with every request.
    #[arg(long, default_value = "decider")]
    pub request_model: String,
    /// Folder for results.json, records.jsonl and report.html (must not hold a previous run).
    #[arg(long, default_value = "target/jevbench")]
    pub out: PathBuf,
    /// Run only the first N items of each tier.
    #[arg(long)]
    pub limit: Option<usize>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// The selected items, in tier order.
pub fn select_items(assets: &Path, tiers: &[String], limit: Option<usize>) -> anyhow::Result<Vec<Item>> {
    let mut items = Vec::new();
    for name in tiers {
        let tier = TIERS
            .iter()
            .find(|t| t.name == name)
            .with_context(|| format!("unknown tier {name:?}; the tiers are easy, standard, hard"))?;
        let mut tier_items = load_tier(assets, tier)?;
        tier_items.truncate(limit.unwrap_or(usize::MAX));
        items.extend(tier_items);
    }
    Ok(items)
}

/// Where the JevBench items are committed.
pub fn assets_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/jevbench")
}

/// Runs, scores and writes the outputs; returns the summary. `--out` is checked first, and
/// records.jsonl grows item by item, so neither a refused folder nor an interrupted run loses work.
pub fn run_and_report(args: &JevbenchArgs, endpoint: &mut dyn Endpoint, meta: Value) -> anyhow::Result<Summary> {
    let items = select_items(&assets_dir(), &args.tiers, args.limit)?;
    let mut records_file = create_records_file(&args.out)?;
    let outcome = runner::run(endpoint, &items, &args.request_model, !args.quiet, &mut records_file)
        .with_context(|| format!("writing {}", args.out.join("records.jsonl").display()))?;
    let summary = Summary::new(&items, &outcome.records, outcome.stopped, meta);
    std::fs::write(args.out.join("results.json"), serde_json::to_string_pretty(&summary)?)?;
    std::fs::write(args.out.join("report.html"), report::html(&summary, &outcome.records))?;
    Ok(summary)
}

/// `out/records.jsonl`, new; an `out` that already holds a run (every run starts with that
/// file) is refused.
fn create_records_file(out: &Path) -> anyhow::Result<std::io::BufWriter<std::fs::File>> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let path = out.join("records.jsonl");
    let file = std::fs::File::create_new(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => {
            anyhow::anyhow!("{} already holds a run (records.jsonl); choose another --out or remove it", out.display())
        }
        _ => anyhow::Error::new(e).context(format!("creating {}", path.display())),
    })?;
    Ok(std::io::BufWriter::new(file))
}

/// What results.json and the report say of the run: the model and how it ran (its weight
/// format is null for an endpoint, which does not say), the machine, the items and the date.
pub fn meta(args: &JevbenchArgs, model: &str, source: &str, weights: Option<String>, random: bool) -> Value {
    json!({
        "model": model,
        "source": source,
        "backend": if args.endpoint.is_some() { "endpoint".to_string() } else { args.backend.to_string() },
        "weights": weights,
        "machine": machine::describe(),
        "endpoint": args.endpoint,
        "random_weights": random,
        "tiers": args.tiers,
        "limit": args.limit,
        "date": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "versions": {"decider": env!("CARGO_PKG_VERSION"), "burn": "0.21.0"},
    })
}

impl GenericTask for &JevbenchArgs {
    fn run<B: Qwen35Ops>(self, device: &B::Device) -> anyhow::Result<()> {
        let summary = match &self.endpoint {
            Some(url) => {
                let meta = meta(self, &self.request_model, url, None, false);
                run_and_report(self, &mut Http::new(url), meta)?
            }
            None => {
                let decider = self.model.load::<B>(self.weights.choice, device)?;
                let weights = decider.model().format.to_string();
                let meta = meta(self, decider.name(), decider.source(), Some(weights), self.model.is_random());
                run_and_report(self, &mut InProcess(&decider), meta)?
            }
        };
        print!("{}", report::table(&summary));
        if self.model.is_random() && self.endpoint.is_none() {
            println!("random weights: accuracy near chance is expected.");
        }
        println!("wrote {}/{{results.json, records.jsonl, report.html}}", self.out.display());
        Ok(())
    }
}
