//! Matmul with weights in llama.cpp's Q4_K blocks, held as a GGUF file stores them (the same
//! values, never rounded again).
//!
//! A Q4_K super-block holds 256 values of a row ([`QK_K`]) in 8 blocks of 32: an f16 `d` and
//! `dmin` a super-block, a 6-bit scale `sc` and min `m` a block, and a 4-bit `q` a value standing
//! for `d · sc · q - dmin · m` (`block_q4_K` and `dequantize_row_q4_K` in llama.cpp's
//! ggml/src/ggml-quants.c; 4.5 bits a weight). Here a weight `[out, in]` is held in three int
//! tensors, as the backend's [`crate::Q8Matmul::block_storage`] holds narrow ints:
//!
//! - `values [out, in / 2]`: the nibbles `q`, two a byte in Q4_0's order within each block (byte
//!   `i` holds value `i` low and value `i + 16` high) and in the kernel's layout
//!   ([`crate::Q4Matmul::q4_layout`]), so Q4_0's kernels read them;
//! - `supers [out, in / 256 · 2]`: each super-block's `(d, dmin)`, f16 bits ([`crate::block_scales`]);
//! - `subs [out, in / 32 · 2]`: each block's `(sc, m)`, one byte each ([`crate::q4_rows`]).
//!
//! 4.625 bits a weight: the 6-bit scales and mins take a byte each. [`split_q4_k`] takes a file's
//! blocks apart into them. A block's scale `d · sc` and min `dmin · m` are exact in f32 (11 by 6
//! significant bits), so each value is exactly llama.cpp's dequantization.
//!
//! The activations are rounded to 8-bit blocks of 32 first, as for Q4_0
//! ([`crate::Q4_ACTIVATION_BITS`]; llama.cpp rounds them to blocks of 256, `block_q8_K`, which is
//! coarser): `q4k_matmul` is `round(x) · Wᵀ` on every backend, whichever kernel runs.

use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{Int, Tensor, TensorPrimitive};
use half::f16;

pub use crate::ggml_type::{QK_K, join_q4_k, split_q4_k};
use crate::{BlockInts, Q4Matmul, Q8_BLOCK};
pub use quantize::quantize_q4_k;

#[cfg(feature = "candle")]
mod candle;
#[cfg(feature = "cpu-kernels")]
pub mod cpu;
#[cfg(feature = "ndarray")]
mod ndarray;
mod quantize;
#[cfg(test)]
mod tests;

crate::backends::generic_forms!(Q4KMatmul, kernels: ndarray, candle);

/// `x · Wᵀ` with `W` in Q4_K blocks.
pub trait Q4KMatmul: Q4Matmul {
    /// `x [n, in]`; `values [out, in / 2]` (in [`crate::Q4Matmul::q4_layout`]), `supers [out, in
    /// / 256 · 2]`, `subs [out, in / 32 · 2]` as the module's doc says. Returns `[n, out]`.
    fn q4k_matmul(
        x: FloatTensor<Self>,
        values: IntTensor<Self>,
        supers: IntTensor<Self>,
        subs: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        let x = Tensor::<Self, 2>::from_primitive(TensorPrimitive::Float(x));
        let [values, supers, subs] = [values, supers, subs].map(Tensor::<Self, 2, Int>::from_primitive);
        generic::q4k_matmul(x, values, supers, subs).into_primitive().tensor()
    }

    /// The grouped form (see [`crate::grouped_matmul`]): `x [rows, in]` sorted by expert,
    /// `counts [experts]` rows each, the weights' tensors stacked `[experts, ...]`. The default
    /// is a [`Q4KMatmul::q4k_matmul`] per expert with rows.
    fn grouped_q4k_matmul(
        x: FloatTensor<Self>,
        values: IntTensor<Self>,
        supers: IntTensor<Self>,
        subs: IntTensor<Self>,
        counts: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        generic::grouped_q4k_matmul::<Self>(x, values, supers, subs, counts)
    }
}

/// The shapes of a Q4_K weight `[..., out, in]`'s `(values, supers, subs)` on backend `B`.
pub fn q4k_shapes<B: Q4Matmul, const D: usize>(dims: [usize; D]) -> ([usize; D], [usize; D], [usize; D]) {
    let storage = B::block_storage();
    let d_in = dims[D - 1];
    let with = |ints, width| {
        let mut shape = dims;
        shape[D - 1] = width;
        storage.shape(ints, shape)
    };
    (
        with(BlockInts::Q4Bytes, d_in / 2),
        with(BlockInts::ScaleBits, d_in / QK_K * 2),
        with(BlockInts::Q4Bytes, d_in / Q8_BLOCK * 2),
    )
}

/// `x [n, in] · Wᵀ -> [n, out]` with `W [out, in]` in Q4_K blocks (the module's doc).
pub fn q4k_matmul<B: Q4KMatmul>(
    x: Tensor<B, 2>,
    values: Tensor<B, 2, Int>,
    supers: Tensor<B, 2, Int>,
    subs: Tensor<B, 2, Int>,
) -> Tensor<B, 2> {
    let ([_, d_in], [out, _]) = (x.dims(), values.dims());
    assert!(
        d_in % QK_K == 0 && (values.dims(), supers.dims(), subs.dims()) == q4k_shapes::<B, 2>([out, d_in]),
        "q4k_matmul: x [_, {d_in}], values {:?}, supers {:?} and subs {:?} do not match",
        values.dims(),
        supers.dims(),
        subs.dims()
    );
    let [values, supers, subs] = [values, supers, subs].map(Tensor::into_primitive);
    Tensor::from_primitive(TensorPrimitive::Float(B::q4k_matmul(x.into_primitive().tensor(), values, supers, subs)))
}

/// [`q4k_matmul`] grouped by expert: `x [rows, in]`, sorted by expert with `counts [experts]`
/// rows each, times each row's expert's Q4_K weight (`[experts, ...]` stacks). Returns `[rows,
/// out]`.
pub fn grouped_q4k_matmul<B: Q4KMatmul>(
    x: Tensor<B, 2>,
    values: Tensor<B, 3, Int>,
    supers: Tensor<B, 3, Int>,
    subs: Tensor<B, 3, Int>,
    counts: Tensor<B, 1, Int>,
) -> Tensor<B, 2> {
    let ([_, d_in], [experts, out, _], [c]) = (x.dims(), values.dims(), counts.dims());
    assert!(
        d_in % QK_K == 0
            && c == experts
            && (values.dims(), supers.dims(), subs.dims()) == q4k_shapes::<B, 3>([experts, out, d_in]),
        "grouped_q4k_matmul: x [_, {d_in}], values {:?}, supers {:?}, subs {:?} and counts [{c}] do not match",
        values.dims(),
        supers.dims(),
        subs.dims()
    );
    let [values, supers, subs] = [values, supers, subs].map(Tensor::into_primitive);
    Tensor::from_primitive(TensorPrimitive::Float(B::grouped_q4k_matmul(
        x.into_primitive().tensor(),
        values,
        supers,
        subs,
        counts.into_primitive(),
    )))
}

/// The weights (`[rows, cols]`, row-major) that Q4_K parts stand for ([`split_q4_k`]'s, nibbles
/// in Q4_0's order): `d · sc · q - dmin · m`, as llama.cpp computes it.
pub fn dequantize_q4k(packed: &[u8], supers: &[f16], subs: &[u8]) -> Vec<f32> {
    const PER_SUPER: usize = QK_K / Q8_BLOCK;
    let mut out = vec![0f32; packed.len() * 2];
    for (b, (y, bytes)) in out.chunks_exact_mut(Q8_BLOCK).zip(packed.chunks_exact(Q8_BLOCK / 2)).enumerate() {
        let (d, dmin) = (supers[b / PER_SUPER * 2].to_f32(), supers[b / PER_SUPER * 2 + 1].to_f32());
        let (scale, min) = (d * subs[2 * b] as f32, dmin * subs[2 * b + 1] as f32);
        for (i, &byte) in bytes.iter().enumerate() {
            y[i] = scale * (byte & 15) as f32 - min;
            y[i + Q8_BLOCK / 2] = scale * (byte >> 4) as f32 - min;
        }
    }
    out
}

/// The generic Q4_K matmuls, in burn tensor ops: [`Q4KMatmul`]'s defaults.
pub mod generic {
    use burn::tensor::ops::{FloatTensor, IntTensor};
    use burn::tensor::{Int, Tensor, TensorPrimitive};

    use super::{Q4KMatmul, QK_K};
    use crate::dense_matmul::generic::{expert_of, per_expert};
    use crate::q8_matmul::generic::round_activations;
    use crate::{Q4Matmul, Q8_BLOCK, Q8Matmul};

    /// `round(x) · Wᵀ` with the Q4_K weight dequantized first ([`q4k_weight`]), then one float
    /// matmul on the activations rounded to [`crate::Q4_ACTIVATION_BITS`].
    pub fn q4k_matmul<B: Q4Matmul>(
        x: Tensor<B, 2>,
        values: Tensor<B, 2, Int>,
        supers: Tensor<B, 2, Int>,
        subs: Tensor<B, 2, Int>,
    ) -> Tensor<B, 2> {
        let ([n, d_in], [out, _]) = (x.dims(), values.dims());
        if n == 0 {
            // burn-ndarray 0.21's matmul divides by the row count.
            return Tensor::zeros([0, out], &x.device());
        }
        round_activations(x, crate::Q4_ACTIVATION_BITS).matmul(q4k_weight(values, supers, subs, d_in).transpose())
    }

    /// The weight `[rows, in]` that Q4_K parts stand for (`values` in Q4_0's order, not a
    /// kernel's), in tensor ops: `d · sc · q - dmin · m`, exact in f32 as llama.cpp's.
    pub fn q4k_weight<B: Q4Matmul>(
        values: Tensor<B, 2, Int>,
        supers: Tensor<B, 2, Int>,
        subs: Tensor<B, 2, Int>,
        d_in: usize,
    ) -> Tensor<B, 2> {
        let [rows, _] = values.dims();
        let bytes = crate::q4_bytes_f32(values).reshape([rows, d_in / Q8_BLOCK, Q8_BLOCK / 2]);
        let high = bytes.clone().div_scalar(16.0).floor();
        let low = bytes - high.clone() * 16.0;
        let q = Tensor::cat(vec![low, high], 2);
        let (scale, min) = block_scales_and_mins(supers, subs, rows, d_in);
        (q * scale - min).reshape([rows, d_in])
    }

    /// Each block's scale `d · sc` and min `dmin · m` (`[rows, in / 32, 1]` each) of Q4_K's (and
    /// Q5_K's) `supers` and `subs` for `rows` of `d_in`: exact in f32 (11 by 6 significant bits).
    pub fn block_scales_and_mins<B: Q8Matmul>(
        supers: Tensor<B, 2, Int>,
        subs: Tensor<B, 2, Int>,
        rows: usize,
        d_in: usize,
    ) -> (Tensor<B, 3>, Tensor<B, 3>) {
        let (blocks, super_blocks) = (d_in / Q8_BLOCK, d_in / QK_K);
        let d = crate::block_scales_f32(supers, 2 * super_blocks).reshape([rows, super_blocks, 1, 2]);
        let sub = crate::q4_bytes_f32(subs).narrow(1, 0, 2 * blocks).reshape([rows, super_blocks, QK_K / Q8_BLOCK, 2]);
        let scaled = sub * d;
        (scaled.clone().narrow(3, 0, 1).reshape([rows, blocks, 1]), scaled.narrow(3, 1, 1).reshape([rows, blocks, 1]))
    }

    /// [`crate::grouped_q4k_matmul`] as a [`Q4KMatmul::q4k_matmul`] per expert with rows.
    pub fn grouped_q4k_matmul<B: Q4KMatmul>(
        x: FloatTensor<B>,
        values: IntTensor<B>,
        supers: IntTensor<B>,
        subs: IntTensor<B>,
        counts: IntTensor<B>,
    ) -> FloatTensor<B> {
        let x = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(x));
        let [values, supers, subs] = [values, supers, subs].map(Tensor::<B, 3, Int>::from_primitive);
        let d_out = values.dims()[1];
        per_expert(x, Tensor::from_primitive(counts), d_out, |x, expert| {
            crate::q4k_matmul(x, expert_of(&values, expert), expert_of(&supers, expert), expert_of(&subs, expert))
        })
        .into_primitive()
        .tensor()
    }
}
