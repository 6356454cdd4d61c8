//! Matmul with weights in llama.cpp's Q6_K blocks, held with a GGUF file's values (never rounded
//! again).
//!
//! A Q6_K super-block holds 256 values of a row ([`QK_K`]) in 16 blocks of 16: an f16 `d` a
//! super-block, an i8 scale `sc` a block, and a 6-bit `q` a value standing for `d · sc · (q -
//! 32)` (`block_q6_K` and `dequantize_row_q6_K` in llama.cpp's ggml/src/ggml-quants.c; 6.5625
//! bits a weight). Here a weight `[out, in]` is held in three int tensors, as the backend's
//! [`crate::Q8Matmul::block_storage`] holds narrow ints:
//!
//! - `values [out, in]`: each `q - 32` as an i8, as Q8_0's values are held: in the kernel's
//!   layout for a product ([`crate::q8_values`]), in row order for a token table
//!   ([`crate::q8_rows`]);
//! - `supers [out, in / 256]`: each super-block's `d`, f16 bits ([`crate::block_scales`]);
//! - `subs [out, in / 16]`: each block's `sc`, an i8 ([`crate::q8_rows`]).
//!
//! 8.56 bits a weight: the 6-bit values take a byte each, so that every backend reads them with
//! Q8_0's tensor ops. [`split_q6_k`] takes a file's blocks apart into them; [`split_q3_k`] takes
//! Q3_K's, which are the same form with 3-bit values and scales of 6 bits. A block's scale `d ·
//! sc` is exact in f32 (11 by 8 significant bits) and its product with `q - 32` is rounded once,
//! as llama.cpp's (`d · sc` first), so each value is exactly llama.cpp's dequantization.
//!
//! The product rounds its activations as Q8_0's does ([`crate::ActivationBits`], by what the
//! projection's input is), then runs Q8_0's integer dot with a scale a half block where the CPU
//! has one (`crate::cpu::integer_dot::q6k_matmul`): `q6k_matmul` is `round(x) · Wᵀ` on every
//! backend, whichever kernel runs.

use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{Int, Tensor, TensorPrimitive};
use half::f16;

pub use crate::ggml_type::{QK_K, split_q3_k, split_q6_k};
use crate::{ActivationBits, BlockInts, Q8Matmul};

#[cfg(feature = "candle")]
mod candle;
#[cfg(feature = "cpu-kernels")]
pub mod cpu;
#[cfg(feature = "ndarray")]
mod ndarray;
#[cfg(test)]
mod tests;

crate::backends::generic_forms!(Q6KMatmul, kernels: ndarray, candle);

/// Values per Q6_K block (one scale each).
pub const Q6K_BLOCK: usize = 16;

/// `x · Wᵀ` with `W` in Q6_K blocks.
pub trait Q6KMatmul: Q8Matmul {
    /// `x [n, in]`, rounded to `bits`; `values [out, in]` (in [`crate::Q8Matmul::q8_layout`]),
    /// `supers [out, in / 256]`, `subs [out, in / 16]` as the module's doc says. Returns `[n,
    /// out]`.
    fn q6k_matmul(
        x: FloatTensor<Self>,
        values: IntTensor<Self>,
        supers: IntTensor<Self>,
        subs: IntTensor<Self>,
        bits: ActivationBits,
    ) -> FloatTensor<Self> {
        let x = Tensor::<Self, 2>::from_primitive(TensorPrimitive::Float(x));
        let [values, supers, subs] = [values, supers, subs].map(Tensor::<Self, 2, Int>::from_primitive);
        generic::q6k_matmul(x, values, supers, subs, bits).into_primitive().tensor()
    }

    /// The grouped form (see [`crate::grouped_matmul`]): `x [rows, in]` sorted by expert,
    /// `counts [experts]` rows each, the weights' tensors stacked `[experts, ...]`. The default
    /// is a [`Q6KMatmul::q6k_matmul`] per expert with rows.
    fn grouped_q6k_matmul(
        x: FloatTensor<Self>,
        values: IntTensor<Self>,
        supers: IntTensor<Self>,
        subs: IntTensor<Self>,
        counts: IntTensor<Self>,
        bits: ActivationBits,
    ) -> FloatTensor<Self> {
        generic::grouped_q6k_matmul::<Self>(x, values, supers, subs, counts, bits)
    }
}

/// The shapes of a Q6_K weight `[..., out, in]`'s `(values, supers, subs)` on backend `B`.
pub fn q6k_shapes<B: Q8Matmul, const D: usize>(dims: [usize; D]) -> ([usize; D], [usize; D], [usize; D]) {
    let storage = B::block_storage();
    let d_in = dims[D - 1];
    let with = |ints, width| {
        let mut shape = dims;
        shape[D - 1] = width;
        storage.shape(ints, shape)
    };
    (
        with(BlockInts::Q8Values, d_in),
        with(BlockInts::ScaleBits, d_in / QK_K),
        with(BlockInts::Q8Values, d_in / Q6K_BLOCK),
    )
}

/// `round(x) [n, in] · Wᵀ -> [n, out]` with `W [out, in]` in Q6_K blocks (the module's doc), `x`
/// rounded to `bits`.
pub fn q6k_matmul<B: Q6KMatmul>(
    x: Tensor<B, 2>,
    values: Tensor<B, 2, Int>,
    supers: Tensor<B, 2, Int>,
    subs: Tensor<B, 2, Int>,
    bits: ActivationBits,
) -> Tensor<B, 2> {
    let [_, d_in] = x.dims();
    let out = values.dims()[0];
    assert!(
        d_in % QK_K == 0 && (values.dims(), supers.dims(), subs.dims()) == q6k_shapes::<B, 2>([out, d_in]),
        "q6k_matmul: x [_, {d_in}], values {:?}, supers {:?} and subs {:?} do not match",
        values.dims(),
        supers.dims(),
        subs.dims()
    );
    let [values, supers, subs] = [values, supers, subs].map(Tensor::into_primitive);
    Tensor::from_primitive(TensorPrimitive::Float(B::q6k_matmul(
        x.into_primitive().tensor(),
        values,
        supers,
        subs,
        bits,
    )))
}

/// [`q6k_matmul`] grouped by expert: `x [rows, in]` (rounded to `bits`), sorted by expert with `counts [experts]`
/// rows each, times each row's expert's Q6_K weight (`[experts, ...]` stacks). Returns `[rows,
/// out]`.
pub fn grouped_q6k_matmul<B: Q6KMatmul>(
    x: Tensor<B, 2>,
    values: Tensor<B, 3, Int>,
    supers: Tensor<B, 3, Int>,
    subs: Tensor<B, 3, Int>,
    counts: Tensor<B, 1, Int>,
    bits: ActivationBits,
) -> Tensor<B, 2> {
    let ([_, d_in], [experts, out, _], [c]) = (x.dims(), values.dims(), counts.dims());
    assert!(
        d_in % QK_K == 0
            && c == experts
            && (values.dims(), supers.dims(), subs.dims()) == q6k_shapes::<B, 3>([experts, out, d_in]),
        "grouped_q6k_matmul: x [_, {d_in}], values {:?}, supers {:?}, subs {:?} and counts [{c}] do not match",
        values.dims(),
        supers.dims(),
        subs.dims()
    );
    let [values, supers, subs] = [values, supers, subs].map(Tensor::into_primitive);
    Tensor::from_primitive(TensorPrimitive::Float(B::grouped_q6k_matmul(
        x.into_primitive().tensor(),
        values,
        supers,
        subs,
        counts.into_primitive(),
        bits,
    )))
}

/// The weights (`[rows, cols]`, row-major) that Q6_K parts stand for ([`split_q6_k`]'s): `(d ·
/// sc) · (q - 32)`, as llama.cpp computes it.
pub fn dequantize_q6k(values: &[i8], supers: &[f16], subs: &[i8]) -> Vec<f32> {
    const PER_SUPER: usize = QK_K / Q6K_BLOCK;
    let mut out = vec![0f32; values.len()];
    for (b, (y, q)) in out.chunks_exact_mut(Q6K_BLOCK).zip(values.chunks_exact(Q6K_BLOCK)).enumerate() {
        let scale = supers[b / PER_SUPER].to_f32() * subs[b] as f32;
        for (y, &q) in y.iter_mut().zip(q) {
            *y = scale * q as f32;
        }
    }
    out
}

/// The generic Q6_K matmuls, in burn tensor ops: [`Q6KMatmul`]'s defaults.
pub mod generic {
    use burn::tensor::backend::Backend;
    use burn::tensor::ops::{FloatTensor, IntTensor};
    use burn::tensor::{Int, Tensor, TensorPrimitive};

    use super::{Q6K_BLOCK, Q6KMatmul, QK_K};
    use crate::dense_matmul::generic::{expert_of, per_expert};
    use crate::q8_matmul::generic::round_activations;
    use crate::{ActivationBits, Q8Matmul};

    /// `round(x) · Wᵀ` with the Q6_K weight dequantized first ([`q6k_weight`]; `values` in row
    /// order, not a kernel's), then one float matmul on the activations rounded to `bits`.
    pub fn q6k_matmul<B: Q8Matmul>(
        x: Tensor<B, 2>,
        values: Tensor<B, 2, Int>,
        supers: Tensor<B, 2, Int>,
        subs: Tensor<B, 2, Int>,
        bits: ActivationBits,
    ) -> Tensor<B, 2> {
        let ([n, d_in], [out, _]) = (x.dims(), values.dims());
        if n == 0 {
            // burn-ndarray 0.21's matmul divides by the row count.
            return Tensor::zeros([0, out], &x.device());
        }
        round_activations(x, bits).matmul(q6k_weight(values, supers, subs, d_in).transpose())
    }

    /// The weight `[rows, in]` that Q6_K parts stand for, in tensor ops: `(d · sc) · (q - 32)`,
    /// exactly llama.cpp's values. Also a token table's rows: `values`, `supers` and `subs` may be
    /// the same rows of a table's.
    pub fn q6k_weight<B: Q8Matmul>(
        values: Tensor<B, 2, Int>,
        supers: Tensor<B, 2, Int>,
        subs: Tensor<B, 2, Int>,
        d_in: usize,
    ) -> Tensor<B, 2> {
        let d = crate::block_scales_f32(supers, d_in / QK_K);
        q6k_scaled(crate::q8_values_f32(values), d, crate::q8_values_f32(subs))
    }

    /// [`q6k_weight`] from its parts read back as floats: `values [rows, ≥ in]` (`q - 32`), `d
    /// [rows, in / 256]` and `subs [rows, ≥ in / 16]` (`sc`; storage may pad a row past its
    /// width).
    pub fn q6k_scaled<B: Backend>(values: Tensor<B, 2>, d: Tensor<B, 2>, subs: Tensor<B, 2>) -> Tensor<B, 2> {
        let [rows, super_blocks] = d.dims();
        let (d_in, blocks) = (super_blocks * QK_K, super_blocks * QK_K / Q6K_BLOCK);
        let q = values.narrow(1, 0, d_in).reshape([rows, blocks, Q6K_BLOCK]);
        let sc = subs.narrow(1, 0, blocks).reshape([rows, super_blocks, QK_K / Q6K_BLOCK]);
        let scale = (sc * d.reshape([rows, super_blocks, 1])).reshape([rows, blocks, 1]);
        (q * scale).reshape([rows, d_in])
    }

    /// [`crate::grouped_q6k_matmul`] as a [`Q6KMatmul::q6k_matmul`] per expert with rows.
    pub fn grouped_q6k_matmul<B: Q6KMatmul>(
        x: FloatTensor<B>,
        values: IntTensor<B>,
        supers: IntTensor<B>,
        subs: IntTensor<B>,
        counts: IntTensor<B>,
        bits: ActivationBits,
    ) -> FloatTensor<B> {
        let x = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(x));
        let [values, supers, subs] = [values, supers, subs].map(Tensor::<B, 3, Int>::from_primitive);
        let d_out = values.dims()[1];
        per_expert(x, Tensor::from_primitive(counts), d_out, |x, expert| {
            crate::q6k_matmul(x, expert_of(&values, expert), expert_of(&supers, expert), expert_of(&subs, expert), bits)
        })
        .into_primitive()
        .tensor()
    }
}
