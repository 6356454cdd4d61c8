//! Checkpoint tensors -> module parameters.
//!
//! The model is built by its own `Config::init` (lazily: shapes only, nothing allocated), and
//! [`CheckpointFiller`] walks it as a burn [`ModuleMapper`], replacing each parameter by the
//! checkpoint tensor at the same module path. Shapes come from the modules, never from here;
//! this file only knows where the checkpoint's names and layouts differ from the module tree,
//! as the three tables below:
//!
//! - [`PREFIXES`]: released checkpoints nest the text model under `model.language_model.`
//!   (their `model.visual.*` and `mtp.*` tensors are ignored), transformers' `save_pretrained`
//!   of the text model under `model.`; `lm_head` is at the root in both.
//! - [`RENAMES`]: module paths the checkpoint spells differently (enum variants, `A_log`).
//! - [`STORED`]: parameters stored in another layout: PyTorch's `[out, in]` linear weights
//!   (burn's `Linear` is `[in, out]`), the conv kernel's singleton channel axis, and the
//!   routed experts, fused 3-D (released) or one 2-D tensor per expert (`save_pretrained`).
//!
//! A tied output head needs no rule: the config builds no `lm_head` module then.

use std::path::Path;

use burn::module::{Module, ModuleMapper, Param};
use burn::tensor::{Tensor, TensorData, backend::Backend};
use rayon::prelude::*;

use crate::checkpoint::Checkpoint;
use crate::config::Qwen35Config;
use crate::error::LoadError;
use crate::model::Qwen35Model;

/// Where the text model's tensors start, in the order tried: released checkpoints, then
/// `save_pretrained` output.
pub const PREFIXES: [&str; 2] = ["model.language_model.", "model."];

/// Top-level modules that are stored without the prefix.
pub const ROOT_MODULES: [&str; 1] = ["lm_head"];

/// `(this crate's module path, the checkpoint's)`, matched on whole dotted segments.
pub const RENAMES: [(&str, &str); 6] = [
    ("mixer.LinearAttn", "linear_attn"),
    ("mixer.SelfAttn", "self_attn"),
    ("mlp.Dense", "mlp"),
    ("mlp.Sparse", "mlp"),
    ("a_log", "A_log"),
    ("conv1d", "conv1d.weight"),
];

/// How a parameter is laid out in the checkpoint, where that differs from the module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// The module's own shape and order.
    AsIs,
    /// A 2-D `[in, out]` weight stored `[out, in]`.
    Transposed,
    /// A depthwise conv kernel `[C, K]` stored as PyTorch's `Conv1d` weight `[C, 1, K]`.
    Conv1dKernel,
    /// Routed experts `[E, in, out]`: either one fused `[E, out, in]` tensor of the parameter's
    /// own name, or per expert `e` the tensors `{experts}.{e}.{part}.weight`, each `[out / parts,
    /// in]`, concatenated along `out` in the order given.
    Experts { per_expert: &'static [&'static str] },
}

/// `(owning module type, field, layout)`; parameters not listed are stored as they are.
pub const STORED: [(&str, &str, Stored); 4] = [
    ("Struct:Linear", "weight", Stored::Transposed),
    ("Struct:GatedDeltaNet", "conv1d", Stored::Conv1dKernel),
    ("Struct:Experts", "gate_up_proj", Stored::Experts { per_expert: &["gate_proj", "up_proj"] }),
    ("Struct:Experts", "down_proj", Stored::Experts { per_expert: &["down_proj"] }),
];

/// Loads `config.json` and the safetensors weights of a model folder.
pub fn load_model<B: Backend>(dir: impl AsRef<Path>, device: &B::Device) -> Result<(Qwen35Config, Qwen35Model<B>), LoadError> {
    let dir = dir.as_ref();
    let config = Qwen35Config::from_file(dir.join("config.json"))?;
    let checkpoint = Checkpoint::open_dir(dir)?;
    let model = load_weights(&config, &checkpoint, device)?;
    Ok((config, model))
}

/// Builds the model of `config` and fills every parameter from `checkpoint`.
pub fn load_weights<B: Backend>(config: &Qwen35Config, checkpoint: &Checkpoint, device: &B::Device) -> Result<Qwen35Model<B>, LoadError> {
    let mut filler = CheckpointFiller::new(checkpoint, device)?;
    let model = config.init::<B>(device).map(&mut filler);
    match filler.error {
        Some(error) => Err(error),
        None => Ok(model),
    }
}

/// A [`ModuleMapper`] that replaces every float parameter of a freshly initialised (lazy)
/// module by the checkpoint tensor at its path. Unmapped lazy parameters are never allocated.
/// The first error stops the loading; it is kept in `error` (a mapper cannot return one).
pub struct CheckpointFiller<'a, B: Backend> {
    checkpoint: &'a Checkpoint,
    device: &'a B::Device,
    prefix: &'static str,
    /// The path being visited: each entered field (or index, or enum variant) with the type of
    /// the module that holds it.
    path: Vec<(String, String)>,
    /// The checkpoint tensors read so far, in module order.
    pub tensors_read: Vec<String>,
    pub error: Option<LoadError>,
}

impl<'a, B: Backend> CheckpointFiller<'a, B> {
    /// A filler for a checkpoint in either layout (the prefix is found from the embeddings).
    pub fn new(checkpoint: &'a Checkpoint, device: &'a B::Device) -> Result<Self, LoadError> {
        let prefix = PREFIXES
            .into_iter()
            .find(|prefix| checkpoint.contains(&format!("{prefix}embed_tokens.weight")))
            .ok_or_else(|| LoadError::MissingTensor {
                name: PREFIXES.map(|prefix| format!("{prefix}embed_tokens.weight")).join(" or "),
            })?;
        Ok(Self { checkpoint, device, prefix, path: Vec::new(), tensors_read: Vec::new(), error: None })
    }

    /// The checkpoint name of the parameter at the current path.
    fn checkpoint_name(&self) -> String {
        let path: Vec<&str> = self.path.iter().map(|(name, _)| name.as_str()).collect();
        let mut name = format!(".{}.", path.join("."));
        for (ours, theirs) in RENAMES {
            name = name.replace(&format!(".{ours}."), &format!(".{theirs}."));
        }
        let name = name.trim_matches('.');
        match ROOT_MODULES.contains(&path[0]) {
            true => name.to_owned(),
            false => format!("{}{name}", self.prefix),
        }
    }

    /// The layout rule of the parameter at the current path.
    fn stored(&self) -> Stored {
        let Some((field, owner)) = self.path.last() else { return Stored::AsIs };
        STORED
            .iter()
            .find(|(rule_owner, rule_field, _)| rule_owner == owner && rule_field == field)
            .map_or(Stored::AsIs, |(_, _, stored)| *stored)
    }

    /// The values of the parameter at the current path, in the module's layout `shape`.
    fn read(&mut self, shape: &[usize]) -> Result<Vec<f32>, LoadError> {
        let (name, stored, checkpoint) = (self.checkpoint_name(), self.stored(), self.checkpoint);
        let mut read = |name: &str, shape: &[usize]| {
            self.tensors_read.push(name.to_owned());
            checkpoint.read_f32(name, shape)
        };
        match stored {
            Stored::AsIs => read(&name, shape),
            Stored::Transposed => {
                let &[d_in, d_out] = shape else { unreachable!("Linear weights are 2-D") };
                Ok(transpose_last2(&read(&name, &[d_out, d_in])?, 1, d_out, d_in))
            }
            Stored::Conv1dKernel => {
                let &[channels, kernel] = shape else { unreachable!("the conv kernel is 2-D") };
                read(&name, &[channels, 1, kernel])
            }
            Stored::Experts { per_expert } => {
                let &[experts, d_in, d_out] = shape else { unreachable!("stacked experts are 3-D") };
                let stacked = if checkpoint.contains(&name) {
                    read(&name, &[experts, d_out, d_in])?
                } else {
                    // `{..}.experts.gate_up_proj` -> `{..}.experts.{e}.gate_proj.weight`, ...
                    let experts_path = name.rsplit_once('.').map_or(name.as_str(), |(module, _)| module);
                    let part_out = d_out / per_expert.len();
                    let mut stacked = Vec::with_capacity(experts * d_out * d_in);
                    for expert in 0..experts {
                        for part in per_expert {
                            let part_name = format!("{experts_path}.{expert}.{part}.weight");
                            stacked.extend(read(&part_name, &[part_out, d_in])?);
                        }
                    }
                    stacked
                };
                Ok(transpose_last2(&stacked, experts, d_out, d_in))
            }
        }
    }
}

impl<B: Backend> ModuleMapper<B> for CheckpointFiller<'_, B> {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.path.push((name.to_owned(), container_type.to_owned()));
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        if self.error.is_some() {
            return param;
        }
        let shape = param.lazy_shape().dims::<D>();
        match self.read(&shape) {
            Ok(values) => {
                let id = param.id;
                // Keeps the parameter's device and autodiff setting.
                param.transform_for_load(Tensor::from_data(TensorData::new(values, shape), self.device), id)
            }
            Err(error) => {
                self.error = Some(error);
                param
            }
        }
    }
}

/// Transposes each of `batch` row-major `[rows, cols]` matrices to `[cols, rows]`, in tiles
/// (so both sides are read and written a cache line at a time), in parallel over output rows.
fn transpose_last2(values: &[f32], batch: usize, rows: usize, cols: usize) -> Vec<f32> {
    const TILE: usize = 32;
    let mut out = vec![0.0; values.len()];
    if values.is_empty() {
        return out;
    }
    let matrix = rows * cols;
    debug_assert_eq!(values.len(), batch * matrix);
    out.par_chunks_mut(matrix).zip(values.par_chunks(matrix)).for_each(|(out, src)| {
        // Each task writes TILE output rows `c0..`: `dst[c][r] = src[r][c0 + c]`.
        out.par_chunks_mut(rows * TILE).enumerate().for_each(|(tile, dst)| {
            let (c0, width) = (tile * TILE, dst.len() / rows);
            for r0 in (0..rows).step_by(TILE) {
                for c in 0..width {
                    for r in r0..(r0 + TILE).min(rows) {
                        dst[c * rows + r] = src[r * cols + c0 + c];
                    }
                }
            }
        });
    });
    out
}

#[cfg(test)]
mod tests {
    use super::transpose_last2;

    #[test]
    fn tiled_transpose_equals_the_definition() {
        for (batch, rows, cols) in [(1, 1, 1), (1, 3, 70), (2, 33, 31), (3, 64, 65), (1, 100, 1), (2, 1, 40)] {
            let values: Vec<f32> = (0..batch * rows * cols).map(|i| i as f32).collect();
            let out = transpose_last2(&values, batch, rows, cols);
            for b in 0..batch {
                for r in 0..rows {
                    for c in 0..cols {
                        assert_eq!(out[b * rows * cols + c * rows + r], values[b * rows * cols + r * cols + c], "{batch}x{rows}x{cols}");
                    }
                }
            }
        }
    }
}
