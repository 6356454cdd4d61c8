//! `--model`: a local model folder, `demo` (a tiny random-weight Qwen3.5 built in memory, with
//! the Qwen3.5 test tokenizer; it needs nothing on disk), or a Hugging Face Hub id such as
//! `Mapika/decider-2b` (downloaded into the Hub cache on first use, feature `hub`).

use std::path::PathBuf;
use std::str::FromStr;

use anyhow::Context;
use decider::{Decider, Prompter, demo};
use qwen35::{Qwen35Config, Qwen35Model, Qwen35Ops, WeightFormat};

/// `--weights`: the format the projections and experts are held in (`decider info` and the
/// README list which parameters that covers).
#[derive(clap::Args, Clone, Debug)]
pub struct WeightsArg {
    /// Weight format of the projections and experts: f32 (exact) or q8 (8-bit blocks of 32,
    /// llama.cpp's Q8_0).
    #[arg(long = "weights", default_value_t = WeightFormat::F32)]
    pub format: WeightFormat,
}

#[derive(Clone, Debug)]
pub enum ModelSource {
    Demo,
    Folder(PathBuf),
    /// `owner/name` on the Hugging Face Hub.
    Hub(String),
}

impl FromStr for ModelSource {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == "demo" {
            return Ok(Self::Demo);
        }
        let path = PathBuf::from(s);
        if path.is_dir() {
            return Ok(Self::Folder(path));
        }
        let hub_id = matches!(s.split('/').collect::<Vec<_>>()[..], [owner, name] if !owner.is_empty() && !name.is_empty() && !s.starts_with('.'))
            && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c));
        if hub_id {
            return Ok(Self::Hub(s.to_string()));
        }
        Err(format!(
            "{s} is not a model folder (a folder with config.json, the weights, tokenizer.json and decider_config.json), a Hub id (owner/name), nor `demo`"
        ))
    }
}

impl std::fmt::Display for ModelSource {
    /// As it was given: `demo`, the folder, or the Hub id.
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Self::Demo => f.write_str("demo"),
            Self::Folder(dir) => write!(f, "{}", dir.display()),
            Self::Hub(id) => f.write_str(id),
        }
    }
}

impl ModelSource {
    /// The tokenizer and `decider_config.json` only (no weights).
    pub fn prompter(&self) -> anyhow::Result<Prompter> {
        let dir = match self {
            Self::Demo => return Ok(Prompter::demo()),
            Self::Folder(dir) => dir.clone(),
            Self::Hub(id) => hub::download(id, false)?,
        };
        Prompter::from_dir(&dir).with_context(|| format!("reading the tokenizer and decider_config.json in {}", dir.display()))
    }

    /// The whole model on backend `B`, its projections and experts in `weights`.
    pub fn load<B: Qwen35Ops>(&self, weights: WeightFormat, device: &B::Device) -> anyhow::Result<Decider<B>> {
        let Some(dir) = self.weights_dir(weights)? else { return Ok(Decider::demo(device)) };
        Decider::load_with_weights(&dir, weights, device).with_context(|| format!("loading the model in {}", dir.display()))
    }

    /// The network alone (no tokenizer or decider config), for `decider forward`.
    pub fn network<B: Qwen35Ops>(&self, weights: WeightFormat, device: &B::Device) -> anyhow::Result<(Qwen35Config, Qwen35Model<B>)> {
        let Some(dir) = self.weights_dir(weights)? else { return Ok((demo::demo_config(), demo::demo_model(device))) };
        qwen35::load_model_with_weights(&dir, weights, device).with_context(|| format!("loading the model in {}", dir.display()))
    }

    /// The folder holding the weights (downloaded for a Hub id); `None` for the demo model.
    fn weights_dir(&self, weights: WeightFormat) -> anyhow::Result<Option<PathBuf>> {
        match self {
            Self::Demo if weights == WeightFormat::F32 => Ok(None),
            Self::Demo => anyhow::bail!("the demo model is built in f32 in memory; --weights {weights} applies to model folders and Hub ids"),
            Self::Folder(dir) => Ok(Some(dir.clone())),
            Self::Hub(id) => hub::download(id, true).map(Some),
        }
    }

    /// Whether answers come from random weights.
    pub fn is_demo(&self) -> bool {
        matches!(self, Self::Demo)
    }
}

/// Hugging Face Hub downloads into the shared Hub cache (`HF_HOME`, as Python's huggingface_hub).
#[cfg(feature = "hub")]
mod hub {
    use std::path::PathBuf;

    use anyhow::Context;
    use hf_hub::api::sync::Api;

    /// The snapshot folder of `id` with its tokenizer and configs, and the weights if asked.
    pub fn download(id: &str, weights: bool) -> anyhow::Result<PathBuf> {
        let failed = || format!("downloading {id} from the Hugging Face Hub (offline? download the folder and pass its path)");
        let repo = Api::new().with_context(failed)?.model(id.to_string());
        let config = repo.get("config.json").with_context(failed)?;
        repo.get("tokenizer.json").with_context(failed)?;
        // A base model has no decider_config.json; the runtime then uses the defaults.
        let _ = repo.get("decider_config.json");
        if weights {
            match repo.get("model.safetensors.index.json") {
                Ok(index) => {
                    let index: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&index)?)?;
                    let mut shards: Vec<&str> = index["weight_map"].as_object().context("weight_map in the index")?.values().filter_map(|v| v.as_str()).collect();
                    shards.sort_unstable();
                    shards.dedup();
                    for shard in shards {
                        repo.get(shard).with_context(failed)?;
                    }
                }
                Err(_) => {
                    repo.get("model.safetensors").with_context(failed)?;
                }
            }
        }
        Ok(config.parent().expect("a downloaded file has a folder").to_path_buf())
    }
}

#[cfg(not(feature = "hub"))]
mod hub {
    pub fn download(id: &str, _weights: bool) -> anyhow::Result<std::path::PathBuf> {
        anyhow::bail!("{id} looks like a Hub id, but this build has no Hub support (feature `hub`); download the folder and pass its path")
    }
}
