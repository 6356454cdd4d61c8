//! Matmul with weights in llama.cpp's Q5_K blocks, held as a GGUF file stores them (the same
//! values, never rounded again).
//!
//! A Q5_K super-block is a Q4_K super-block ([`crate::q4k_matmul`]) whose values have a fifth
//! bit: 256 values of a row in 8 blocks of 32, an f16 `d` and `dmin` a super-block, a 6-bit scale
//! `sc` and min `m` a block, and a 5-bit `q` a value standing for `d · sc · q - dmin · m`
//! (`block_q5_K` and `dequantize_row_q5_K` in llama.cpp's ggml/src/ggml-quants.c; 5.5 bits a
//! weight). Here a weight `[out, in]` is held in three int tensors, as the backend's
//! [`crate::Q8Matmul::block_storage`] holds narrow ints:
//!
//! - `values [out, in]`: each `q` (`0..=31`) as an i8, in Q8_0's kernel layout
//!   ([`crate::Q8Matmul::q8_layout`]), so Q8_0's kernels read them;
//! - `supers [out, in / 256 · 2]` and `subs [out, in / 32 · 2]`: Q4_K's, the same bits.
//!
//! 8.625 bits a weight: the values take a byte each (Q8_0's integer dot, which reads a byte a
//! value, with Q4_K's scales and mins; the file's 5 bits would need a kernel of their own). A
//! block's scale `d · sc` and min `dmin · m` are exact in f32, so each value is exactly llama.cpp's
//! dequantization.
//!
//! The activations are rounded to 8-bit blocks of 32 first, as for Q4_K
//! ([`crate::Q4_ACTIVATION_BITS`]): `q5k_matmul` is `round(x) · Wᵀ` on every backend, whichever
//! kernel runs.

use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{Int, Tensor, TensorPrimitive};
use half::f16;

pub use crate::ggml_type::{QK_K, split_q5_k};
use crate::{BlockInts, Q8_BLOCK, Q8Matmul};

#[cfg(feature = "candle")]
mod candle;
#[cfg(feature = "cpu-kernels")]
pub mod cpu;
#[cfg(feature = "ndarray")]
mod ndarray;
#[cfg(test)]
mod tests;

crate::backends::generic_forms!(Q5KMatmul, kernels: ndarray, candle);

/// `x · Wᵀ` with `W` in Q5_K blocks.
pub trait Q5KMatmul: Q8Matmul {
    /// `x [n, in]`; `values [out, in]` (in [`crate::Q8Matmul::q8_layout`]), `supers [out, in /
    /// 256 · 2]`, `subs [out, in / 32 · 2]` as the module's doc says. Returns `[n, out]`.
    fn q5k_matmul(
        x: FloatTensor<Self>,
        values: IntTensor<Self>,
        supers: IntTensor<Self>,
        subs: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        let x = Tensor::<Self, 2>::from_primitive(TensorPrimitive::Float(x));
        let [values, supers, subs] = [values, supers, subs].map(Tensor::<Self, 2, Int>::from_primitive);
        generic::q5k_matmul(x, values, supers, subs).into_primitive().tensor()
    }

    /// The grouped form (see [`crate::grouped_matmul`]): `x [rows, in]` sorted by expert,
    /// `counts [experts]` rows each, the weights' tensors stacked `[experts, ...]`. The default
    /// is a [`Q5KMatmul::q5k_matmul`] per expert with rows.
    fn grouped_q5k_matmul(
        x: FloatTensor<Self>,
        values: IntTensor<Self>,
        supers: IntTensor<Self>,
        subs: IntTensor<Self>,
        counts: IntTensor<Self>,
    ) -> FloatTensor<Self> {
        generic::grouped_q5k_matmul::<Self>(x, values, supers, subs, counts)
    }
}

/// The shapes of a Q5_K weight `[..., out, in]`'s `(values, supers, subs)` on backend `B`.
pub fn q5k_shapes<B: Q8Matmul, const D: usize>(dims: [usize; D]) -> ([usize; D], [usize; D], [usize; D]) {
    let storage = B::block_storage();
    let d_in = dims[D - 1];
    let with = |ints, width| {
        let mut shape = dims;
        shape[D - 1] = width;
        storage.shape(ints, shape)
    };
    (
        with(BlockInts::Q8Values, d_in),
        with(BlockInts::ScaleBits, d_in / QK_K * 2),
        with(BlockInts::Q4Bytes, d_in / Q8_BLOCK * 2),
    )
}

/// `x [n, in] · Wᵀ -> [n, out]` with `W [out, in]` in Q5_K blocks (the module's doc).
pub fn q5k_matmul<B: Q5KMatmul>(
    x: Tensor<B, 2>,
    values: Tensor<B, 2, Int>,
    supers: Tensor<B, 2, Int>,
    subs: Tensor<B, 2, Int>,
) -> Tensor<B, 2> {
    let ([_, d_in], [out, _]) = (x.dims(), values.dims());
    assert!(
        d_in % QK_K == 0 && (values.dims(), supers.dims(), subs.dims()) == q5k_shapes::<B, 2>([out, d_in]),
        "q5k_matmul: x [_, {d_in}], values {:?}, supers {:?} and subs {:?} do not match",
        values.dims(),
        supers.dims(),
        subs.dims()
    );
    let [values, supers, subs] = [values, supers, subs].map(Tensor::into_primitive);
    Tensor::from_primitive(TensorPrimitive::Float(B::q5k_matmul(x.into_primitive().tensor(), values, supers, subs)))
}

/// [`q5k_matmul`] grouped by expert: `x [rows, in]`, sorted by expert with `counts [experts]`
/// rows each, times each row's expert's Q5_K weight (`[experts, ...]` stacks). Returns `[rows,
/// out]`.
pub fn grouped_q5k_matmul<B: Q5KMatmul>(
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
            && (values.dims(), supers.dims(), subs.dims()) == q5k_shapes::<B, 3>([experts, out, d_in]),
        "grouped_q5k_matmul: x [_, {d_in}], values {:?}, supers {:?}, subs {:?} and counts [{c}] do not match",
        values.dims(),
        supers.dims(),
        subs.dims()
    );
    let [values, supers, subs] = [values, supers, subs].map(Tensor::into_primitive);
    Tensor::from_primitive(TensorPrimitive::Float(B::grouped_q5k_matmul(
        x.into_primitive().tensor(),
        values,
        supers,
        subs,
        counts.into_primitive(),
    )))
}

/// The weights (`[rows, cols]`, row-major) that Q5_K parts stand for ([`split_q5_k`]'s, values in
/// row order): `d · sc · q - dmin · m`, as llama.cpp computes it.
pub fn dequantize_q5k(values: &[i8], supers: &[f16], subs: &[u8]) -> Vec<f32> {
    const PER_SUPER: usize = QK_K / Q8_BLOCK;
    let mut out = vec![0f32; values.len()];
    for (b, (y, q)) in out.chunks_exact_mut(Q8_BLOCK).zip(values.chunks_exact(Q8_BLOCK)).enumerate() {
        let (d, dmin) = (supers[b / PER_SUPER * 2].to_f32(), supers[b / PER_SUPER * 2 + 1].to_f32());
        let (scale, min) = (d * subs[2 * b] as f32, dmin * subs[2 * b + 1] as f32);
        for (y, &q) in y.iter_mut().zip(q) {
            *y = scale * q as f32 - min;
        }
    }
    out
}

/// The generic Q5_K matmuls, in burn tensor ops: [`Q5KMatmul`]'s defaults.
pub mod generic {
    use burn::tensor::ops::{FloatTensor, IntTensor};
    use burn::tensor::{Int, Tensor, TensorPrimitive};

    use super::Q5KMatmul;
    use crate::dense_matmul::generic::{expert_of, per_expert};
    use crate::q4k_matmul::generic::block_scales_and_mins;
    use crate::q8_matmul::generic::round_activations;
    use crate::{Q8_BLOCK, Q8Matmul};

    /// `round(x) · Wᵀ` with the Q5_K weight dequantized first ([`q5k_weight`]), then one float
    /// matmul on the activations rounded to [`crate::Q4_ACTIVATION_BITS`].
    pub fn q5k_matmul<B: Q8Matmul>(
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
        round_activations(x, crate::Q4_ACTIVATION_BITS).matmul(q5k_weight(values, supers, subs, d_in).transpose())
    }

    /// The weight `[rows, in]` that Q5_K parts stand for (`values` in row order, not a kernel's),
    /// in tensor ops: `d · sc · q - dmin · m`, exact in f32 as llama.cpp's.
    pub fn q5k_weight<B: Q8Matmul>(
        values: Tensor<B, 2, Int>,
        supers: Tensor<B, 2, Int>,
        subs: Tensor<B, 2, Int>,
        d_in: usize,
    ) -> Tensor<B, 2> {
        let [rows, _] = values.dims();
        let q = crate::q8_values_f32(values).narrow(1, 0, d_in).reshape([rows, d_in / Q8_BLOCK, Q8_BLOCK]);
        let (scale, min) = block_scales_and_mins(supers, subs, rows, d_in);
        (q * scale - min).reshape([rows, d_in])
    }

    /// [`crate::grouped_q5k_matmul`] as a [`Q5KMatmul::q5k_matmul`] per expert with rows.
    pub fn grouped_q5k_matmul<B: Q5KMatmul>(
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
            crate::q5k_matmul(x, expert_of(&values, expert), expert_of(&supers, expert), expert_of(&subs, expert))
        })
        .into_primitive()
        .tensor()
    }
}
