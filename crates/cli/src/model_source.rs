//! `--model`: a local model folder, or `demo` (a tiny random-weight Qwen3.5 built in memory,
//! with the Qwen3.5 test tokenizer; it needs nothing on disk).

use std::path::PathBuf;
use std::str::FromStr;

use anyhow::Context;
use decider::{Decider, Prompter};
use decider_ops::DeciderOps;

#[derive(Clone, Debug)]
pub enum ModelSource {
    Demo,
    Folder(PathBuf),
}

impl FromStr for ModelSource {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if s == "demo" {
            return Ok(Self::Demo);
        }
        let path = PathBuf::from(s);
        if !path.is_dir() {
            return Err(format!("{s} is not a model folder (a folder with config.json, the weights, tokenizer.json and decider_config.json), nor `demo`"));
        }
        Ok(Self::Folder(path))
    }
}

impl ModelSource {
    /// The tokenizer and `decider_config.json` only (no weights).
    pub fn prompter(&self) -> anyhow::Result<Prompter> {
        match self {
            Self::Demo => Ok(Prompter::demo()),
            Self::Folder(dir) => Prompter::from_dir(dir).with_context(|| format!("reading the tokenizer and decider_config.json in {}", dir.display())),
        }
    }

    /// The whole model on backend `B`.
    pub fn load<B: DeciderOps>(&self, device: &B::Device) -> anyhow::Result<Decider<B>> {
        match self {
            Self::Demo => Ok(Decider::demo(device)),
            Self::Folder(dir) => Decider::load(dir, device).with_context(|| format!("loading the model in {}", dir.display())),
        }
    }

    /// Whether answers come from random weights.
    pub fn is_demo(&self) -> bool {
        matches!(self, Self::Demo)
    }
}
