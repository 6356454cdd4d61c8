//! Matmul with weights in 8-bit blocks: llama.cpp's Q8_0 layout.
//!
//! A weight `W [out, in]` (PyTorch's orientation: a row per output) is cut along `in` into
//! blocks of [`Q8_BLOCK`] values; each block keeps one scale `d = max|w| / 127` and the values
//! `round(w / d)` as `i8`, so `w ≈ value * d`. As in llama.cpp's `quantize_row_q8_0_ref`
//! (ggml/src/ggml-quants.c), the values are rounded with the f32 scale and the scale is then
//! stored rounded to f16 (kept here as the f32 of that f16).

use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{DType, Element, Int, Shape, Tensor, TensorData, TensorPrimitive, backend::Backend};
use half::f16;
use rayon::prelude::*;

/// Values per block (one scale each).
pub const Q8_BLOCK: usize = 32;

/// `x · Wᵀ` with `W` in Q8_0 blocks.
pub trait Q8Matmul: Backend {
    /// The int dtype the values are held in: the backend's own int dtype, unless the backend
    /// names a smaller one it stores and computes correctly (ndarray: i8; wgpu 0.21 accepts i8
    /// tensors but reads them wrongly, candle has none).
    fn q8_values_dtype() -> DType {
        <Self::IntElem as Element>::dtype()
    }

    /// `x`: `[n, in]`; `values`: `[out, in]` ints in `-127..=127`; `scales`: `[out, in / 32]`.
    /// Returns `[n, out]`.
    fn q8_matmul(x: FloatTensor<Self>, values: IntTensor<Self>, scales: FloatTensor<Self>) -> FloatTensor<Self> {
        let x = Tensor::<Self, 2>::from_primitive(TensorPrimitive::Float(x));
        let values = Tensor::<Self, 2, Int>::from_primitive(values);
        let scales = Tensor::<Self, 2>::from_primitive(TensorPrimitive::Float(scales));
        crate::generic::q8_matmul(x, values, scales).into_primitive().tensor()
    }
}

/// `x [n, in] · Wᵀ -> [n, out]` with `W [out, in]` given as Q8_0 `values` and `scales`.
pub fn q8_matmul<B: Q8Matmul>(x: Tensor<B, 2>, values: Tensor<B, 2, Int>, scales: Tensor<B, 2>) -> Tensor<B, 2> {
    let ([_, d_in], [out, v_in], [s_out, blocks]) = (x.dims(), values.dims(), scales.dims());
    assert!(
        d_in == v_in && out == s_out && blocks * Q8_BLOCK == d_in,
        "q8_matmul: x [_, {d_in}], values [{out}, {v_in}] and scales [{s_out}, {blocks}] do not match"
    );
    Tensor::from_primitive(TensorPrimitive::Float(B::q8_matmul(
        x.into_primitive().tensor(),
        values.into_primitive(),
        scales.into_primitive().tensor(),
    )))
}

/// Q8_0 values as a tensor of the backend's [`Q8Matmul::q8_values_dtype`].
pub fn q8_values<B: Q8Matmul, const D: usize>(values: Vec<i8>, shape: impl Into<Shape>, device: &B::Device) -> Tensor<B, D, Int> {
    Tensor::from_data(TensorData::new(values, shape), (device, B::q8_values_dtype()))
}

/// Quantizes row-major `[rows, cols]` values (`cols` a multiple of [`Q8_BLOCK`]) to Q8_0:
/// `(values [rows, cols], scales [rows, cols / 32])`, in parallel over blocks.
pub fn quantize_q8(weights: &[f32], cols: usize) -> (Vec<i8>, Vec<f32>) {
    assert!(cols % Q8_BLOCK == 0, "quantize_q8: {cols} columns are not whole blocks of {Q8_BLOCK}");
    let mut values = vec![0i8; weights.len()];
    let mut scales = vec![0f32; weights.len() / Q8_BLOCK];
    values
        .par_chunks_mut(Q8_BLOCK)
        .zip(scales.par_iter_mut())
        .zip(weights.par_chunks(Q8_BLOCK))
        .for_each(|((values, scale), block)| {
            let amax = block.iter().fold(0f32, |m, w| m.max(w.abs()));
            let d = amax / 127.0;
            let inverse = if d != 0.0 { 1.0 / d } else { 0.0 };
            for (value, w) in values.iter_mut().zip(block) {
                *value = (w * inverse).round() as i8;
            }
            *scale = f16::from_f32(d).to_f32();
        });
    (values, scales)
}

/// The weights that Q8_0 values and scales stand for (`[rows, cols]`, row-major).
pub fn dequantize_q8(values: &[i8], scales: &[f32]) -> Vec<f32> {
    values
        .chunks(Q8_BLOCK)
        .zip(scales)
        .flat_map(|(block, &d)| block.iter().map(move |&v| v as f32 * d))
        .collect()
}
