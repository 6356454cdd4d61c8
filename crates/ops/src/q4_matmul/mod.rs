//! Matmul with weights in 4-bit blocks: llama.cpp's Q4_0 layout.
//!
//! A weight `W [out, in]` is cut along `in` into blocks of [`Q4_BLOCK`] values; each block keeps
//! one f16 scale `d` and 32 values `q` in `0..=15` standing for `(q - 8) · d`, two to a byte: byte
//! `j` of a block holds value `j` in its low nibble and value `j + 16` in its high one (`qs` of
//! llama.cpp's `block_q4_0`, ggml/src/ggml-common.h). 18 bytes a block, 0.5625 a weight. The
//! bytes and the scales are held as [`crate::Q8Matmul::block_storage`] says, the scales as Q8_0's
//! ([`crate::block_scales`]).
//!
//! The scale is chosen per block to minimise the block's squared rounding error
//! ([`quantize_q4_block`]); the layout, and so every kernel, is llama.cpp's, whose own rounding
//! (`quantize_row_q4_0_ref`, ggml/src/ggml-quants.c) is one of the candidates tried.
//!
//! As with Q8_0, the activations are rounded to 8-bit blocks first (llama.cpp's CPU path pairs a
//! Q4_0 weight with Q8_0 activations: `ggml_vec_dot_q4_0_q8_0`), always to 8 bits
//! ([`Q4_ACTIVATION_BITS`]): next to 4-bit weights their rounding does not move decisions
//! measurably (the accuracy report in `docs/formats.md`). So `q4_matmul` is `round(x) ·
//! Wᵀ` with [`crate::round_activations`] to 8 bits on every backend, whichever kernel runs.

use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{DType, Int, Tensor, TensorData, TensorPrimitive};
use half::f16;
use rayon::prelude::*;

use crate::{ActivationBits, BlockInts, BlockStorage, Q8Matmul};

// The kernels, one file per backend; every other backend takes the generic form.
#[cfg(feature = "candle")]
mod candle;
#[cfg(feature = "cpu-kernels")]
pub mod cpu;
#[cfg(feature = "ndarray")]
mod ndarray;
#[cfg(test)]
mod tests;

crate::backends::generic_forms!(Q4Matmul, kernels: ndarray, candle);

/// Values per block (one scale each).
pub const Q4_BLOCK: usize = 32;

/// The integers [`q4_matmul`] rounds its activations to ([`crate::round_activations`]): 8 bits,
/// as llama.cpp (Q4_0's own rounding dwarfs theirs).
pub const Q4_ACTIVATION_BITS: ActivationBits = ActivationBits::Eight;

/// `x · Wᵀ` with `W` in Q4_0 blocks.
pub trait Q4Matmul: Q8Matmul {
    /// The order this backend's kernel reads a weight's packed bytes in: `packed` are one or a
    /// stack of weights `[out, in / 2]` in Q4_0's order, returned as the same number of bytes that
    /// [`Q4Matmul::q4_matmul`] then receives, weight by weight. The default keeps Q4_0's order; a
    /// kernel may regroup them (ndarray on x86-64 pairs nibbles of 16 or 8 rows for its integer dot).
    fn q4_layout(packed: Vec<u8>, d_out: usize, d_in: usize) -> Vec<u8> {
        let _ = (d_out, d_in);
        packed
    }

    /// `x`: `[n, in]`; `values`: `[out, in / 2]` packed bytes ([`q4_values`]: in the order of
    /// [`Q4Matmul::q4_layout`]); `scales`: `[out, in / 32]` f16 bits ([`crate::block_scales`]);
    /// both as [`crate::Q8Matmul::block_storage`] holds them. Returns `[n, out]`.
    fn q4_matmul(x: FloatTensor<Self>, values: IntTensor<Self>, scales: IntTensor<Self>) -> FloatTensor<Self> {
        let x = Tensor::<Self, 2>::from_primitive(TensorPrimitive::Float(x));
        let values = Tensor::<Self, 2, Int>::from_primitive(values);
        let scales = Tensor::<Self, 2, Int>::from_primitive(scales);
        generic::q4_matmul(x, values, scales).into_primitive().tensor()
    }

    /// The grouped form (see [`crate::grouped_matmul`]): `x [rows, in]` sorted by expert,
    /// `counts [experts]` rows each; `values [experts, out, in / 2]` (each weight in
    /// [`Q4Matmul::q4_layout`]) and `scales [experts, out, in / 32]`. Returns `[rows, out]`. The
    /// default is a [`Q4Matmul::q4_matmul`] per expert with rows.
    fn grouped_q4_matmul(
        x: FloatTensor<Self>,
        values: IntTensor<Self>,
        scales: IntTensor<Self>,
        counts: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        generic::grouped_q4_matmul::<Self>(x, values, scales, counts)
    }
}

/// `x [n, in] · Wᵀ -> [n, out]` with `W [out, in]` given as Q4_0 packed `values [out, in / 2]`
/// and `scales [out, in / 32]`.
pub fn q4_matmul<B: Q4Matmul>(x: Tensor<B, 2>, values: Tensor<B, 2, Int>, scales: Tensor<B, 2, Int>) -> Tensor<B, 2> {
    let ([_, d_in], [out, _]) = (x.dims(), values.dims());
    let storage = B::block_storage();
    assert!(
        d_in % Q4_BLOCK == 0
            && values.dims() == storage.shape(BlockInts::Q4Bytes, [out, d_in / 2])
            && scales.dims() == storage.shape(BlockInts::ScaleBits, [out, d_in / Q4_BLOCK]),
        "q4_matmul: x [_, {d_in}], values {:?} and scales {:?} do not match",
        values.dims(),
        scales.dims()
    );
    Tensor::from_primitive(TensorPrimitive::Float(B::q4_matmul(
        x.into_primitive().tensor(),
        values.into_primitive(),
        scales.into_primitive(),
    )))
}

/// [`q4_matmul`] grouped by expert: `x [rows, in]`, sorted by expert with `counts [experts]`
/// rows each, times each row's expert's weight, given as Q4_0 packed `values [experts, out, in /
/// 2]` and `scales [experts, out, in / 32]`. Returns `[rows, out]`.
pub fn grouped_q4_matmul<B: Q4Matmul>(
    x: Tensor<B, 2>,
    values: Tensor<B, 3, Int>,
    scales: Tensor<B, 3, Int>,
    counts: Tensor<B, 1, Int>,
) -> Tensor<B, 2> {
    let ([_, d_in], [experts, out, _], [c]) = (x.dims(), values.dims(), counts.dims());
    let storage = B::block_storage();
    assert!(
        d_in % Q4_BLOCK == 0
            && c == experts
            && values.dims() == storage.shape(BlockInts::Q4Bytes, [experts, out, d_in / 2])
            && scales.dims() == storage.shape(BlockInts::ScaleBits, [experts, out, d_in / Q4_BLOCK]),
        "grouped_q4_matmul: x [_, {d_in}], values {:?}, scales {:?} and counts [{c}] do not match",
        values.dims(),
        scales.dims()
    );
    Tensor::from_primitive(TensorPrimitive::Float(B::grouped_q4_matmul(
        x.into_primitive().tensor(),
        values.into_primitive(),
        scales.into_primitive(),
        counts.into_primitive(),
    )))
}

/// Q4_0 packed bytes `[..., out, in / 2]` (one weight or a stack of them, as stored) as the
/// backend's [`crate::Q8Matmul::block_storage`] holds them, each weight in its
/// [`Q4Matmul::q4_layout`].
pub fn q4_values<B: Q4Matmul, const D: usize>(
    packed: Vec<u8>,
    dims: [usize; D],
    device: &B::Device,
) -> Tensor<B, D, Int> {
    let packed = B::q4_layout(packed, dims[D - 2], 2 * dims[D - 1]);
    q4_rows(packed, dims, device)
}

/// Q4_0 packed bytes `[..., rows, cols / 2]` as the backend's [`crate::Q8Matmul::block_storage`]
/// holds them, in Q4_0's order (not a kernel's: the generic form reads them so).
pub fn q4_rows<B: Q8Matmul, const D: usize>(
    packed: Vec<u8>,
    dims: [usize; D],
    device: &B::Device,
) -> Tensor<B, D, Int> {
    match B::block_storage() {
        BlockStorage::OwnWidth | BlockStorage::Bytes => {
            Tensor::from_data(TensorData::new(packed, dims), (device, DType::U8))
        }
        BlockStorage::Words => crate::block_storage::words(packed, dims, device),
    }
}

/// The Q4_0 bytes of a tensor made by [`q4_rows`] or [`q4_values`], as floats (exact:
/// `0..=255`), `[..., in / 2]`.
pub fn q4_bytes_f32<B: Q8Matmul, const D: usize>(held: Tensor<B, D, Int>) -> Tensor<B, D> {
    crate::block_storage::bytes_f32(held, B::block_storage())
}

/// Quantizes row-major `[rows, cols]` values (`cols` a multiple of [`Q4_BLOCK`]) to Q4_0:
/// `(packed [rows, cols / 2], scales [rows, cols / 32])`, in parallel over blocks.
pub fn quantize_q4(weights: &[f32], cols: usize) -> (Vec<u8>, Vec<f16>) {
    assert!(cols.is_multiple_of(Q4_BLOCK), "quantize_q4: {cols} columns are not whole blocks of {Q4_BLOCK}");
    let mut packed = vec![0u8; weights.len() / 2];
    let mut scales = vec![f16::ZERO; weights.len() / Q4_BLOCK];
    packed
        .par_chunks_mut(Q4_BLOCK / 2)
        .zip(scales.par_iter_mut())
        .zip(weights.par_chunks(Q4_BLOCK))
        .for_each(|((packed, scale), block)| *scale = quantize_q4_block(block, packed));
    (packed, scales)
}

/// Steps of the scale search of [`quantize_q4_block`] on either side of llama.cpp's scale.
const SCALE_STEPS: i32 = 2;

/// One block of [`quantize_q4`]: writes the 16 packed bytes, returns the scale.
///
/// llama.cpp's `quantize_row_q4_0_ref` takes `d = m / -8` for the value `m` of largest magnitude
/// (so `m` maps to `q = 0`, and the range `-8..=7` is used whole on that side), rounds with the
/// f32 `1 / d` and stores `d` as f16. Here the divisor also tries `-8 + k / 4` for `k` in
/// `-2..=2` (a coarse form of the search llama.cpp's `make_qx_quants` does for its k-quants; a
/// step of 1/16 measured no better), each rounded the same way, and keeps the one whose stored
/// block has the least squared error (llama.cpp's on ties), then the least-squares scale of that
/// rounding where it does better still. Never worse than llama.cpp's Q4_0 on any block; 11–14 %
/// less squared error on random rows (`q4_blocks_are_llama_cpp_q4_0_with_a_better_scale` in
/// `crates/ops/src/q4_matmul/tests.rs`).
pub fn quantize_q4_block(block: &[f32], packed: &mut [u8]) -> f16 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512F (checked just above, cached by the standard library).
        return unsafe { search_avx512(block, packed) };
    }
    search(block, packed)
}

/// [`search`] compiled for AVX-512, where its lanes run as one instruction each: the same
/// operations in the same order, so the same blocks.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn search_avx512(block: &[f32], packed: &mut [u8]) -> f16 {
    search(block, packed)
}

/// The body of [`quantize_q4_block`], inlined into each instruction set's version.
#[inline(always)]
fn search(block: &[f32], packed: &mut [u8]) -> f16 {
    let max = block.iter().fold(0f32, |m, &w| if w.abs() > m.abs() { w } else { m });
    // llama.cpp's scale first, and kept unless another is strictly better (also when a value
    // is not finite and every error is NaN).
    let mut best = max / -8.0;
    let mut best_error = q4_error(block, best);
    for step in (-SCALE_STEPS..=SCALE_STEPS).filter(|&k| k != 0) {
        let d = max / (-8.0 + step as f32 / 4.0);
        let error = q4_error(block, d);
        if error < best_error {
            (best, best_error) = (d, error);
        }
    }
    // The least-squares scale of the best rounding, `Σ w q / Σ q²` (`q` signed), tried last.
    let inverse = inverse(best);
    let (wq, qq) = block.iter().fold((0f32, 0f32), |(wq, qq), &w| {
        let q = q4_value(w, inverse) as f32 - 8.0;
        (wq + w * q, qq + q * q)
    });
    if qq > 0.0 && q4_error(block, wq / qq) < best_error {
        best = wq / qq;
    }
    round_q4(block, best, packed);
    f16::from_f32(best)
}

/// The squared error of `block` rounded with the f32 scale `d` and stored with its f16. Summed
/// in 8 lanes, so that the loop vectorizes (this search is most of a q4 load's time).
#[inline(always)]
fn q4_error(block: &[f32], d: f32) -> f32 {
    let (inverse, stored) = (inverse(d), f16::from_f32(d).to_f32());
    let mut lanes = [0f32; 8];
    for eight in block.chunks_exact(8) {
        for (lane, &w) in lanes.iter_mut().zip(eight) {
            let error = w - (q4_level(w, inverse) as f32 - 8.0) * stored;
            *lane += error * error;
        }
    }
    lanes.iter().sum()
}

/// Writes `block` rounded with the f32 scale `d` as Q4_0's packed bytes.
#[inline(always)]
fn round_q4(block: &[f32], d: f32, packed: &mut [u8]) {
    let (inverse, half) = (inverse(d), Q4_BLOCK / 2);
    for (j, byte) in packed.iter_mut().enumerate() {
        *byte = q4_value(block[j], inverse) | (q4_value(block[j + half], inverse) << 4);
    }
}

/// `1 / d`, or 0 for a zero scale (a zero block: every value 8, standing for 0).
#[inline(always)]
fn inverse(d: f32) -> f32 {
    if d != 0.0 { 1.0 / d } else { 0.0 }
}

/// `w / d + 8` rounded half up and clamped to `0..=15`, as llama.cpp's `MIN(15, (int8_t)(x + 8.5f))`.
#[inline(always)]
fn q4_value(w: f32, inverse: f32) -> u8 {
    q4_level(w, inverse) as u8
}

/// [`q4_value`] as an i32, whose conversion vectorizes in [`q4_error`] (a saturating `as` does
/// not).
#[inline(always)]
#[allow(clippy::manual_clamp, reason = "`clamp` keeps a NaN, which `max` maps to 0")]
fn q4_level(w: f32, inverse: f32) -> i32 {
    // `max` maps a NaN (zero times the infinite inverse of an underflowed scale) to 0.
    let x = (w * inverse + 8.5).max(0.0).min(15.0);
    // SAFETY: `x` is finite and in `0..=15`, where truncation is llama.cpp's cast.
    unsafe { x.to_int_unchecked::<i32>() }
}

/// The weights that Q4_0 packed bytes and their scales stand for (`[rows, cols]`, row-major).
pub fn dequantize_q4(packed: &[u8], scales: &[f16]) -> Vec<f32> {
    let half = Q4_BLOCK / 2;
    packed
        .chunks(half)
        .zip(scales)
        .flat_map(|(bytes, d)| {
            let d = d.to_f32();
            let low = bytes.iter().map(move |&b| ((b & 15) as f32 - 8.0) * d);
            let high = bytes.iter().map(move |&b| ((b >> 4) as f32 - 8.0) * d);
            low.chain(high)
        })
        .collect()
}

/// The generic Q4_0 matmuls, in burn tensor ops: [`Q4Matmul`]'s defaults.
pub mod generic {
    use burn::tensor::ops::{FloatTensor, IntTensor};
    use burn::tensor::{Int, Tensor, TensorPrimitive};

    use super::Q4Matmul;
    use crate::Q8Matmul;
    use crate::dense_matmul::generic::{expert_of, per_expert};
    use crate::q8_matmul::generic::round_activations;

    /// `round(x) · Wᵀ` with the Q4_0 weight unpacked and dequantized first ([`q4_weight`]),
    /// then one float matmul on the activations rounded to [`crate::Q4_ACTIVATION_BITS`].
    pub fn q4_matmul<B: Q8Matmul>(
        x: Tensor<B, 2>,
        values: Tensor<B, 2, Int>,
        scales: Tensor<B, 2, Int>,
    ) -> Tensor<B, 2> {
        let ([n, d_in], [out, _]) = (x.dims(), values.dims());
        if n == 0 {
            // burn-ndarray 0.21's matmul divides by the row count.
            return Tensor::zeros([0, out], &x.device());
        }
        round_activations(x, crate::Q4_ACTIVATION_BITS).matmul(q4_weight(values, scales, d_in).transpose())
    }

    /// The weight `[rows, in]` that Q4_0 packed `values [rows, in / 2]` (in Q4_0's order) and their
    /// `scales [rows, in / 32]` stand for, in tensor ops: each byte `b` is `16 h + l`, value `j` of
    /// its block `l` and value `j + 16` `h`, each standing for `(q - 8) · d`. Exact in f32.
    pub fn q4_weight<B: Q8Matmul>(values: Tensor<B, 2, Int>, scales: Tensor<B, 2, Int>, d_in: usize) -> Tensor<B, 2> {
        let [rows, _] = values.dims();
        let blocks = d_in / crate::Q4_BLOCK;
        let bytes = crate::q4_bytes_f32(values).reshape([rows, blocks, crate::Q4_BLOCK / 2]);
        let high = bytes.clone().div_scalar(16.0).floor();
        let low = bytes - high.clone() * 16.0;
        let q = Tensor::cat(vec![low, high], 2) - 8.0;
        (q * crate::block_scales_f32(scales, blocks).reshape([rows, blocks, 1])).reshape([rows, d_in])
    }

    /// [`crate::grouped_q4_matmul`] as a [`Q4Matmul::q4_matmul`] per expert with rows.
    pub fn grouped_q4_matmul<B: Q4Matmul>(
        x: FloatTensor<B>,
        values: IntTensor<B>,
        scales: IntTensor<B>,
        counts: IntTensor<B>,
    ) -> FloatTensor<B> {
        let x = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(x));
        let (values, scales) =
            (Tensor::<B, 3, Int>::from_primitive(values), Tensor::<B, 3, Int>::from_primitive(scales));
        let d_out = values.dims()[1];
        per_expert(x, Tensor::from_primitive(counts), d_out, |x, expert| {
            crate::q4_matmul(x, expert_of(&values, expert), expert_of(&scales, expert))
        })
        .into_primitive()
        .tensor()
    }
}
