//! A GGUF file as a [`TensorSource`]: each tensor the model asks for by its checkpoint name is
//! found where llama.cpp's converter put it ([`names`](super::names)), its value heads put back in
//! the checkpoint's order and its values transform undone, and held in the format the load asks
//! for; with `auto`, each weight in the format it is stored in (a GGUF file mixes types: a Q8_0
//! file keeps its norms in F32 and its narrow experts in F16).
//!
//! Which stored types are held as they are: F32, F16, BF16, Q8_0 and Q4_0 (Q4_0 token tables as
//! Q8_0, which holds them exactly, as the format policy keeps token tables 8-bit). The k-quants
//! are held in f32, dequantized exactly as llama.cpp dequantizes them, until they have kernels of
//! their own (issue #38).

use std::borrow::Cow;
use std::path::Path;

use decider_ops::{GgmlType, Half};
use half::f16;
use rayon::prelude::*;

use super::config::config_of;
use super::file::{GgufFile, dequantized};
use super::names::{self, HeadRows, Heads, Stored, Value};
use crate::config::Qwen35Config;
use crate::error::LoadError;
use crate::loader::{Load, TensorSource};
use crate::model::Qwen35Model;
use crate::weight::{WeightValues, stack_dims};
use crate::weight_choice::WeightChoice;
use crate::weight_format::{FormatOps, WeightFormat, WeightUse};

/// Loads the Qwen3.5 model of GGUF file `path` with its weights in `weights` (`auto`: each as
/// stored). The model's [`Qwen35Model::format`] is the format most of its weights are held in.
pub fn load_gguf<B: FormatOps>(
    path: impl AsRef<Path>,
    weights: impl Into<WeightChoice>,
    device: &B::Device,
) -> Result<(Qwen35Config, Qwen35Model<B>), LoadError> {
    let file = GgufFile::open(path)?;
    let config = config_of(&file)?;
    let source = GgufSource::new::<B>(&file, &config, weights.into(), device);
    let load = Load::from(&source, device, source.format());
    let model = config.load(&load.root());
    Ok((config, load.finish(model)?))
}

/// A GGUF file read under the checkpoint's names.
pub struct GgufSource<'a> {
    file: &'a GgufFile,
    heads: ValueHeads,
    /// The formats the stored types are held in, when each weight is held as stored (`auto`).
    as_stored: Option<AsStored>,
    /// The format asked for (`auto`: the one most weights are stored in).
    format: WeightFormat,
}

/// The DeltaNet's heads, whose value heads the converter reorders.
#[derive(Debug, Clone, Copy)]
struct ValueHeads {
    key_heads: usize,
    /// Value heads per key head.
    per_key: usize,
    /// Channels of a value head.
    width: usize,
    /// Query and key channels, before the value channels in `in_proj_qkv` and the conv.
    qk_channels: usize,
}

/// How `auto` holds the 16-bit types: in 2 bytes where the backend can, else in f32.
#[derive(Debug, Clone, Copy)]
struct AsStored {
    f16: WeightFormat,
    bf16: WeightFormat,
}

impl AsStored {
    fn format(self, stored: GgmlType) -> WeightFormat {
        match stored {
            GgmlType::F16 => self.f16,
            GgmlType::Bf16 => self.bf16,
            GgmlType::Q8_0 => WeightFormat::Q8,
            GgmlType::Q4_0 => WeightFormat::Q4,
            GgmlType::F32 | GgmlType::Q2K | GgmlType::Q3K | GgmlType::Q4K | GgmlType::Q5K | GgmlType::Q6K => {
                WeightFormat::F32
            }
        }
    }
}

impl<'a> GgufSource<'a> {
    /// `file` (of `config`) read in `weights` on `device`.
    pub fn new<B: FormatOps>(
        file: &'a GgufFile,
        config: &Qwen35Config,
        weights: WeightChoice,
        device: &B::Device,
    ) -> Self {
        let heads = ValueHeads {
            key_heads: config.linear_num_key_heads,
            per_key: config.linear_num_value_heads / config.linear_num_key_heads.max(1),
            width: config.linear_value_head_dim,
            qk_channels: 2 * config.linear_key_dim(),
        };
        let half = |half: Half| match WeightFormat::half_bytes::<B>(half, device) {
            2 => WeightFormat::of_half(half),
            _ => WeightFormat::F32,
        };
        let (as_stored, format) = match weights {
            WeightChoice::Exactly(format) => (None, format),
            WeightChoice::Auto => {
                let as_stored = AsStored { f16: half(Half::F16), bf16: half(Half::Bf16) };
                (Some(as_stored), most_stored(file, as_stored))
            }
        };
        GgufSource { file, heads, as_stored, format }
    }

    /// The format asked for, or with `auto` the one most weights are held in.
    pub fn format(&self) -> WeightFormat {
        self.format
    }

    fn stored(&self, name: &str) -> Result<Stored, LoadError> {
        names::stored(name).ok_or_else(|| LoadError::MissingTensor { name: name.to_owned() })
    }

    /// File tensor `name`, checked to hold `expected` (`[..., out, in]`; dimensions of 1 aside:
    /// the file stores the conv's `[C, 1, K]` as `[C, K]`), with its value heads in the
    /// checkpoint's order: its type and bytes (f32 where its blocks cannot be reordered whole).
    fn read(&self, name: &str, expected: &[usize], heads: Heads) -> Result<(GgmlType, Cow<'a, [u8]>), LoadError> {
        let (tensor, bytes) = self.file.tensor(name)?;
        let squeezed = |dims: &[usize]| dims.iter().copied().filter(|&d| d != 1).collect::<Vec<_>>();
        if squeezed(&tensor.dims) != squeezed(expected) {
            return Err(LoadError::ShapeMismatch {
                name: name.to_owned(),
                expected: expected.to_vec(),
                found: tensor.dims.clone(),
            });
        }
        let (mut ggml_type, mut bytes) = (tensor.ggml_type, Cow::Borrowed(bytes));
        let rows = expected.first().copied().unwrap_or(1);
        let row_values = tensor.len() / rows.max(1);
        let v = self.heads;
        let (unit, span) = match heads {
            Heads::None => return Ok((ggml_type, bytes)),
            Heads::Rows { per_head, after_qk } => {
                if !row_values.is_multiple_of(ggml_type.block_values()) {
                    (ggml_type, bytes) = widened(ggml_type, &bytes);
                }
                let row_bytes = bytes.len() / rows.max(1);
                let per_head = match per_head {
                    HeadRows::Width => v.width,
                    HeadRows::One => 1,
                };
                let skip = if after_qk { v.qk_channels * row_bytes } else { 0 };
                (per_head * row_bytes, skip..bytes.len())
            }
            Heads::Columns => {
                if !v.width.is_multiple_of(ggml_type.block_values()) {
                    (ggml_type, bytes) = widened(ggml_type, &bytes);
                }
                (v.width / ggml_type.block_values() * ggml_type.block_bytes(), 0..bytes.len() / rows.max(1))
            }
        };
        let heads_bytes = v.key_heads * v.per_key * unit;
        let row_step = match heads {
            Heads::Columns => span.end,
            _ => bytes.len(),
        };
        if span.len() != heads_bytes {
            return Err(LoadError::Gguf {
                path: self.file.path().to_path_buf(),
                reason: format!(
                    "tensor `{name}` does not hold {} value heads of {} channels where the configuration says",
                    v.key_heads * v.per_key,
                    v.width
                ),
            });
        }
        if v.per_key > 1 {
            let tiled = bytes.into_owned();
            let mut grouped = tiled.clone();
            for start in (0..tiled.len()).step_by(row_step.max(1)) {
                let span = start + span.start..start + span.end;
                to_grouped(&tiled[span.clone()], &mut grouped[span], unit, v.key_heads, v.per_key);
            }
            bytes = Cow::Owned(grouped);
        }
        Ok((ggml_type, bytes))
    }

    /// File tensor `name` as `expected`'s weight in `format`.
    fn weight_of(
        &self,
        name: &str,
        expected: &[usize],
        heads: Heads,
        format: WeightFormat,
    ) -> Result<WeightValues, LoadError> {
        let (ggml_type, bytes) = self.read(name, expected, heads)?;
        let d_in = expected.last().copied().unwrap_or(1);
        let values = values_in(name, ggml_type, &bytes, d_in, format);
        self.file.release(name);
        values
    }
}

impl TensorSource for GgufSource<'_> {
    /// The converter's names are those of `save_pretrained` output.
    fn text_prefix(&self) -> &str {
        "model"
    }

    fn f32(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, LoadError> {
        let stored = self.stored(name)?;
        let [file_name] = stored.names.as_slice() else { unreachable!("a tensor read as f32 is stored as one") };
        let (ggml_type, bytes) = self.read(file_name, shape, stored.heads)?;
        let mut values = dequantized(ggml_type, &bytes);
        self.file.release(file_name);
        match stored.value {
            Value::AsIs => {}
            Value::PlusOne => values.par_iter_mut().for_each(|v| *v -= 1.0),
            Value::NegExp => values.par_iter_mut().for_each(|v| *v = (-*v).ln()),
        }
        finite(file_name, values)
    }

    fn weight(
        &self,
        name: &str,
        dims: &[usize],
        format: WeightFormat,
        _usage: WeightUse,
    ) -> Result<WeightValues, LoadError> {
        let stored = self.stored(name)?;
        match stored.names.as_slice() {
            [one] => self.weight_of(one, dims, stored.heads, format),
            [gate, up] => {
                let (experts, d_out, d_in) = stack_dims(dims);
                let part = [experts, d_out / 2, d_in];
                let gate = self.weight_of(gate, &part, stored.heads, format)?;
                let up = self.weight_of(up, &part, stored.heads, format)?;
                Ok(fuse_experts(gate, up, experts))
            }
            _ => unreachable!("the rules store a tensor as one or two"),
        }
    }

    fn stored_format(&self, name: &str) -> Option<WeightFormat> {
        let as_stored = self.as_stored?;
        let stored = names::stored(name)?;
        let mut formats =
            stored.names.iter().map(|name| Some(as_stored.format(self.file.tensors().get(name)?.ggml_type)));
        let first = formats.next()??;
        match formats.all(|format| format == Some(first)) {
            true => Some(first),
            false => Some(WeightFormat::F32),
        }
    }
}

/// The format most of `file`'s matrices are held in as stored (by their values).
fn most_stored(file: &GgufFile, as_stored: AsStored) -> WeightFormat {
    let mut values = std::collections::BTreeMap::<&str, (usize, WeightFormat)>::new();
    for tensor in file.tensors().values().filter(|t| t.dims.len() >= 2) {
        let format = as_stored.format(tensor.ggml_type);
        let entry = values.entry(WeightFormat::ALL.iter().find(|(_, f)| *f == format).map_or("", |(n, _)| *n));
        entry.or_insert((0, format)).0 += tensor.len();
    }
    values.into_values().max_by_key(|(count, _)| *count).map_or(WeightFormat::F32, |(_, format)| format)
}

/// Puts `unit`-byte heads in the checkpoint's grouped order: `grouped[g · per_key + j]` is
/// `tiled[j · key_heads + g]` (the converter's `_reorder_v_heads`, inverted).
fn to_grouped(tiled: &[u8], grouped: &mut [u8], unit: usize, key_heads: usize, per_key: usize) {
    for g in 0..key_heads {
        for j in 0..per_key {
            let (to, from) = (g * per_key + j, j * key_heads + g);
            grouped[to * unit..(to + 1) * unit].copy_from_slice(&tiled[from * unit..(from + 1) * unit]);
        }
    }
}

/// The tensor in f32 bytes.
fn widened<'a>(ggml_type: GgmlType, bytes: &[u8]) -> (GgmlType, Cow<'a, [u8]>) {
    let values = dequantized(ggml_type, bytes);
    (GgmlType::F32, Cow::Owned(values.iter().flat_map(|v| v.to_le_bytes()).collect()))
}

/// `values`, unless one is NaN or infinite (a NaN weight would make every answer NaN).
fn finite(name: &str, values: Vec<f32>) -> Result<Vec<f32>, LoadError> {
    let mut bad = values.iter().enumerate().filter(|(_, v)| !v.is_finite()).map(|(i, _)| i);
    match bad.next() {
        None => Ok(values),
        Some(first) => Err(LoadError::NonFinite { name: name.to_owned(), count: 1 + bad.count(), first }),
    }
}

/// The weight stored as `ggml_type` in `bytes` (rows of `d_in`), in `format`: blocks as they are
/// where the format is the type's, Q4_0 widened to Q8_0 exactly, floats converted as a
/// checkpoint's are; blocks are not rounded again into another block format.
fn values_in(
    name: &str,
    ggml_type: GgmlType,
    bytes: &[u8],
    d_in: usize,
    format: WeightFormat,
) -> Result<WeightValues, LoadError> {
    let is_float = matches!(ggml_type, GgmlType::F32 | GgmlType::F16 | GgmlType::Bf16);
    match (format, ggml_type) {
        (WeightFormat::F32, _) => Ok(WeightValues::F32(finite(name, dequantized(ggml_type, bytes))?)),
        (WeightFormat::F16, GgmlType::F16) | (WeightFormat::Bf16, GgmlType::Bf16) => {
            let half = format.half().expect("a 16-bit format");
            let bits: Vec<u16> = bytes.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]])).collect();
            match bits.iter().position(|&b| !half.is_finite(b)) {
                None => Ok(WeightValues::Half(half, bits)),
                Some(first) => Err(LoadError::NonFinite {
                    name: name.to_owned(),
                    count: bits.iter().filter(|&&b| !half.is_finite(b)).count(),
                    first,
                }),
            }
        }
        (WeightFormat::Q8, GgmlType::Q8_0) => blocks(name, ggml_type, bytes, |block, values: &mut Vec<i8>| {
            values.extend(block[2..].iter().map(|&q| q as i8));
        })
        .map(|(values, scales)| WeightValues::Q8(values, scales)),
        (WeightFormat::Q4, GgmlType::Q4_0) => {
            blocks(name, ggml_type, bytes, |block, packed: &mut Vec<u8>| packed.extend_from_slice(&block[2..]))
                .map(|(packed, scales)| WeightValues::Q4(packed, scales))
        }
        // Q4_0's values are Q8_0 values of the same scale: `q - 8` in -8..=7.
        (WeightFormat::Q8, GgmlType::Q4_0) => blocks(name, ggml_type, bytes, |block, values: &mut Vec<i8>| {
            let nibbles = &block[2..];
            values.extend(nibbles.iter().map(|&b| (b & 0x0f) as i8 - 8));
            values.extend(nibbles.iter().map(|&b| (b >> 4) as i8 - 8));
        })
        .map(|(values, scales)| WeightValues::Q8(values, scales)),
        _ if is_float => {
            let values = finite(name, dequantized(ggml_type, bytes))?;
            match WeightValues::from_f32(values, d_in, format) {
                Some(values) => Ok(values),
                None => {
                    let values = dequantized(ggml_type, bytes);
                    let half = format.half().expect("only a 16-bit format has a range to leave");
                    let beyond: Vec<usize> =
                        (0..values.len()).filter(|&i| half.from_f32(values[i]).is_none()).collect();
                    Err(LoadError::OutOfRange { name: name.to_owned(), count: beyond.len(), first: beyond[0], format })
                }
            }
        }
        _ => Err(LoadError::Blocks {
            name: name.to_owned(),
            reason: format!(
                "stored in {} blocks, asked for {format}: load it with `--weights auto` (each weight as stored) or `f32` (rounding blocks into other blocks would round twice)",
                ggml_type.name()
            ),
        }),
    }
}

/// The blocks of a Q8_0 or Q4_0 tensor (each an f16 scale, then its values) split into their
/// values, as `take` appends a block's, and their scales, which must be finite.
fn blocks<T>(
    name: &str,
    ggml_type: GgmlType,
    bytes: &[u8],
    take: impl Fn(&[u8], &mut Vec<T>),
) -> Result<(Vec<T>, Vec<f16>), LoadError> {
    let count = bytes.len() / ggml_type.block_bytes();
    let (mut values, mut scales) = (Vec::with_capacity(count * ggml_type.block_values()), Vec::with_capacity(count));
    for (i, block) in bytes.chunks_exact(ggml_type.block_bytes()).enumerate() {
        let d = f16::from_le_bytes([block[0], block[1]]);
        if !d.is_finite() {
            return Err(LoadError::Blocks { name: name.to_owned(), reason: format!("the scale of block {i} is {d}") });
        }
        scales.push(d);
        take(block, &mut values);
    }
    Ok((values, scales))
}

/// Each expert's gate rows, then its up rows: the checkpoint's fused `gate_up_proj`.
fn fuse_experts(gate: WeightValues, up: WeightValues, experts: usize) -> WeightValues {
    fn zip<T: Copy>(a: Vec<T>, b: Vec<T>, experts: usize) -> Vec<T> {
        let (each_a, each_b) = (a.len() / experts, b.len() / experts);
        let mut fused = Vec::with_capacity(a.len() + b.len());
        for (a, b) in a.chunks_exact(each_a).zip(b.chunks_exact(each_b)) {
            fused.extend_from_slice(a);
            fused.extend_from_slice(b);
        }
        fused
    }
    match (gate, up) {
        (WeightValues::F32(a), WeightValues::F32(b)) => WeightValues::F32(zip(a, b, experts)),
        (WeightValues::Half(half, a), WeightValues::Half(_, b)) => WeightValues::Half(half, zip(a, b, experts)),
        (WeightValues::Q8(a, sa), WeightValues::Q8(b, sb)) => {
            WeightValues::Q8(zip(a, b, experts), zip(sa, sb, experts))
        }
        (WeightValues::Q4(a, sa), WeightValues::Q4(b, sb)) => {
            WeightValues::Q4(zip(a, b, experts), zip(sa, sb, experts))
        }
        _ => unreachable!("the parts of a weight are read in one format"),
    }
}
