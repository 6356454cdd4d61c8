//! `decider forward`: the raw model, ids in, logits out.

use std::io::BufWriter;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use burn::tensor::{Int, Tensor, TensorData};
use npyz::WriterBuilder;
use qwen35::Qwen35Ops;

use decider_cli::backend::{BackendName, GenericTask};
use decider_cli::model_source::{MODEL_HELP, ModelSource, WeightsArg};

#[derive(clap::Args)]
pub struct ForwardArgs {
    #[arg(long, help = MODEL_HELP)]
    pub model: ModelSource,
    #[command(flatten)]
    pub weights: WeightsArg,
    /// Token ids, comma-separated, run as one sequence.
    #[arg(long, value_delimiter = ',', required = true)]
    pub ids: Vec<i64>,
    /// Where to write the f32 logits `[T, vocab]` as a NumPy .npy file.
    #[arg(long)]
    pub out: PathBuf,
    /// Backend to run on (among those compiled in).
    #[arg(long, env = "DECIDER_BACKEND", value_parser = BackendName::parser(), default_value_t = BackendName::default_name())]
    pub backend: BackendName,
}

impl GenericTask for &ForwardArgs {
    fn run<B: Qwen35Ops>(self, device: &B::Device) -> anyhow::Result<()> {
        let start = Instant::now();
        let (config, model) = self.model.network::<B>(self.weights.choice, device)?;
        let load_time = start.elapsed();
        if let Some(bad) = self.ids.iter().find(|&&id| id < 0 || id as usize >= config.vocab_size) {
            bail!("token id {bad} is out of range for this model's vocab_size {}", config.vocab_size);
        }

        let len = self.ids.len();
        let ids = Tensor::<B, 2, Int>::from_data(TensorData::new(self.ids.clone(), [1, len]), device);
        let start = Instant::now();
        let logits = model.forward(ids).into_data().convert::<f32>();
        let forward_time = start.elapsed();
        let values = logits.as_slice::<f32>().map_err(|e| anyhow::anyhow!("{e:?}"))?;
        if let Some(first) = values.iter().position(|x| !x.is_finite()) {
            let count = values.iter().filter(|x| !x.is_finite()).count();
            let vocab = config.vocab_size;
            bail!(
                "{count} of {} logits are NaN or infinite (the first at token {}, column {}): the weights or the backend are broken; nothing written",
                values.len(),
                first / vocab,
                first % vocab
            );
        }

        let file = std::fs::File::create(&self.out).with_context(|| format!("creating {}", self.out.display()))?;
        let mut writer = npyz::WriteOptions::new()
            .default_dtype()
            .shape(&[len as u64, config.vocab_size as u64])
            .writer(BufWriter::new(file))
            .begin_nd()?;
        writer.extend(values.iter().copied())?;
        writer.finish().with_context(|| format!("writing {}", self.out.display()))?;

        println!(
            "backend {}: loaded {} in {:.2} s; forward of {len} tokens in {:.3} s ({:.1} tokens/s); wrote {} [{len}, {}]",
            self.backend,
            self.model,
            load_time.as_secs_f64(),
            forward_time.as_secs_f64(),
            len as f64 / forward_time.as_secs_f64(),
            self.out.display(),
            config.vocab_size,
        );
        Ok(())
    }
}
