//! Weight formats chosen at load, and the modules that hold weights in 8-bit and 4-bit blocks
//! and in 16-bit floats.
//!
//! Which parameters a format applies to: the large projections (DeltaNet `in_proj_qkv`,
//! `in_proj_z`, `out_proj`; attention `q/k/v/o_proj`; the MLP and shared expert; the routed
//! experts) and the token tables (the embeddings and an untied output head, see
//! [`crate::token_table`]; 8-bit in `q4` too: a table's rows are the label logits themselves):
//! all but a fraction of a percent of the weights. Everything else
//! stays f32 whatever the format: the norms, the router and shared-expert gates, the DeltaNet
//! gates `in_proj_a`/`in_proj_b` (their outputs set the decay and the write strength of the
//! recurrent state), `A_log`, `dt_bias` and the conv kernel. A weight whose input width (a
//! table's hidden width) is not a whole number of blocks stays f32 in the block formats.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use burn::module::{Module, Param, ParamId};
use burn::tensor::{FloatDType, Int, Tensor, backend::Backend};
use decider_ops::{
    ActivationBits, BlockInts, Half, HalfMatmul, Q4_BLOCK, Q4Matmul, Q8_BLOCK, Q8Matmul, grouped_half_float_matmul,
    grouped_half_matmul, grouped_q4_matmul, grouped_q8_matmul, half_bits_f32, half_float_matmul, half_matmul,
    holds_half_floats, q4_matmul, q8_matmul,
};
use serde::{Deserialize, Serialize};

use crate::checkpoint::Checkpoint;
use crate::error::LoadError;

/// How the projection and expert weights are held in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WeightFormat {
    /// 32-bit floats: exact, 4 bytes a weight.
    #[default]
    F32,
    /// llama.cpp's Q8_0: 8-bit values in blocks of 32 input values with one f16 scale each,
    /// 1.0625 bytes a weight (see [`decider_ops::quantize_q8`]).
    Q8,
    /// llama.cpp's Q4_0: 4-bit values in blocks of 32 input values with one f16 scale each,
    /// 0.5625 bytes a weight, the scale chosen for the least error (see
    /// [`decider_ops::quantize_q4`]).
    Q4,
    /// IEEE half floats, 2 bytes a weight: exact for an f16 checkpoint; others are rounded to
    /// nearest, and a weight beyond f16's range (65,504) is refused at load.
    F16,
    /// bfloat16, 2 bytes a weight: exact for a bf16 checkpoint (the released ones are), so the
    /// same answers as `f32` in half its memory.
    Bf16,
}

impl WeightFormat {
    /// Every format, by its command-line name.
    pub const ALL: [(&'static str, WeightFormat); 5] = [
        ("f32", WeightFormat::F32),
        ("q8", WeightFormat::Q8),
        ("q4", WeightFormat::Q4),
        ("f16", WeightFormat::F16),
        ("bf16", WeightFormat::Bf16),
    ];

    /// The format that holds weights in `half`.
    pub fn of_half(half: Half) -> WeightFormat {
        match half {
            Half::F16 => WeightFormat::F16,
            Half::Bf16 => WeightFormat::Bf16,
        }
    }

    /// The bytes a weight of `half` takes on `device`: 2 as a float tensor of that dtype
    /// (`decider_ops::holds_half_floats`), else the size of the int its pattern is held in.
    pub fn half_bytes<B: FormatOps>(half: Half, device: &B::Device) -> usize {
        match holds_half_floats::<B>(half, device) {
            true => 2,
            false => B::half_bits_dtype().size(),
        }
    }

    /// The format a weight with `d_input` input values gets: block formats need whole blocks.
    pub fn for_input_width(self, d_input: usize) -> WeightFormat {
        match self {
            WeightFormat::Q8 if d_input % Q8_BLOCK != 0 => WeightFormat::F32,
            WeightFormat::Q4 if d_input % Q4_BLOCK != 0 => WeightFormat::F32,
            format => format,
        }
    }
}

impl fmt::Display for WeightFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, _) = Self::ALL.iter().find(|(_, format)| format == self).expect("every format is in ALL");
        f.write_str(name)
    }
}

impl FromStr for WeightFormat {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        Self::ALL.iter().find(|(known, _)| *known == name).map(|(_, format)| *format).ok_or_else(|| {
            let names: Vec<&str> = Self::ALL.iter().map(|(name, _)| *name).collect();
            format!("unknown weight format `{name}` (expected one of: {})", names.join(", "))
        })
    }
}

/// The weight format asked for at load: one format, or `auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightChoice {
    /// The best format that holds a model folder's weights exactly: the format a `decider
    /// quantize`d folder is stored in; else the 16-bit float a checkpoint's matrices are all
    /// stored in (the released checkpoints: bf16), where the backend holds it in 2 bytes a
    /// weight ([`WeightFormat::half_bytes`]; not bf16 on wgpu); else f32. As transformers'
    /// `torch_dtype="auto"`: the checkpoint's own precision, in half f32's memory.
    #[default]
    Auto,
    Exactly(WeightFormat),
}

impl WeightChoice {
    /// The format to load the model folder `dir` in on `device`.
    pub fn for_folder<B: FormatOps>(self, dir: &Path, device: &B::Device) -> Result<WeightFormat, LoadError> {
        let WeightChoice::Auto = self else {
            return Ok(self.without_folder());
        };
        let checkpoint = Checkpoint::open_dir(dir)?;
        if let Some(format) = checkpoint.stored_format() {
            return Ok(format);
        }
        let half = checkpoint.matrices_half().filter(|&half| WeightFormat::half_bytes::<B>(half, device) == 2);
        Ok(half.map_or(WeightFormat::F32, WeightFormat::of_half))
    }

    /// The format of a model built without a folder (random weights).
    pub fn without_folder(self) -> WeightFormat {
        match self {
            WeightChoice::Exactly(format) => format,
            WeightChoice::Auto => WeightFormat::F32,
        }
    }
}

impl fmt::Display for WeightChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WeightChoice::Auto => f.write_str("auto"),
            WeightChoice::Exactly(format) => format.fmt(f),
        }
    }
}

impl FromStr for WeightChoice {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        match name {
            "auto" => Ok(WeightChoice::Auto),
            _ => name.parse().map(WeightChoice::Exactly).map_err(|_| {
                let names: Vec<&str> = WeightFormat::ALL.iter().map(|(name, _)| *name).collect();
                format!("unknown weight format `{name}` (expected one of: auto, {})", names.join(", "))
            }),
        }
    }
}

/// What a projection's input is: it sets how finely a Q8_0 weight's integer dot rounds that input
/// ([`ActivationBits`], whose doc gives the measured effect).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProjectionInput {
    /// An RMSNorm's output (the layer's `input_layernorm` or `post_attention_layernorm`): values
    /// of one size, rounded to 8 bits, as llama.cpp does.
    Normed,
    /// A product of activations (`silu(gate) · up`, attention's output times its gate, the
    /// DeltaNet's gated norm): a few values far above the rest, rounded to 16 bits.
    Product,
}

impl ProjectionInput {
    /// The integers a Q8_0 weight's integer dot rounds this input to.
    pub fn activation_bits(self) -> ActivationBits {
        match self {
            ProjectionInput::Normed => ActivationBits::Eight,
            ProjectionInput::Product => ActivationBits::Sixteen,
        }
    }
}

/// Weights `[out, in]` in Q8_0 blocks, in PyTorch's orientation (a row per output, blocks along
/// the input): one projection's (`D = 2`) or a stack of `[experts, out, in]` (`D = 3`). Each
/// rank is stored as the kernel reads it, so no reshape runs per call (burn-ndarray 0.21's reshape
/// copies the whole array).
#[derive(Module, Debug)]
pub struct Q8Weight<B: Backend, const D: usize> {
    /// `[..., out, in]` values in `-127..=127`, as the backend holds them (`decider_ops::q8_values`).
    pub values: Param<Tensor<B, D, Int>>,
    /// `[..., out, in / 32]`: each block's scale, as f16 bits (`decider_ops::block_scales`).
    pub scales: Param<Tensor<B, D, Int>>,
    /// What the input is rounded to for the integer dot (set by the input's kind, not stored).
    #[module(skip)]
    pub bits: ActivationBits,
}

impl<B: Q8Matmul, const D: usize> Q8Weight<B, D> {
    /// Lazy zero weights of shape `[..., out, in]` for an `input` of that kind, to be filled from
    /// a checkpoint (nothing is allocated until a parameter is read).
    pub fn init(weight_dims: [usize; D], input: ProjectionInput, device: &B::Device) -> Self {
        let (values, scales) = lazy_q8_params(weight_dims, device);
        Q8Weight { values, scales, bits: input.activation_bits() }
    }

    /// The weight's shape `[..., out, in]`.
    pub fn weight_dims(&self) -> [usize; D] {
        B::block_storage().ints_shape(BlockInts::Q8Values, self.values.lazy_shape().dims())
    }
}

/// Lazy zero parameters for Q8_0 `values [..., rows, cols]` and their `scales [..., rows, cols /
/// 32]`, in the backend's `decider_ops::BlockStorage` (nothing is allocated until a parameter is read).
pub(crate) fn lazy_q8_params<B: Q8Matmul, const D: usize>(
    weight_dims: [usize; D],
    device: &B::Device,
) -> (Param<Tensor<B, D, Int>>, Param<Tensor<B, D, Int>>) {
    let storage = B::block_storage();
    let mut scales_dims = weight_dims;
    scales_dims[D - 1] /= Q8_BLOCK;
    (
        lazy_int_param(storage.shape(BlockInts::Q8Values, weight_dims), device),
        lazy_int_param(storage.shape(BlockInts::ScaleBits, scales_dims), device),
    )
}

/// A lazy zero int parameter (nothing is allocated until it is read).
fn lazy_int_param<B: Backend, const D: usize>(shape: [usize; D], device: &B::Device) -> Param<Tensor<B, D, Int>> {
    Param::uninitialized(
        ParamId::new(),
        move |device, _| Tensor::zeros(shape, device),
        device.clone(),
        false,
        shape.into(),
    )
}

impl<B: Q8Matmul> Q8Weight<B, 2> {
    /// `x [n, in] · Wᵀ -> [n, out]`.
    pub fn matmul(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        q8_matmul(x, self.values.val(), self.scales.val(), self.bits)
    }
}

impl<B: Q8Matmul> Q8Weight<B, 3> {
    /// `x [rows, in]`, sorted by expert with `counts [experts]` rows each, times each row's
    /// expert's `Wᵀ`: `[rows, out]`.
    pub fn grouped_matmul(&self, x: Tensor<B, 2>, counts: Tensor<B, 1, Int>) -> Tensor<B, 2> {
        grouped_q8_matmul(x, self.values.val(), self.scales.val(), counts, self.bits)
    }
}

/// Weights `[out, in]` in Q4_0 blocks, as [`Q8Weight`]: one projection's (`D = 2`) or the
/// experts' stack (`D = 3`), two values a byte.
#[derive(Module, Debug)]
pub struct Q4Weight<B: Backend, const D: usize> {
    /// `[..., out, in / 2]` packed bytes (`decider_ops::q4_values`).
    pub values: Param<Tensor<B, D, Int>>,
    /// `[..., out, in / 32]`: each block's scale, as f16 bits (`decider_ops::block_scales`).
    pub scales: Param<Tensor<B, D, Int>>,
}

impl<B: Q8Matmul, const D: usize> Q4Weight<B, D> {
    /// Lazy zero weights of shape `[..., out, in]`, to be filled from a checkpoint.
    pub fn init(weight_dims: [usize; D], device: &B::Device) -> Self {
        let storage = B::block_storage();
        let (mut bytes_dims, mut scales_dims) = (weight_dims, weight_dims);
        bytes_dims[D - 1] /= 2;
        scales_dims[D - 1] /= Q4_BLOCK;
        Q4Weight {
            values: lazy_int_param(storage.shape(BlockInts::Q4Bytes, bytes_dims), device),
            scales: lazy_int_param(storage.shape(BlockInts::ScaleBits, scales_dims), device),
        }
    }

    /// The weight's shape `[..., out, in]`: two values a byte.
    pub fn weight_dims(&self) -> [usize; D] {
        let mut dims = B::block_storage().ints_shape(BlockInts::Q4Bytes, self.values.lazy_shape().dims());
        dims[D - 1] *= 2;
        dims
    }
}

impl<B: Q4Matmul> Q4Weight<B, 2> {
    /// `x [n, in] · Wᵀ -> [n, out]`.
    pub fn matmul(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        q4_matmul(x, self.values.val(), self.scales.val())
    }
}

impl<B: Q4Matmul> Q4Weight<B, 3> {
    /// As [`Q8Weight::grouped_matmul`].
    pub fn grouped_matmul(&self, x: Tensor<B, 2>, counts: Tensor<B, 1, Int>) -> Tensor<B, 2> {
        grouped_q4_matmul(x, self.values.val(), self.scales.val(), counts)
    }
}

/// Weights `[out, in]` in 16-bit floats, as a checkpoint stores them: one projection's (`D =
/// 2`) or the experts' stack (`D = 3`). Which 16-bit float is the format variant that holds it
/// (`F16` or `Bf16`); how it is held is the device's ([`decider_ops::holds_half_floats`]).
#[derive(Module, Debug)]
pub enum HalfWeight<B: Backend, const D: usize> {
    /// A float tensor of the 16-bit dtype (`decider_ops::half_floats`): 2 bytes a weight.
    Floats(Param<Tensor<B, D>>),
    /// The 16-bit patterns in an int tensor (`decider_ops::half_bits`), where the device has no
    /// float tensor of this type.
    Bits(Param<Tensor<B, D, Int>>),
}

impl<B: Backend, const D: usize> HalfWeight<B, D> {
    /// Lazy zero weights of shape `[..., out, in]` in `half`, to be filled from a checkpoint.
    pub fn init(shape: [usize; D], half: Half, device: &B::Device) -> Self {
        match holds_half_floats::<B>(half, device) {
            true => HalfWeight::Floats(Param::uninitialized(
                ParamId::new(),
                move |device, _| Tensor::zeros(shape, (device, half.dtype())),
                device.clone(),
                false,
                shape.into(),
            )),
            false => HalfWeight::Bits(lazy_int_param(shape, device)),
        }
    }

    /// The weight's shape `[..., out, in]`.
    pub fn dims(&self) -> [usize; D] {
        match self {
            HalfWeight::Floats(weight) => weight.lazy_shape().dims(),
            HalfWeight::Bits(bits) => bits.lazy_shape().dims(),
        }
    }
}

impl<B: HalfMatmul> HalfWeight<B, 2> {
    /// `x [n, in] · Wᵀ -> [n, out]`.
    pub fn matmul(&self, x: Tensor<B, 2>, half: Half) -> Tensor<B, 2> {
        match self {
            HalfWeight::Floats(weight) => half_float_matmul(x, weight.val()),
            HalfWeight::Bits(bits) => half_matmul(x, bits.val(), half),
        }
    }
}

impl<B: Backend> HalfWeight<B, 2> {
    /// Rows `index [n]` in f32: `[n, in]`.
    pub fn rows(&self, index: Tensor<B, 1, Int>, half: Half) -> Tensor<B, 2> {
        match self {
            HalfWeight::Floats(weight) => weight.val().select(0, index).cast(FloatDType::F32),
            HalfWeight::Bits(bits) => half_bits_f32(bits.val().select(0, index), half),
        }
    }

    /// Rows `start..start + count` in f32.
    pub fn row_range(&self, start: usize, count: usize, half: Half) -> Tensor<B, 2> {
        match self {
            HalfWeight::Floats(weight) => weight.val().narrow(0, start, count).cast(FloatDType::F32),
            HalfWeight::Bits(bits) => half_bits_f32(bits.val().narrow(0, start, count), half),
        }
    }
}

impl<B: HalfMatmul> HalfWeight<B, 3> {
    /// As [`Q8Weight::grouped_matmul`].
    pub fn grouped_matmul(&self, x: Tensor<B, 2>, counts: Tensor<B, 1, Int>, half: Half) -> Tensor<B, 2> {
        match self {
            HalfWeight::Floats(weight) => grouped_half_float_matmul(x, weight.val(), counts),
            HalfWeight::Bits(bits) => grouped_half_matmul(x, bits.val(), counts, half),
        }
    }
}

/// What the weight formats compute with: each backend's Q8_0, Q4_0 and 16-bit matmuls (and the
/// layouts a loader puts their weights in).
pub trait FormatOps: Q8Matmul + Q4Matmul + HalfMatmul {}

impl<B: Q8Matmul + Q4Matmul + HalfMatmul> FormatOps for B {}

#[cfg(test)]
mod tests {
    use super::{WeightChoice, WeightFormat};

    #[test]
    fn choices_parse_and_print_by_their_names() {
        for (name, choice) in [
            ("auto", WeightChoice::Auto),
            ("f32", WeightChoice::Exactly(WeightFormat::F32)),
            ("q8", WeightChoice::Exactly(WeightFormat::Q8)),
            ("q4", WeightChoice::Exactly(WeightFormat::Q4)),
            ("f16", WeightChoice::Exactly(WeightFormat::F16)),
            ("bf16", WeightChoice::Exactly(WeightFormat::Bf16)),
        ] {
            assert_eq!(name.parse::<WeightChoice>(), Ok(choice));
            assert_eq!(choice.to_string(), name);
        }
        assert_eq!(
            "q3".parse::<WeightChoice>(),
            Err("unknown weight format `q3` (expected one of: auto, f32, q8, q4, f16, bf16)".to_owned())
        );
        assert_eq!(WeightChoice::Auto.without_folder(), WeightFormat::F32);
    }
}
