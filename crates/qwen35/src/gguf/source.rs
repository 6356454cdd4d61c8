//! A GGUF file as a [`TensorSource`]: each tensor the model asks for by its checkpoint name is
//! found where llama.cpp's converter put it ([`names`](super::names)), its value heads put back in
//! the checkpoint's order where they are whole blocks ([`heads`](super::heads)) and its values'
//! transform undone, and held in
//! the format the load asks for ([`held`](super::held)); with `auto`, each weight in the format
//! it is stored in (a GGUF file mixes types: a Q8_0 file keeps its norms in F32 and its narrow
//! experts in F16).
//!
//! Which stored types are held as they are ([`AsStored`], then the format policy,
//! [`crate::weight_format::held_as_stored`]): F32, F16, BF16, Q8_0, Q4_0 (Q4_0 token tables as
//! Q8_0, which holds them exactly, as the format policy keeps token tables 8-bit), Q4_K, Q5_K and
//! Q6_K; Q5_0 as Q8_0 and Q3_K as Q6_K, which hold their values exactly. Q2_K, Q4_1 and Q5_1
//! (a min a block of 16 or 32 values) are held in f32, dequantized exactly as llama.cpp
//! dequantizes them, until they have kernels of their own (issue #38).

use std::borrow::Cow;
use std::path::Path;

use decider_ops::{GgmlType, Half};
use rayon::prelude::*;

use super::config::config_of;
use super::file::{GgufFile, dequantized};
use super::heads::ValueHeads;
use super::held::{finite, fuse_experts, values_in};
use super::names::{self, Heads, Stored, Transform};
use crate::config::Qwen35Config;
use crate::error::LoadError;
use crate::loader::{Load, TensorSource};
use crate::model::Qwen35Model;
use crate::value_heads::ValueHeadOrder;
use crate::weight::{WeightValues, stack_dims};
use crate::weight_choice::WeightChoice;
use crate::weight_format::{FormatOps, WeightFormat, WeightUse};

/// Loads the Qwen3.5 model of GGUF file `path` with its weights in `weights` (`auto`: each as
/// stored).
pub fn load_gguf<B: FormatOps>(
    path: impl AsRef<Path>,
    weights: impl Into<WeightChoice>,
    device: &B::Device,
) -> Result<(Qwen35Config, Qwen35Model<B>), LoadError> {
    model_of(&GgufFile::open(path)?, weights, device)
}

/// The Qwen3.5 model of an open GGUF file, with its weights in `weights` (`auto`: each as
/// stored). The model's [`Qwen35Model::format`] is the format most of its weights are held in.
pub fn model_of<B: FormatOps>(
    file: &GgufFile,
    weights: impl Into<WeightChoice>,
    device: &B::Device,
) -> Result<(Qwen35Config, Qwen35Model<B>), LoadError> {
    let config = config_of(file)?;
    let source = GgufSource::new::<B>(file, &config, weights.into(), device);
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
            // Q5_0's values are Q8_0's of the same scale, Q3_K's Q6_K's: held exactly so.
            GgmlType::Q8_0 | GgmlType::Q5_0 => WeightFormat::Q8,
            GgmlType::Q4_0 => WeightFormat::Q4,
            GgmlType::Q4K => WeightFormat::Q4K,
            GgmlType::Q5K => WeightFormat::Q5K,
            GgmlType::Q6K | GgmlType::Q3K => WeightFormat::Q6K,
            GgmlType::F32 | GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q2K => WeightFormat::F32,
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
        GgufSource { file, heads: ValueHeads::of(config), as_stored, format }
    }

    /// The format asked for, or with `auto` the one most weights are held in.
    pub fn format(&self) -> WeightFormat {
        self.format
    }

    fn stored(&self, name: &str) -> Result<Stored, LoadError> {
        names::stored(name).ok_or_else(|| LoadError::Gguf {
            path: self.file.path().to_path_buf(),
            reason: format!("the model reads `{name}`, which the GGUF name rules do not place (gguf/names.rs)"),
        })
    }

    /// File tensor `name`, checked to hold `expected` (`[..., out, in]`; dimensions of 1 aside:
    /// the file stores the conv's `[C, 1, K]` as `[C, K]`), with its value heads in the order
    /// [`ValueHeads::order`] gives: its type and bytes.
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
        let rows = expected.first().copied().unwrap_or(1);
        let bytes = self.heads.ordered(tensor.ggml_type, Cow::Borrowed(bytes), rows, heads).map_err(|reason| {
            LoadError::Gguf { path: self.file.path().to_path_buf(), reason: format!("tensor `{name}`: {reason}") }
        })?;
        Ok((tensor.ggml_type, bytes))
    }

    /// File tensor `name` as `expected`'s weight in `format`.
    fn weight_of(
        &self,
        name: &str,
        expected: &[usize],
        heads: Heads,
        format: WeightFormat,
    ) -> Result<WeightValues, LoadError> {
        let (stored, bytes) = self.read(name, expected, heads)?;
        let d_in = expected.last().copied().unwrap_or(1);
        let values = values_in(name, stored, &bytes, d_in, format);
        self.file.release(name);
        values
    }

    /// The tensors weight `name` is read from: the fused one where the file has it.
    fn parts(&self, stored: &Stored) -> Vec<String> {
        match &stored.fused {
            Some(fused) if self.file.tensors().contains_key(fused) => vec![fused.clone()],
            _ => stored.names.clone(),
        }
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
        let (stored_type, bytes) = self.read(file_name, shape, stored.heads)?;
        let mut values = dequantized(stored_type, &bytes);
        self.file.release(file_name);
        match stored.transform {
            Transform::AsIs => {}
            Transform::PlusOne => values.par_iter_mut().for_each(|v| *v -= 1.0),
            Transform::NegExp => values.par_iter_mut().for_each(|v| *v = (-*v).ln()),
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
        match self.parts(&stored).as_slice() {
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
        let mut formats = self
            .parts(&stored)
            .into_iter()
            .map(|name| Some(as_stored.format(self.file.tensors().get(&name)?.ggml_type)));
        let first = formats.next()??;
        match formats.all(|format| format == Some(first)) {
            true => Some(first),
            false => Some(WeightFormat::F32),
        }
    }

    fn value_head_order(&self, name: &str) -> ValueHeadOrder {
        let order = |stored: Stored| {
            let tensor = self.file.tensors().get(self.parts(&stored).first()?)?;
            Some(self.heads.order(tensor.ggml_type, stored.heads))
        };
        names::stored(name).and_then(order).unwrap_or_default()
    }
}

/// The format most of `file`'s matrices are held in as stored (by their values).
fn most_stored(file: &GgufFile, as_stored: AsStored) -> WeightFormat {
    let mut values: Vec<(WeightFormat, usize)> = Vec::new();
    for tensor in file.tensors().values().filter(|t| t.dims.len() >= 2) {
        let format = as_stored.format(tensor.ggml_type);
        match values.iter_mut().find(|(f, _)| *f == format) {
            Some((_, count)) => *count += tensor.len(),
            None => values.push((format, tensor.len())),
        }
    }
    values.into_iter().max_by_key(|(_, count)| *count).map_or(WeightFormat::F32, |(format, _)| format)
}
