//! The modules that hold a weight in 8-bit or 4-bit blocks or in 16-bit floats, and what a
//! projection's input is (which sets how a Q8_0 weight's integer dot rounds it). Which format a
//! parameter gets is [`crate::weight_format`]'s.

use burn::module::{Module, Param, ParamId};
use burn::tensor::{FloatDType, Int, Tensor, backend::Backend};
use decider_ops::{
    ActivationBits, BlockInts, Half, HalfMatmul, Q4_BLOCK, Q4Matmul, Q8_BLOCK, Q8Matmul, grouped_half_float_matmul,
    grouped_half_matmul, grouped_q4_matmul, grouped_q8_matmul, half_bits_f32, half_float_matmul, half_matmul,
    holds_half_floats, q4_matmul, q8_matmul,
};
use serde::{Deserialize, Serialize};

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
