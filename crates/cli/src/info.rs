//! `decider info`: what a model folder holds, as the runtime reads it.

use qwen35::Qwen35Ops;
use qwen35::decoder::{DecoderLayer, FeedForward};
use serde_json::json;

use decider_cli::backend::{BackendName, GenericTask};
use decider_cli::model_source::{MODEL_HELP, ModelSource, WeightsArg};

#[derive(clap::Args)]
pub struct InfoArgs {
    #[arg(long, help = MODEL_HELP)]
    pub model: ModelSource,
    #[command(flatten)]
    pub weights: WeightsArg,
    #[arg(long, env = "DECIDER_BACKEND", value_parser = BackendName::parser(), default_value_t = BackendName::default_name())]
    pub backend: BackendName,
}

impl GenericTask for &InfoArgs {
    fn run<B: Qwen35Ops>(self, device: &B::Device) -> anyhow::Result<()> {
        let decider = self.model.load::<B>(self.weights.choice, device)?;
        let model = decider.model();
        let config = &decider.prompter().config;
        let tokenizer = &decider.prompter().tokenizer;
        let [vocab, hidden] = model.embed_tokens.dims();
        let layers: Vec<String> = model.layers.iter().map(layer_kind).collect();
        let info = json!({
            "model": decider.name(),
            "source": decider.source(),
            "backend": self.backend.to_string(),
            "weights": model.format.to_string(),
            "random_weights": self.model.is_random(),
            "release_date": config.release_date,
            "layers": layers.len(),
            "layer_types": layers,
            "hidden_size": hidden,
            "vocab_rows": vocab,
            "parameters": model.parameters(),
            "weight_bytes": model.sizes.bytes,
            "tokenizer_tokens": tokenizer.vocab_size(),
            "labels": {"count": tokenizer.labels().names.len(), "first": tokenizer.labels().names[0], "last": tokenizer.labels().names.last()},
            "temperature": config.temperature,
            "temperature_by_type": {
                "choice": config.temperatures.of(decider::AnswerType::Choice, 2),
                "noul": config.temperatures.of(decider::AnswerType::Noul, 2),
                "score": config.temperatures.of(decider::AnswerType::Score, 2),
            },
            "isolated_levels": config.isolated_levels,
            "neutralize_none": config.neutralize_none,
        });
        println!("{}", serde_json::to_string_pretty(&info)?);
        Ok(())
    }
}

/// A layer's token mixer and feed-forward, in the checkpoint's words.
fn layer_kind<B: Qwen35Ops>(layer: &DecoderLayer<B>) -> String {
    let feed_forward = match &layer.mlp {
        FeedForward::Dense(_) => "mlp",
        FeedForward::Sparse(_) => "moe",
    };
    format!("{} + {feed_forward}", layer.mixer.kind().name())
}
