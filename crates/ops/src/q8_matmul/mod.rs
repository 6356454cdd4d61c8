//! Matmul with weights in 8-bit blocks: llama.cpp's Q8_0 layout.
//!
//! A weight `W [out, in]` (PyTorch's orientation: a row per output) is cut along `in` into
//! blocks of [`Q8_BLOCK`] values; each block keeps one scale `d = max|w| / 127` and the values
//! `round(w / d)` as `i8`, so `w ≈ value * d`. As in llama.cpp's `quantize_row_q8_0_ref`
//! (ggml/src/ggml-quants.c), the values are rounded with the f32 scale and the scale is then
//! stored as an f16: 34 bytes a block, 1.0625 a weight. Tensors hold the values and the f16's
//! bits ([`block_scales`]) as ints of the backend's [`BlockStorage`], since not every backend has
//! 8-bit ints or f16 floats.
//!
//! The activations are rounded to integer blocks too, for an integer dot (llama.cpp's CPU matmul
//! does the same before `ggml_vec_dot_q8_0_q8_0`, ggml/src/ggml-cpu/quants.c): each block of 32
//! input values of each row of `x` keeps `d = max|x| / 127` (as f32) and `round(x / d)`, ties to
//! even (llama.cpp multiplies by `1 / d`; a division is exact on every backend, a reciprocal is
//! not). Unlike llama.cpp, the caller may ask for 16-bit blocks instead ([`ActivationBits`]:
//! `d = max|x| / 32,767`): a block is then held to `max|x| / 65,534` instead of `max|x| / 254`,
//! and the dot multiplies 16-bit activations by the 8-bit weights. So `q8_matmul` is
//! `round(x) · Wᵀ` with `round` = [`round_activations`] on every backend, whichever kernel runs:
//! the integer dot where a CPU has one, the rounded activations times the dequantized weight
//! elsewhere.

use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{DType, Int, Tensor, TensorData, TensorPrimitive, backend::Backend};
use half::f16;
use rayon::prelude::*;

use crate::{BlockInts, BlockStorage};

// The kernels, one file per backend; every other backend takes the generic form.
#[cfg(feature = "autodiff")]
mod autodiff;
#[cfg(feature = "candle")]
mod candle;
#[cfg(feature = "cpu-kernels")]
pub mod cpu;
#[cfg(feature = "ndarray")]
mod ndarray;
#[cfg(test)]
mod tests;

crate::backends::generic_forms!(Q8Matmul, kernels: ndarray, candle, autodiff);

/// Values per block (one scale each).
pub const Q8_BLOCK: usize = 32;

/// The integers [`q8_matmul`] rounds its activations to ([`round_activations`]).
///
/// Eight bits (llama.cpp's choice) keep an input whose values are of one size, such as an
/// RMSNorm's output, to about 0.4 % of each block's largest value. An input that is a product of
/// activations (`silu(gate) · up`, an attention output times its gate) has a few values far above
/// the rest, and eight bits round the rest of their block coarsely: with eight bits everywhere,
/// q8 moved decisions 1.7 times as far as its weights' own rounding (the accuracy report in
/// `docs/formats.md`); sixteen bits for such inputs bring it to the weights' own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActivationBits {
    Eight,
    Sixteen,
}

impl ActivationBits {
    /// The largest integer a block holds: its largest value's magnitude is rounded to it.
    pub const fn max_value(self) -> f32 {
        match self {
            ActivationBits::Eight => 127.0,
            ActivationBits::Sixteen => 32_767.0,
        }
    }
}

/// `x · Wᵀ` with `W` in Q8_0 blocks.
pub trait Q8Matmul: Backend {
    /// How this backend holds the values, Q4_0's bytes and the scales' bits. The default packs
    /// them into its own ints ([`BlockStorage::Words`]), which needs its bitwise int ops.
    fn block_storage() -> BlockStorage {
        BlockStorage::Words
    }

    /// The order this backend's kernel reads a weight's values in: `values` are one or a stack of
    /// weights `[out, in]`, row-major, returned as the same number of values that
    /// [`Q8Matmul::q8_matmul`] then receives, weight by weight. The default keeps them as they
    /// are; a kernel may regroup rows (ndarray on x86-64 interleaves them by 16 or 8 for its
    /// integer dot). [`q8_values`] applies it.
    fn q8_layout(values: Vec<i8>, d_out: usize, d_in: usize) -> Vec<i8> {
        let _ = (d_out, d_in);
        values
    }

    /// `x`: `[n, in]`, rounded to `bits`; `values`: `[out, in]` ints in `-127..=127` ([`q8_values`]:
    /// in the order of [`Q8Matmul::q8_layout`]); `scales`: `[out, in / 32]` f16 bits
    /// ([`block_scales`]); both as [`Q8Matmul::block_storage`] holds them. Returns `[n, out]`.
    fn q8_matmul(
        x: FloatTensor<Self>,
        values: IntTensor<Self>,
        scales: IntTensor<Self>,
        bits: ActivationBits,
    ) -> FloatTensor<Self> {
        let x = Tensor::<Self, 2>::from_primitive(TensorPrimitive::Float(x));
        let values = Tensor::<Self, 2, Int>::from_primitive(values);
        let scales = Tensor::<Self, 2, Int>::from_primitive(scales);
        generic::q8_matmul(x, values, scales, bits).into_primitive().tensor()
    }

    /// The grouped form (see [`crate::grouped_matmul`]): `x [rows, in]` sorted by expert,
    /// `counts [experts]` rows each; `values [experts, out, in]` (each weight in
    /// [`Q8Matmul::q8_layout`]) and `scales [experts, out, in / 32]`. Returns `[rows, out]`. The
    /// default is a [`Q8Matmul::q8_matmul`] per expert with rows.
    fn grouped_q8_matmul(
        x: FloatTensor<Self>,
        values: IntTensor<Self>,
        scales: IntTensor<Self>,
        counts: IntTensor<Self>,
        bits: ActivationBits,
    ) -> FloatTensor<Self> {
        generic::grouped_q8_matmul::<Self>(x, values, scales, counts, bits)
    }
}

/// `round(x) [n, in] · Wᵀ -> [n, out]` with `W [out, in]` given as Q8_0 `values` and `scales`,
/// `x` rounded to `bits`.
pub fn q8_matmul<B: Q8Matmul>(
    x: Tensor<B, 2>,
    values: Tensor<B, 2, Int>,
    scales: Tensor<B, 2, Int>,
    bits: ActivationBits,
) -> Tensor<B, 2> {
    let ([_, d_in], [out, _]) = (x.dims(), values.dims());
    let storage = B::block_storage();
    assert!(
        d_in % Q8_BLOCK == 0
            && values.dims() == storage.shape(BlockInts::Q8Values, [out, d_in])
            && scales.dims() == storage.shape(BlockInts::ScaleBits, [out, d_in / Q8_BLOCK]),
        "q8_matmul: x [_, {d_in}], values {:?} and scales {:?} do not match",
        values.dims(),
        scales.dims()
    );
    Tensor::from_primitive(TensorPrimitive::Float(B::q8_matmul(
        x.into_primitive().tensor(),
        values.into_primitive(),
        scales.into_primitive(),
        bits,
    )))
}

/// [`q8_matmul`] grouped by expert: `x [rows, in]`, sorted by expert with `counts [experts]`
/// rows each (summing to `rows`), times each row's expert's weight, given as Q8_0 `values
/// [experts, out, in]` and `scales [experts, out, in / 32]`. Returns `[rows, out]`.
pub fn grouped_q8_matmul<B: Q8Matmul>(
    x: Tensor<B, 2>,
    values: Tensor<B, 3, Int>,
    scales: Tensor<B, 3, Int>,
    counts: Tensor<B, 1, Int>,
    bits: ActivationBits,
) -> Tensor<B, 2> {
    let ([_, d_in], [experts, out, _], [c]) = (x.dims(), values.dims(), counts.dims());
    let storage = B::block_storage();
    assert!(
        d_in % Q8_BLOCK == 0
            && c == experts
            && values.dims() == storage.shape(BlockInts::Q8Values, [experts, out, d_in])
            && scales.dims() == storage.shape(BlockInts::ScaleBits, [experts, out, d_in / Q8_BLOCK]),
        "grouped_q8_matmul: x [_, {d_in}], values {:?}, scales {:?} and counts [{c}] do not match",
        values.dims(),
        scales.dims()
    );
    Tensor::from_primitive(TensorPrimitive::Float(B::grouped_q8_matmul(
        x.into_primitive().tensor(),
        values.into_primitive(),
        scales.into_primitive(),
        counts.into_primitive(),
        bits,
    )))
}

/// Q8_0 values `[..., out, in]` (one weight or a stack of them, row-major) as the backend's
/// [`Q8Matmul::block_storage`] holds them, each weight in its [`Q8Matmul::q8_layout`].
pub fn q8_values<B: Q8Matmul, const D: usize>(
    values: Vec<i8>,
    dims: [usize; D],
    device: &B::Device,
) -> Tensor<B, D, Int> {
    let values = B::q8_layout(values, dims[D - 2], dims[D - 1]);
    q8_rows(values, dims, device)
}

/// Q8_0 values `[..., rows, cols]` as the backend's [`Q8Matmul::block_storage`] holds them, in
/// row order: for a matrix read a row at a time by index (a token table), not by [`q8_matmul`].
pub fn q8_rows<B: Q8Matmul, const D: usize>(
    values: Vec<i8>,
    dims: [usize; D],
    device: &B::Device,
) -> Tensor<B, D, Int> {
    // Plus 128 is the two's complement byte with its top bit flipped.
    let offset = || values.iter().map(|&v| v as u8 ^ 0x80).collect::<Vec<u8>>();
    match B::block_storage() {
        BlockStorage::OwnWidth => Tensor::from_data(TensorData::new(values, dims), (device, DType::I8)),
        BlockStorage::Bytes => Tensor::from_data(TensorData::new(offset(), dims), (device, DType::U8)),
        BlockStorage::Words => crate::block_storage::words(offset(), dims, device),
    }
}

/// What the bytes of Q8_0 values hold on top of each value (they are in `-127..=127`).
const BYTE_OFFSET: f32 = 128.0;

/// The values of a Q8_0 values tensor ([`q8_rows`], [`q8_values`]) as floats, exactly: `[...,
/// in]`.
pub fn q8_values_f32<B: Q8Matmul, const D: usize>(values: Tensor<B, D, Int>) -> Tensor<B, D> {
    match B::block_storage() {
        BlockStorage::OwnWidth => values.float(),
        storage => crate::block_storage::bytes_f32(values, storage).sub_scalar(BYTE_OFFSET),
    }
}

/// Q8_0 or Q4_0 scales `[..., rows, blocks]` as the backend's [`Q8Matmul::block_storage`] holds
/// their f16 bits.
pub fn block_scales<B: Q8Matmul, const D: usize>(
    scales: Vec<f16>,
    dims: [usize; D],
    device: &B::Device,
) -> Tensor<B, D, Int> {
    let bytes = || scales.iter().flat_map(|d| d.to_le_bytes()).collect::<Vec<u8>>();
    let mut byte_dims = dims;
    byte_dims[D - 1] *= BlockInts::ScaleBits.bytes();
    match B::block_storage() {
        BlockStorage::OwnWidth => {
            Tensor::from_data(TensorData::new(scales.iter().map(|d| d.to_bits()).collect(), dims), (device, DType::U16))
        }
        BlockStorage::Bytes => Tensor::from_data(TensorData::new(bytes(), byte_dims), (device, DType::U8)),
        BlockStorage::Words => crate::block_storage::words(bytes(), byte_dims, device),
    }
}

/// The f32 values of block scales ([`block_scales`]) `[..., rows, blocks]`, in tensor ops,
/// exactly ([`crate::half_bits_f32`]).
pub fn block_scales_f32<B: Q8Matmul, const D: usize>(scales: Tensor<B, D, Int>, blocks: usize) -> Tensor<B, D> {
    let storage = B::block_storage();
    let (BlockStorage::Bytes | BlockStorage::Words) = storage else {
        return crate::half_bits_f32(scales, crate::Half::F16);
    };
    let mut dims = scales.dims();
    let rows = dims[..D - 1].iter().product::<usize>();
    let bytes = crate::block_storage::bytes_f32(scales, storage);
    let width = bytes.dims()[D - 1];
    // Words pad a row to whole ints: the scales are its first bytes, two each, low first.
    let pairs = bytes.reshape([rows, width]).narrow(1, 0, 2 * blocks).reshape([rows, blocks, 2]);
    let bits = pairs.clone().narrow(2, 0, 1) + pairs.narrow(2, 1, 1).mul_scalar(256.0);
    dims[D - 1] = blocks;
    crate::half_patterns_f32(bits.reshape(dims), crate::Half::F16)
}

/// Quantizes row-major `[rows, cols]` values (`cols` a multiple of [`Q8_BLOCK`]) to Q8_0:
/// `(values [rows, cols], scales [rows, cols / 32])`, in parallel over blocks.
pub fn quantize_q8(weights: &[f32], cols: usize) -> (Vec<i8>, Vec<f16>) {
    assert!(cols.is_multiple_of(Q8_BLOCK), "quantize_q8: {cols} columns are not whole blocks of {Q8_BLOCK}");
    let mut values = vec![0i8; weights.len()];
    let mut scales = vec![f16::ZERO; weights.len() / Q8_BLOCK];
    values
        .par_chunks_mut(Q8_BLOCK)
        .zip(scales.par_iter_mut())
        .zip(weights.par_chunks(Q8_BLOCK))
        .for_each(|((values, scale), block)| *scale = quantize_q8_block(block, values));
    (values, scales)
}

/// One block of [`quantize_q8`]: writes the values, returns the scale.
pub fn quantize_q8_block(block: &[f32], values: &mut [i8]) -> f16 {
    let amax = block.iter().fold(0f32, |m, w| m.max(w.abs()));
    let d = amax / 127.0;
    let inverse = if d != 0.0 { 1.0 / d } else { 0.0 };
    for (value, w) in values.iter_mut().zip(block) {
        // Within ±127 but for a block so small that `1 / d` overflows (its f16 scale is 0).
        *value = round_half_away((w * inverse).clamp(-127.0, 127.0)) as i8;
    }
    f16::from_f32(d)
}

/// `x.round()` (half away from zero, as C's `roundf`) for `|x| < 2^23`, inline: without SSE4.1
/// `round` is a libm call, which was half the time of quantizing a model while loading it. The
/// truncation's remainder is exact at these magnitudes.
#[inline(always)]
fn round_half_away(x: f32) -> i32 {
    let truncated = x as i32;
    let remainder = x - truncated as f32;
    truncated + i32::from(remainder >= 0.5) - i32::from(remainder <= -0.5)
}

/// Row-major `[rows, cols]` activations (`cols` a multiple of [`Q8_BLOCK`]) rounded to blocks of
/// `bits` integers and back, as [`Q8Matmul::q8_matmul`] and [`crate::q4_matmul`] read them: each
/// block `values · scale` ([`round_activation_block`]). Unlike [`quantize_q8`], the scale stays
/// f32 and ties round to even (burn's `round`), so the generic form rounds exactly alike. In
/// parallel over blocks.
pub fn round_activations(x: &[f32], cols: usize, bits: ActivationBits) -> Vec<f32> {
    assert!(cols.is_multiple_of(Q8_BLOCK), "round_activations: {cols} columns are not whole blocks of {Q8_BLOCK}");
    let mut rounded = vec![0f32; x.len()];
    rounded.par_chunks_mut(Q8_BLOCK).zip(x.par_chunks(Q8_BLOCK)).for_each(|(rounded, block)| {
        let mut values = [0i16; Q8_BLOCK];
        let d = round_activation_block(block, bits.max_value(), &mut values);
        for (r, &v) in rounded.iter_mut().zip(&values) {
            *r = v as f32 * d;
        }
    });
    rounded
}

/// An integer an activation block is rounded to: `i8` or `i16` ([`ActivationBits`]); widened
/// to `i32` by `Into`.
pub(crate) trait ActivationInt: Copy + Default + Send + Sync + Into<i32> {
    /// From a value already rounded to an integer within the type's range.
    fn from_rounded(value: f32) -> Self;
}

impl ActivationInt for i8 {
    #[inline(always)]
    fn from_rounded(value: f32) -> Self {
        value as i8
    }
}

impl ActivationInt for i16 {
    #[inline(always)]
    fn from_rounded(value: f32) -> Self {
        value as i16
    }
}

/// One block of [`round_activations`]: `d = max|block| / max_value`, `values = round(block / d)`
/// (ties to even; `max_value` fits `T`); returns `d`. Inlined into its callers, so a caller
/// compiled for a wider instruction set vectorizes it.
#[inline(always)]
pub(crate) fn round_activation_block<T: ActivationInt>(block: &[f32], max_value: f32, values: &mut [T]) -> f32 {
    let d = block.iter().fold(0f32, |m, x| m.max(x.abs())) / max_value;
    // A zero scale means a zero block (or one too small for f32): its values are 0.
    let divisor = if d != 0.0 { d } else { 1.0 };
    for (value, x) in values.iter_mut().zip(block) {
        *value = T::from_rounded((x / divisor).round_ties_even());
    }
    d
}

/// The weights (or activations) that Q8_0 values and their scales (f16 or f32) stand for
/// (`[rows, cols]`, row-major).
pub fn dequantize_q8<S: Copy + Into<f32>>(values: &[i8], scales: &[S]) -> Vec<f32> {
    values
        .chunks(Q8_BLOCK)
        .zip(scales)
        .flat_map(|(block, &d)| {
            let d: f32 = d.into();
            block.iter().map(move |&v| v as f32 * d)
        })
        .collect()
}

/// The generic Q8_0 matmuls, in burn tensor ops: [`Q8Matmul`]'s defaults.
pub mod generic {
    use burn::tensor::ops::{FloatTensor, IntTensor};
    use burn::tensor::{Int, Tensor, TensorPrimitive, backend::Backend};

    use super::{ActivationBits, Q8Matmul};
    use crate::dense_matmul::generic::{expert_of, per_expert};

    /// `round(x) · Wᵀ` with the Q8_0 weight dequantized first (`[out, in / 32, 32]` values times
    /// their block's scale), then one float matmul on the activations rounded to `bits`.
    pub fn q8_matmul<B: Q8Matmul>(
        x: Tensor<B, 2>,
        values: Tensor<B, 2, Int>,
        scales: Tensor<B, 2, Int>,
        bits: ActivationBits,
    ) -> Tensor<B, 2> {
        let ([n, d_in], [out, _]) = (x.dims(), values.dims());
        if n == 0 {
            // burn-ndarray 0.21's matmul divides by the row count.
            return Tensor::zeros([0, out], &x.device());
        }
        let blocks = d_in / crate::Q8_BLOCK;
        let weight = crate::q8_values_f32(values).reshape([out, blocks, crate::Q8_BLOCK])
            * crate::block_scales_f32(scales, blocks).reshape([out, blocks, 1]);
        round_activations(x, bits).matmul(weight.reshape([out, d_in]).transpose())
    }

    /// [`crate::grouped_q8_matmul`] as a [`Q8Matmul::q8_matmul`] per expert with rows.
    pub fn grouped_q8_matmul<B: Q8Matmul>(
        x: FloatTensor<B>,
        values: IntTensor<B>,
        scales: IntTensor<B>,
        counts: IntTensor<B>,
        bits: ActivationBits,
    ) -> FloatTensor<B> {
        let x = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(x));
        let (values, scales) =
            (Tensor::<B, 3, Int>::from_primitive(values), Tensor::<B, 3, Int>::from_primitive(scales));
        let d_out = values.dims()[1];
        per_expert(x, Tensor::from_primitive(counts), d_out, |x, expert| {
            crate::q8_matmul(x, expert_of(&values, expert), expert_of(&scales, expert), bits)
        })
        .into_primitive()
        .tensor()
    }

    /// `x [n, in]` rounded to blocks of 32 `bits` integers and back, as [`crate::round_activations`]
    /// rounds it on the host. Rounding has no gradient: the gradient passes to `x` as if unrounded
    /// (the straight-through estimator of quantization-aware training).
    pub(crate) fn round_activations<B: Backend>(x: Tensor<B, 2>, bits: ActivationBits) -> Tensor<B, 2> {
        let [n, d_in] = x.dims();
        let blocks = x.clone().detach().reshape([n, d_in / crate::Q8_BLOCK, crate::Q8_BLOCK]);
        // Divided by a tensor, not by a scalar: burn-candle's `div_scalar` multiplies by the
        // reciprocal, a scale an ulp off the rule's `max / max_value`, which moves values that
        // lie near a half step by a whole step. (WGSL does not promise a correctly rounded f32
        // division either, so on wgpu the scale may still be an ulp off.)
        let largest = blocks.clone().abs().max_dim(2);
        let scale = largest.clone() / largest.ones_like().mul_scalar(bits.max_value());
        // A zero scale is a zero block: divided by 1, its values stay 0.
        let divisor = scale.clone().mask_fill(scale.clone().equal_elem(0.0), 1.0);
        let rounded = (blocks / divisor).round() * scale;
        // `x + (r - x)` is `r` exactly: `r` is 0 or within a factor of 2 of `x` (Sterbenz).
        x.clone() + (rounded.reshape([n, d_in]) - x).detach()
    }
}
