//! Quantized model folders (`decider quantize`): the weights a format holds in blocks are stored
//! as their blocks, so that loading reads them from the memory map instead of quantizing.
//!
//! The folder written is the source folder's other files (config, tokenizer, decider config)
//! beside shards `model-NNNNN.safetensors` and `model.safetensors.index.json`. The shards hold
//! each tensor the model reads, under its checkpoint name: a weight held in Q8_0 as
//! `{name}.q8_values` and `{name}.q8_scales` ([`crate::checkpoint::Q8_VALUES`]), one held in Q4_0
//! as `{name}.q4_values` and `{name}.q4_scales` ([`crate::checkpoint::Q4_VALUES`]), one held in
//! Q4_K as llama.cpp's blocks `{name}.q4k_blocks` ([`crate::checkpoint::Q4K_BLOCKS`]), one held in
//! f16 or bf16 as itself in that dtype, every other tensor in f32, and each shard's metadata
//! names the format ([`crate::checkpoint::FORMAT_KEY`]).
//! Tensors the model does not read (a vision tower, MTP) are left out. The tensors are read by the loader itself
//! (`CheckpointSource::writing_to`, a build that holds nothing), so a quantized folder holds
//! exactly the blocks a load would make. Writing holds at most a shard (`shards.rs`) and one tensor,
//! twice (as read, and as the bytes to write). The folder is written under a temporary name
//! beside `out` and renamed to `out` once complete: a failed run leaves no partial folder.

use std::path::Path;

use crate::checkpoint::Checkpoint;
use crate::config::Qwen35Config;
use crate::error::LoadError;
use crate::loader::Load;
use crate::shards::ShardWriter;
use crate::weight_format::{FormatOps, WeightFormat};
use crate::weights::CheckpointSource;

/// Writes the model folder `dir` with its weights in `weights` (any format but f32) to the folder
/// `out`, which must not exist or be empty. Returns the number of tensors written. `B` only
/// types the lazily built model: nothing is allocated on it.
pub fn quantize_folder<B: FormatOps>(
    dir: &Path,
    out: &Path,
    weights: WeightFormat,
    device: &B::Device,
) -> Result<usize, LoadError> {
    assert_ne!(weights, WeightFormat::F32, "quantize_folder: f32 is the checkpoint's own format");
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |cause| LoadError::Io { path, cause }
    };
    // Writing into the model folder would overwrite the shards being read.
    if out.canonicalize().ok().is_some_and(|out| dir.canonicalize().is_ok_and(|dir| dir == out)) {
        return Err(io(out)(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the output folder is the model folder",
        )));
    }
    let config = Qwen35Config::from_file(dir.join("config.json"))?;
    let checkpoint = Checkpoint::open_dir(dir)?;
    let partial = partial_folder(out);
    let written = (|| {
        std::fs::create_dir_all(&partial).map_err(write(&partial))?;
        for entry in std::fs::read_dir(dir).map_err(io(dir))? {
            let path = entry.map_err(io(dir))?.path();
            let name = path.file_name().and_then(|name| name.to_str()).unwrap_or_default();
            let weights_file = name.ends_with(".safetensors") || name == "model.safetensors.index.json";
            if path.is_file() && !weights_file {
                let copy = std::fs::read(&path).map_err(io(&path))?;
                std::fs::write(partial.join(name), copy).map_err(write(&partial.join(name)))?;
            }
        }
        let mut writer = ShardWriter::new(&partial, weights);
        let source = CheckpointSource::new(&checkpoint)?.writing_to(&mut writer);
        let load = Load::<B>::from(&source, device, weights).reading_only();
        let unfilled = config.load(&load.root());
        load.finish(unfilled)?;
        drop(source);
        let tensors = writer.finish()?;
        std::fs::rename(&partial, out).map_err(write(out))?;
        Ok(tensors)
    })();
    if written.is_err() {
        let _ = std::fs::remove_dir_all(&partial);
    }
    written
}

/// The temporary folder `out` is written as: a hidden name beside it, unique to this process.
fn partial_folder(out: &Path) -> std::path::PathBuf {
    let name = out.file_name().map_or("quantized".into(), |name| name.to_string_lossy());
    out.with_file_name(format!(".{name}.partial-{}", std::process::id()))
}

fn write(path: &Path) -> impl FnOnce(std::io::Error) -> LoadError {
    let path = path.to_path_buf();
    move |cause| LoadError::Write { path, cause }
}
