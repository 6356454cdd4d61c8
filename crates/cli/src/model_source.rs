//! `--model`: a local model folder, a GGUF file (llama.cpp's, with `decider_config.json` beside
//! it), `demo` (a tiny random-weight Qwen3.5 built in memory, with
//! the Qwen3.5 test tokenizer; it needs nothing on disk), `random:CONFIG` (the demo's random
//! weights and tokenizer at the widths of a `config.json`, for speed and memory measurements), or
//! a Hugging Face Hub id such as `Mapika/decider-2b`, or a GGUF file of a Hub repository such as
//! `Mapika/decider-2b-GGUF/decider-2b-Q8_0.gguf` (downloaded into the Hub cache on first use,
//! feature `hub`).

use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::Context;
use decider::{Decider, Prompter, demo};

use crate::folder_guard::reading_folder;
use qwen35::{Qwen35Config, Qwen35Model, Qwen35Ops, WeightChoice};

/// `--weights`: the format the projections, experts and token tables are held in (`docs/weights.md`
/// lists which parameters that covers).
#[derive(clap::Args, Clone, Debug)]
pub struct WeightsArg {
    /// Weight format of the projections, experts and token tables: f32 (exact), bf16 (exact
    /// for a bf16 checkpoint, half the memory), f16, q8 (8-bit blocks of 32, llama.cpp's Q8_0),
    /// q4 (4-bit blocks of 32, llama.cpp's Q4_0 layout; token tables 8-bit), or auto (the
    /// format a `decider quantize`d folder is stored in; a GGUF file's weights each as stored,
    /// Q4_K and Q6_K included; else a bf16 or f16 checkpoint's own type where the backend holds
    /// it in 2 bytes; else f32). llama.cpp's names `q8_0` and
    /// `q4_0`, and any case, are read too.
    #[arg(long = "weights", env = "DECIDER_WEIGHTS", default_value_t = WeightChoice::Auto)]
    pub choice: WeightChoice,
}

#[derive(Clone, Debug)]
pub enum ModelSource {
    Demo,
    /// `random:CONFIG`: seeded random weights at the widths of a `config.json`.
    Random(PathBuf),
    Folder(PathBuf),
    /// A GGUF file (`*.gguf`).
    Gguf(PathBuf),
    /// `owner/name` on the Hugging Face Hub.
    Hub(String),
    /// `owner/name/FILE.gguf`: a GGUF file of a Hub repository (with the repository's
    /// `decider_config.json`).
    HubGguf {
        id: String,
        file: String,
    },
}

impl FromStr for ModelSource {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == "demo" {
            return Ok(Self::Demo);
        }
        if let Some(config) = s.strip_prefix("random:") {
            return match PathBuf::from(config) {
                path if path.is_file() => Ok(Self::Random(path)),
                _ => Err(format!("{s}: random: takes a config.json file, and {config} is not one")),
            };
        }
        let path = PathBuf::from(s);
        if path.is_dir() {
            return Ok(Self::Folder(path));
        }
        let is_gguf = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
        if is_gguf && path.is_file() {
            return Ok(Self::Gguf(path));
        }
        let hub_name = |part: &str| !part.is_empty() && !part.starts_with('.');
        let hub_chars = s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c));
        match s.split('/').collect::<Vec<_>>()[..] {
            [owner, name] if !is_gguf && hub_name(owner) && hub_name(name) && hub_chars => {
                return Ok(Self::Hub(s.to_string()));
            }
            [owner, name, file] if is_gguf && hub_name(owner) && hub_name(name) && hub_name(file) && hub_chars => {
                return Ok(Self::HubGguf { id: format!("{owner}/{name}"), file: file.to_string() });
            }
            _ if is_gguf => {
                return Err(format!("{s}: no such GGUF file (nor a Hub repository's: owner/name/FILE.gguf)"));
            }
            _ => {}
        }
        Err(format!(
            "{s} is not a model folder (a folder with config.json, the weights, tokenizer.json and decider_config.json), a GGUF file (*.gguf), a Hub id (owner/name), `demo`, nor `random:CONFIG`"
        ))
    }
}

impl std::fmt::Display for ModelSource {
    /// As it was given: `demo`, the folder, or the Hub id.
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            Self::Demo => f.write_str("demo"),
            Self::Random(config) => write!(f, "random:{}", config.display()),
            Self::Folder(dir) | Self::Gguf(dir) => write!(f, "{}", dir.display()),
            Self::Hub(id) => f.write_str(id),
            Self::HubGguf { id, file } => write!(f, "{id}/{file}"),
        }
    }
}

/// `--model`'s help, the same on every command that loads a model.
pub const MODEL_HELP: &str = "Model: a folder (config.json, safetensors, tokenizer.json, decider_config.json), a GGUF file (decider_config.json beside it), a Hugging Face Hub id (owner/name) or a GGUF file of one (owner/name/FILE.gguf), `demo` (random weights, runs offline) or `random:CONFIG` (random weights at the widths of a config.json)";

impl ModelSource {
    /// The tokenizer and `decider_config.json` only (no weights).
    pub fn prompter(&self) -> anyhow::Result<Prompter> {
        let dir = match self {
            Self::Demo | Self::Random(_) => return Ok(Prompter::demo()),
            Self::Gguf(path) => return gguf_prompter(path),
            Self::HubGguf { id, file } => return gguf_prompter(&hub::download_gguf(id, file)?),
            Self::Folder(dir) => dir.clone(),
            Self::Hub(id) => hub::download(id, false)?,
        };
        check_folder(&dir, &[Part::Tokenizer])?;
        Prompter::from_dir(&dir)
            .with_context(|| format!("reading the tokenizer and decider_config.json in {}", dir.display()))
    }

    /// The whole model on backend `B`, its weights in `weights` (`auto` settled from a folder's
    /// shards; the format chosen is the network's `format`).
    pub fn load<B: Qwen35Ops>(&self, weights: WeightChoice, device: &B::Device) -> anyhow::Result<Decider<B>> {
        let dir = match self.weights()? {
            Weights::Folder(dir) => check_folder(&dir, &[Part::Network, Part::Tokenizer]).map(|()| dir)?,
            Weights::Gguf(path) => {
                return Decider::load_gguf(&path, weights, device)
                    .with_context(|| format!("loading the model in {}", path.display()));
            }
            Weights::Random(config) => {
                let network = || Ok(demo::random_model(&config, weights.without_folder(), device));
                return Ok(Decider::build(|| Ok(Prompter::demo()), network, device, self.to_string())?);
            }
        };
        reading_folder(&dir, || Decider::load_with_weights(&dir, weights, device))
            .with_context(|| format!("loading the model in {}", dir.display()))
    }

    /// The network alone (no tokenizer or decider config), for `decider forward`.
    pub fn network<B: Qwen35Ops>(
        &self,
        weights: WeightChoice,
        device: &B::Device,
    ) -> anyhow::Result<(Qwen35Config, Qwen35Model<B>)> {
        let dir = match self.weights()? {
            Weights::Folder(dir) => check_folder(&dir, &[Part::Network]).map(|()| dir)?,
            Weights::Gguf(path) => {
                return qwen35::gguf::load_gguf(&path, weights, device)
                    .with_context(|| format!("loading the model in {}", path.display()));
            }
            Weights::Random(config) => {
                let model = demo::random_model(&config, weights.without_folder(), device);
                return Ok((config, model));
            }
        };
        reading_folder(&dir, || qwen35::load_model_with_weights(&dir, weights, device))
            .with_context(|| format!("loading the model in {}", dir.display()))
    }

    /// The model folder (downloaded for a Hub id); `demo` and `random:CONFIG` have none.
    pub fn folder(&self) -> anyhow::Result<PathBuf> {
        match self.weights()? {
            Weights::Folder(dir) => check_folder(&dir, &[Part::Network]).map(|()| dir),
            Weights::Gguf(_) => anyhow::bail!("{self} is a GGUF file, not a model folder: this command reads folders"),
            Weights::Random(_) => anyhow::bail!("{self} has no weights to read: give a model folder or a Hub id"),
        }
    }

    /// Where the weights come from (the folder downloaded for a Hub id).
    fn weights(&self) -> anyhow::Result<Weights> {
        Ok(match self {
            Self::Demo => Weights::Random(demo::demo_config()),
            Self::Random(path) => {
                Weights::Random(Qwen35Config::from_file(path).with_context(|| format!("reading {}", path.display()))?)
            }
            Self::Folder(dir) => Weights::Folder(dir.clone()),
            Self::Gguf(path) => Weights::Gguf(path.clone()),
            Self::Hub(id) => Weights::Folder(hub::download(id, true)?),
            Self::HubGguf { id, file } => Weights::Gguf(hub::download_gguf(id, file)?),
        })
    }

    /// Whether answers come from random weights (`demo`, `random:CONFIG`).
    pub fn is_random(&self) -> bool {
        matches!(self, Self::Demo | Self::Random(_))
    }
}

/// The tokenizer of GGUF file `path` and the `decider_config.json` beside it.
fn gguf_prompter(path: &Path) -> anyhow::Result<Prompter> {
    Prompter::from_gguf(path)
        .with_context(|| format!("reading the tokenizer of {} and the decider_config.json beside it", path.display()))
}

/// What a command reads from a model folder.
#[derive(Clone, Copy, PartialEq)]
enum Part {
    /// `config.json` and the weights.
    Network,
    /// `tokenizer.json` (`decider_config.json` is optional: a base model has none).
    Tokenizer,
}

/// Every file `parts` need that `dir` lacks, named in one error, so a wrong folder is told
/// at once rather than one missing file per try.
fn check_folder(dir: &Path, parts: &[Part]) -> anyhow::Result<()> {
    let has = |name: &str| dir.join(name).is_file();
    let mut missing = Vec::new();
    if parts.contains(&Part::Network) {
        if !has("config.json") {
            missing.push("config.json");
        }
        if !has("model.safetensors") && !has("model.safetensors.index.json") {
            missing.push("weights (model.safetensors or model.safetensors.index.json)");
        }
    }
    if parts.contains(&Part::Tokenizer) && !has("tokenizer.json") {
        missing.push("tokenizer.json");
    }
    match missing.as_slice() {
        [] => Ok(()),
        [one] => anyhow::bail!("{} is not a model folder: it has no {one}", dir.display()),
        [first @ .., last] => {
            anyhow::bail!("{} is not a model folder: it has no {} nor {last}", dir.display(), first.join(", "))
        }
    }
}

enum Weights {
    Folder(PathBuf),
    Gguf(PathBuf),
    /// Seeded random weights for this config.
    Random(Qwen35Config),
}

/// Hugging Face Hub downloads into the shared Hub cache (`HF_HOME`, as Python's huggingface_hub).
#[cfg(feature = "hub")]
mod hub {
    use std::path::PathBuf;

    use anyhow::Context;
    use hf_hub::api::sync::Api;
    use qwen35::model_file::{INDEX_BYTES, read_bounded_text};

    /// The snapshot folder of `id` with its tokenizer and configs, and the weights if asked.
    pub fn download(id: &str, weights: bool) -> anyhow::Result<PathBuf> {
        let failed =
            || format!("downloading {id} from the Hugging Face Hub (offline? download the folder and pass its path)");
        let repo = Api::new().with_context(failed)?.model(id.to_string());
        let config = repo.get("config.json").with_context(failed)?;
        repo.get("tokenizer.json").with_context(failed)?;
        // A base model has no decider_config.json; the runtime then uses the defaults.
        let _ = repo.get("decider_config.json");
        if weights {
            match repo.get("model.safetensors.index.json") {
                Ok(index) => {
                    let index: serde_json::Value = serde_json::from_str(&read_bounded_text(&index, INDEX_BYTES)?)?;
                    let mut shards: Vec<&str> = index["weight_map"]
                        .as_object()
                        .context("weight_map in the index")?
                        .values()
                        .filter_map(|v| v.as_str())
                        .collect();
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

    /// GGUF file `file` of repository `id`, with the repository's `decider_config.json` beside it
    /// (which a decision needs: a GGUF file does not carry it).
    pub fn download_gguf(id: &str, file: &str) -> anyhow::Result<PathBuf> {
        let failed = |what: &str| {
            format!(
                "downloading {what} of {id} from the Hugging Face Hub (offline? download the file and pass its path)"
            )
        };
        let repo = Api::new().with_context(|| failed(file))?.model(id.to_string());
        let path = repo.get(file).with_context(|| failed(file))?;
        repo.get("decider_config.json")
            .with_context(|| failed("decider_config.json, which decider needs beside a GGUF file,"))?;
        Ok(path)
    }
}

#[cfg(not(feature = "hub"))]
mod hub {
    pub fn download(id: &str, _weights: bool) -> anyhow::Result<std::path::PathBuf> {
        anyhow::bail!(
            "{id} looks like a Hub id, but this build has no Hub support (feature `hub`); download the folder and pass its path"
        )
    }

    pub fn download_gguf(id: &str, file: &str) -> anyhow::Result<std::path::PathBuf> {
        anyhow::bail!(
            "{id}/{file} looks like a Hub repository's GGUF file, but this build has no Hub support (feature `hub`); download the file and pass its path"
        )
    }
}
