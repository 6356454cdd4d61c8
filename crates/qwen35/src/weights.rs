//! Checkpoint tensors -> module parameters.
//!
//! The model is built by its own `Config::init` (lazily: shapes only, nothing allocated), and
//! [`CheckpointFiller`] walks it as a burn [`ModuleMapper`], replacing each parameter by the
//! checkpoint tensor at the same module path, converted to the parameter's format. Shapes come
//! from the modules, never from here; this file only knows where the checkpoint's names and
//! layouts differ from the module tree, as the tables below:
//!
//! - [`PREFIXES`]: released checkpoints nest the text model under `model.language_model.`
//!   (their `model.visual.*` and `mtp.*` tensors are ignored), transformers' `save_pretrained`
//!   of the text model under `model.`; [`ROOT_MODULES`] (`lm_head`) are at the root in both.
//! - [`FORMAT_VARIANTS`] and [`RENAMES`]: module path segments the checkpoint does not have
//!   (the weight-format variants) or spells differently (`linear_attn`, `A_log`, ...).
//! - [`STORED`]: how each kind of parameter is held, against the checkpoint's `[out, in]`
//!   weights; [`EXPERT_PARTS`]: the per-expert tensors of `save_pretrained` output, where
//!   released checkpoints fuse them into one 3-D tensor.
//!
//! A tied output head needs no rule: the config builds no `lm_head` module then.
//!
//! The same walk writes quantized folders (`crate::quantize`): each tensor read goes to the
//! folder being written instead of into a parameter.

use std::path::Path;

use burn::module::{Module, ModuleMapper, Param};
use burn::tensor::{Int, Tensor, TensorData, backend::Backend};
use decider_ops::{BlockInts, Half, block_scales, half_bits, half_floats, q4_values, q8_rows, q8_values};
use half::f16;
use rayon::prelude::*;

use crate::checkpoint::{Checkpoint, HalfValues};
use crate::config::Qwen35Config;
use crate::error::LoadError;
use crate::model::Qwen35Model;
use crate::shards::{ShardWriter, Written};
use crate::weight_format::{FormatOps, WeightFormat};

/// Where the text model's tensors start, in the order tried: released checkpoints, then
/// `save_pretrained` output.
pub const PREFIXES: [&str; 2] = ["model.language_model.", "model."];

/// Top-level modules that are stored without the prefix.
pub const ROOT_MODULES: [&str; 1] = ["lm_head"];

/// Enum variants that choose a weight's format: not part of the checkpoint's names.
pub const FORMAT_VARIANTS: [&str; 5] = ["Float", "Q8", "Q4", "F16", "Bf16"];

/// `(this crate's module path, the checkpoint's)`, matched on whole dotted segments.
pub const RENAMES: [(&str, &str); 6] = [
    ("mixer.LinearAttn", "linear_attn"),
    ("mixer.SelfAttn", "self_attn"),
    ("mlp.Dense", "mlp"),
    ("mlp.Sparse", "mlp"),
    ("a_log", "A_log"),
    ("conv1d", "conv1d.weight"),
];

/// How a parameter is held, where that differs from the checkpoint tensor of its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// The checkpoint's shape and order.
    AsIs,
    /// A depthwise conv kernel `[C, K]`, stored as PyTorch's `Conv1d` weight `[C, 1, K]`.
    Conv1dKernel,
    /// The weight of its module (`{module}.weight`, or the experts' tensors), transposed to
    /// `[in, out]` (burn's `Linear`; stacked experts `[E, in, out]`).
    Transposed { of_module: bool },
    /// The values of the weight of its module in Q8_0 blocks, in the checkpoint's orientation:
    /// in the matmul kernel's layout (`Q8Weight`, whose f32 form is a transposed `Linear`), or
    /// in row order (`Q8Rows`, a token table, whose f32 form is an `Embedding` of the same
    /// orientation).
    Q8Values { kernel_layout: bool },
    /// The packed values of the weight of its module in Q4_0 blocks, in the checkpoint's
    /// orientation and the matmul kernel's layout (`Q4Weight`).
    Q4Values,
    /// The block scales that go with the values read just before.
    BlockScales,
    /// The weight of its module in 16-bit floats, in the checkpoint's orientation (`HalfWeight`),
    /// as a float tensor of that dtype or as its patterns in an int tensor; which 16-bit float is
    /// the format variant above it.
    Half,
}

/// `(owning module type, field, how it is held)`; fields not listed are stored as they are.
pub const STORED: [(&str, &str, Stored); 12] = [
    ("Struct:Linear", "weight", Stored::Transposed { of_module: true }),
    ("Struct:FloatExperts", "gate_up_proj", Stored::Transposed { of_module: false }),
    ("Struct:FloatExperts", "down_proj", Stored::Transposed { of_module: false }),
    ("Struct:Q8Weight", "values", Stored::Q8Values { kernel_layout: true }),
    ("Struct:Q8Weight", "scales", Stored::BlockScales),
    ("Struct:Q4Weight", "values", Stored::Q4Values),
    ("Struct:Q4Weight", "scales", Stored::BlockScales),
    ("Struct:Q8Rows", "values", Stored::Q8Values { kernel_layout: false }),
    ("Struct:Q8Rows", "scales", Stored::BlockScales),
    ("Enum:HalfWeight", "Floats", Stored::Half),
    ("Enum:HalfWeight", "Bits", Stored::Half),
    ("Struct:GatedDeltaNet", "conv1d", Stored::Conv1dKernel),
];

/// Routed experts: `(weight, the per-expert tensors it fuses, in order along `out`)`.
/// `{..}.experts.gate_up_proj [E, 2I, H]` is `{..}.experts.{e}.gate_proj.weight [I, H]` then
/// `{..}.experts.{e}.up_proj.weight [I, H]` for each expert `e`.
pub const EXPERT_PARTS: [(&str, &[&str]); 2] =
    [("gate_up_proj", &["gate_proj", "up_proj"]), ("down_proj", &["down_proj"])];

/// Loads `config.json` and the safetensors weights of a model folder, in f32.
pub fn load_model<B: FormatOps>(
    dir: impl AsRef<Path>,
    device: &B::Device,
) -> Result<(Qwen35Config, Qwen35Model<B>), LoadError> {
    load_model_with_weights(dir, WeightFormat::F32, device)
}

/// Loads a model folder with its projections and experts in `weights`.
pub fn load_model_with_weights<B: FormatOps>(
    dir: impl AsRef<Path>,
    weights: WeightFormat,
    device: &B::Device,
) -> Result<(Qwen35Config, Qwen35Model<B>), LoadError> {
    let dir = dir.as_ref();
    let config = Qwen35Config::from_file(dir.join("config.json"))?;
    let checkpoint = Checkpoint::open_dir(dir)?;
    let model = load_weights(&config, &checkpoint, weights, device)?;
    Ok((config, model))
}

/// Builds the model of `config` in `weights` and fills every parameter from `checkpoint`.
pub fn load_weights<B: FormatOps>(
    config: &Qwen35Config,
    checkpoint: &Checkpoint,
    weights: WeightFormat,
    device: &B::Device,
) -> Result<Qwen35Model<B>, LoadError> {
    let mut filler = CheckpointFiller::new(checkpoint, device)?;
    let model = config.init_with_weights::<B>(weights, device).map(&mut filler);
    match filler.error {
        Some(error) => Err(error),
        None => Ok(model),
    }
}

/// A [`ModuleMapper`] that replaces every parameter of a freshly initialised (lazy) module by
/// the checkpoint tensor at its path. Unmapped lazy parameters are never allocated. The first
/// error stops the loading; it is kept in `error` (a mapper cannot return one).
pub struct CheckpointFiller<'a, B: Backend> {
    checkpoint: &'a Checkpoint,
    device: &'a B::Device,
    prefix: &'static str,
    /// The path being visited: each entered field (or index, or enum variant) with the type of
    /// the module that holds it.
    path: Vec<(String, String)>,
    /// The scales of the last quantized weight, by its checkpoint name, for its `scales` field.
    pending_scales: Option<(String, Vec<f16>)>,
    /// The checkpoint tensors read so far, in module order.
    pub tensors_read: Vec<String>,
    pub error: Option<LoadError>,
    /// Where the tensors read go instead of into the parameters, when writing a quantized
    /// folder: the model stays unfilled (lazy) and only one tensor is held at a time.
    writer: Option<&'a mut ShardWriter>,
}

impl<'a, B: FormatOps> CheckpointFiller<'a, B> {
    /// A filler for a checkpoint in either layout (the prefix is found from the embeddings).
    pub fn new(checkpoint: &'a Checkpoint, device: &'a B::Device) -> Result<Self, LoadError> {
        let prefix = PREFIXES
            .into_iter()
            .find(|prefix| checkpoint.has_weight(&format!("{prefix}embed_tokens.weight")))
            .ok_or_else(|| LoadError::MissingTensor {
                name: PREFIXES.map(|prefix| format!("{prefix}embed_tokens.weight")).join(" or "),
            })?;
        Ok(Self {
            checkpoint,
            device,
            prefix,
            path: Vec::new(),
            pending_scales: None,
            tensors_read: Vec::new(),
            error: None,
            writer: None,
        })
    }

    /// This filler writing each tensor it reads to `writer` (in the checkpoint's names and
    /// orientation, blocks as blocks) instead of filling the parameters.
    pub(crate) fn writing_to(self, writer: &'a mut ShardWriter) -> Self {
        Self { writer: Some(writer), ..self }
    }

    /// The checkpoint name of the current path, or of its module (`of_module`: without the
    /// last field).
    fn checkpoint_name(&self, of_module: bool) -> String {
        let end = self.path.len() - usize::from(of_module);
        let path: Vec<&str> = self.path[..end]
            .iter()
            .map(|(name, _)| name.as_str())
            .filter(|name| !FORMAT_VARIANTS.contains(name))
            .collect();
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

    /// How the parameter at the current path is held.
    fn stored(&self) -> Stored {
        self.path.last().map_or(Stored::AsIs, |(field, owner)| stored(owner, field))
    }

    /// Reads tensor `name` of `shape` with `read` (a reader of [`Checkpoint`]).
    fn read<T: Written>(&mut self, name: &str, shape: &[usize], read: Reader<T>) -> Result<T, LoadError> {
        self.tensors_read.push(name.to_owned());
        let values = read(self.checkpoint, name, shape)?;
        if let Some(writer) = self.writer.as_deref_mut() {
            values.write(name, shape, writer)?;
        }
        Ok(values)
    }

    /// The weight `name` as `[batch, out, in]` values, read by `read`: `{name}.weight` (batch
    /// 1), or routed experts, fused or per expert.
    fn read_weight<T: Stack + Written>(
        &mut self,
        name: &str,
        [batch, d_out, d_in]: [usize; 3],
        read: Reader<T>,
    ) -> Result<T, LoadError> {
        let (module, field) = name.rsplit_once('.').unwrap_or(("", name));
        let expert_parts = EXPERT_PARTS.iter().find(|(weight, _)| *weight == field).map(|(_, parts)| *parts);
        match expert_parts {
            Some(parts) if module.ends_with("experts") => {
                if self.checkpoint.has_weight(name) {
                    return self.read(name, &[batch, d_out, d_in], read);
                }
                let part_out = d_out / parts.len();
                let mut stacked = T::default();
                for expert in 0..batch {
                    for part in parts {
                        let values = self.read(&format!("{module}.{expert}.{part}.weight"), &[part_out, d_in], read)?;
                        stacked.append(values, batch * parts.len());
                    }
                }
                Ok(stacked)
            }
            _ => self.read(&format!("{name}.weight"), &[d_out, d_in], read),
        }
    }

    /// The float values of the parameter at the current path, in the module's `shape`.
    fn float_values(&mut self, shape: &[usize]) -> Result<Vec<f32>, LoadError> {
        match self.stored() {
            Stored::AsIs => self.read(&self.checkpoint_name(false), shape, Checkpoint::read_f32),
            Stored::Conv1dKernel => {
                let &[channels, kernel] = shape else { unreachable!("the conv kernel is 2-D") };
                self.read(&self.checkpoint_name(false), &[channels, 1, kernel], Checkpoint::read_f32)
            }
            Stored::Transposed { of_module } => {
                let (batch, d_in, d_out) = stack_dims(shape);
                let weight =
                    self.read_weight(&self.checkpoint_name(of_module), [batch, d_out, d_in], Checkpoint::read_f32)?;
                // A writer has written it as it is read; the parameter stays unfilled.
                match self.writer {
                    Some(_) => Ok(weight),
                    None => Ok(transpose_last2(&weight, batch, d_out, d_in)),
                }
            }
            Stored::Q8Values { .. } | Stored::Q4Values | Stored::BlockScales | Stored::Half => {
                unreachable!("blocks are ints, and 16-bit floats are not read as f32")
            }
        }
    }

    /// The 16-bit values of the weight at the current path (`HalfWeight`, of `shape [..., out,
    /// in]`), in the format variant's 16-bit float.
    fn half_values(&mut self, shape: &[usize]) -> Result<HalfValues, LoadError> {
        let (batch, d_out, d_in) = stack_dims(shape);
        let read: Reader<HalfValues> = match half_of(&self.path) {
            Half::F16 => Checkpoint::read_f16,
            Half::Bf16 => Checkpoint::read_bf16,
        };
        self.read_weight(&self.checkpoint_name(true), [batch, d_out, d_in], read)
    }

    /// The scales of the block values read just before, for the module at the current path.
    fn block_scales(&mut self) -> Vec<f16> {
        let name = self.checkpoint_name(true);
        match self.pending_scales.take() {
            Some((values_of, scales)) if values_of == name => scales,
            _ => unreachable!("a block module holds its values before its scales"),
        }
    }

    /// The block values of the weight at the current path (`[batch, out, in]`), read by `read`
    /// ([`Checkpoint::read_q8`] or [`Checkpoint::read_q4`]); its scales wait for the next
    /// parameter.
    fn block_values<T>(&mut self, shape: [usize; 3], read: Reader<(Vec<T>, Vec<f16>)>) -> Result<Vec<T>, LoadError>
    where
        (Vec<T>, Vec<f16>): Written,
    {
        let name = self.checkpoint_name(true);
        let (values, scales) = self.read_weight(&name, shape, read)?;
        self.pending_scales = Some((name, scales));
        Ok(values)
    }
}

impl<B: FormatOps> ModuleMapper<B> for CheckpointFiller<'_, B> {
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
        // A writer has written the tensor as it was read: the parameter stays unfilled.
        let fill = self.writer.is_none();
        let tensor = match self.stored() {
            Stored::Half => self
                .half_values(&shape)
                .map(|values| fill.then(|| half_floats(values.bits, values.half, shape, self.device))),
            _ => self
                .float_values(&shape)
                .map(|values| fill.then(|| Tensor::from_data(TensorData::new(values, shape), self.device))),
        };
        match tensor {
            Ok(None) => param,
            Ok(Some(tensor)) => {
                let id = param.id;
                // Keeps the parameter's device and autodiff setting.
                param.transform_for_load(tensor, id)
            }
            Err(error) => {
                self.error = Some(error);
                param
            }
        }
    }

    fn map_int<const D: usize>(&mut self, param: Param<Tensor<B, D, Int>>) -> Param<Tensor<B, D, Int>> {
        if self.error.is_some() {
            return param;
        }
        let shape = param.lazy_shape().dims::<D>();
        // A writer has written the blocks as they were read: the parameter stays unfilled.
        let tensor = match self.stored() {
            Stored::Q8Values { kernel_layout } => {
                let held = B::block_storage().ints_shape(BlockInts::Q8Values, shape);
                let (batch, d_out, d_in) = stack_dims(&held);
                match self.block_values([batch, d_out, d_in], Checkpoint::read_q8) {
                    Ok(_) if self.writer.is_some() => return param,
                    Ok(values) if kernel_layout => q8_values(values, held, self.device),
                    Ok(values) => q8_rows(values, held, self.device),
                    Err(error) => {
                        self.error = Some(error);
                        return param;
                    }
                }
            }
            Stored::Q4Values => {
                // Two values a byte: the weight is twice as wide as its bytes.
                let held = B::block_storage().ints_shape(BlockInts::Q4Bytes, shape);
                let (batch, d_out, half_in) = stack_dims(&held);
                match self.block_values([batch, d_out, 2 * half_in], Checkpoint::read_q4) {
                    Ok(_) if self.writer.is_some() => return param,
                    Ok(packed) => q4_values(packed, held, self.device),
                    Err(error) => {
                        self.error = Some(error);
                        return param;
                    }
                }
            }
            Stored::BlockScales => match self.block_scales() {
                _ if self.writer.is_some() => return param,
                scales => {
                    let dims = scales_dims(scales.len(), shape);
                    block_scales(scales, dims, self.device)
                }
            },
            Stored::Half => match self.half_values(&shape) {
                Ok(_) if self.writer.is_some() => return param,
                Ok(values) => half_bits(values.bits, shape, self.device),
                Err(error) => {
                    self.error = Some(error);
                    return param;
                }
            },
            _ => unreachable!("the only int parameters are blocks and 16-bit patterns"),
        };
        let id = param.id;
        param.transform_for_load(tensor, id)
    }
}

/// A way of reading a checkpoint tensor: [`Checkpoint::read_f32`], [`Checkpoint::read_q8`],
/// [`Checkpoint::read_q4`], [`Checkpoint::read_f16`] or [`Checkpoint::read_bf16`].
type Reader<T> = fn(&Checkpoint, &str, &[usize]) -> Result<T, LoadError>;

/// What a reader returns, stacked from per-expert tensors.
trait Stack: Default {
    /// Appends `part`, one of `parts` of the same size (room for all is made at the first).
    fn append(&mut self, part: Self, parts: usize);
}

impl<T> Stack for Vec<T> {
    fn append(&mut self, part: Self, parts: usize) {
        if self.capacity() == 0 {
            self.reserve_exact(part.len() * parts);
        }
        self.extend(part);
    }
}

impl<A: Stack, B: Stack> Stack for (A, B) {
    fn append(&mut self, (a, b): Self, parts: usize) {
        self.0.append(a, parts);
        self.1.append(b, parts);
    }
}

impl Stack for HalfValues {
    fn append(&mut self, part: Self, parts: usize) {
        self.half = part.half;
        Stack::append(&mut self.bits, part.bits, parts);
    }
}

/// How the field `field` of a module of type `owner` (burn's container type, `Struct:Name`) is
/// held: its rule in [`STORED`], or [`Stored::AsIs`].
pub fn stored(owner: &str, field: &str) -> Stored {
    STORED
        .iter()
        .find(|(rule_owner, rule_field, _)| *rule_owner == owner && *rule_field == field)
        .map_or(Stored::AsIs, |(_, _, stored)| *stored)
}

/// The 16-bit float of the format variant (`F16` or `Bf16`) a module path (fields with their
/// owners' types, innermost last) is in.
///
/// # Panics
/// If the path is under neither: only a `HalfWeight` holds 16-bit floats.
pub fn half_of(path: &[(String, String)]) -> Half {
    let variant = path.iter().rev().find_map(|(name, _)| match name.as_str() {
        "F16" => Some(Half::F16),
        "Bf16" => Some(Half::Bf16),
        _ => None,
    });
    variant.expect("16-bit floats are held under an F16 or Bf16 variant")
}

/// The shape `[..., rows, blocks]` of `count` scales held by a scales parameter whose tensor is
/// `shape`: as many a row as its weight has blocks (where a row is padded, the tensor's width
/// does not say).
pub fn scales_dims<const D: usize>(count: usize, mut shape: [usize; D]) -> [usize; D] {
    let rows: usize = shape[..D - 1].iter().product();
    shape[D - 1] = count / rows.max(1);
    shape
}

/// `(weights, rows, cols)` of a weight `[rows, cols]` (one weight) or a stack of them
/// `[weights, rows, cols]` (the experts).
pub fn stack_dims(shape: &[usize]) -> (usize, usize, usize) {
    match *shape {
        [rows, cols] => (1, rows, cols),
        [weights, rows, cols] => (weights, rows, cols),
        _ => unreachable!("weights are [rows, cols] or stacked [weights, rows, cols], not {shape:?}"),
    }
}

/// Transposes each of `batch` row-major `[rows, cols]` matrices to `[cols, rows]`, in tiles
/// (so both sides are read and written a cache line at a time), in parallel over output rows.
pub fn transpose_last2(values: &[f32], batch: usize, rows: usize, cols: usize) -> Vec<f32> {
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
                        assert_eq!(
                            out[b * rows * cols + c * rows + r],
                            values[b * rows * cols + r * cols + c],
                            "{batch}x{rows}x{cols}"
                        );
                    }
                }
            }
        }
    }
}
