//! `decider quantize`: a model folder whose weights are stored in a block format (or as 16-bit
//! floats), loaded by memory map with no quantizing (`qwen35::quantize`).

use std::path::PathBuf;

use anyhow::{Context, bail};
use qwen35::{Qwen35Ops, WeightFormat};

use decider_cli::backend::GenericTask;
use decider_cli::folder_guard::reading_folder;
use decider_cli::model_source::ModelSource;

#[derive(clap::Args)]
pub struct QuantizeArgs {
    /// Model folder or Hub id (owner/name) to quantize.
    #[arg(long)]
    pub model: ModelSource,
    /// Format to store the weights in: q8 (llama.cpp's Q8_0), q4 (Q4_0), q4_k (Q4_K), f16 or bf16.
    #[arg(long, value_parser = stored_format)]
    pub to: WeightFormat,
    /// The folder to write: new, or empty.
    #[arg(long)]
    pub out: PathBuf,
}

/// A weight format other than the checkpoint's own f32.
fn stored_format(name: &str) -> Result<WeightFormat, String> {
    let stored = || {
        let names: Vec<&str> = WeightFormat::ALL
            .iter()
            .filter(|(_, format)| *format != WeightFormat::F32)
            .map(|(name, _)| *name)
            .collect();
        names.join(", ")
    };
    match name.parse() {
        Ok(WeightFormat::F32) => Err(format!("f32 keeps the checkpoint's own values (quantize writes {})", stored())),
        Ok(format) => Ok(format),
        Err(_) => Err(format!("unknown format `{name}` to store (expected one of: {})", stored())),
    }
}

/// Run on any backend: the model is only built lazily, to name its tensors, and nothing is
/// allocated on the backend.
impl GenericTask for &QuantizeArgs {
    fn run<B: Qwen35Ops>(self, device: &B::Device) -> anyhow::Result<()> {
        let dir = self.model.folder()?;
        if self.out.read_dir().is_ok_and(|mut entries| entries.next().is_some()) {
            bail!("{} is not empty: quantize writes a new folder", self.out.display());
        }
        let tensors = reading_folder(&dir, || qwen35::quantize::quantize_folder::<B>(&dir, &self.out, self.to, device))
            .with_context(|| format!("quantizing the model in {}", dir.display()))?;
        println!("wrote {tensors} tensors in {} to {}", self.to, self.out.display());
        Ok(())
    }
}
