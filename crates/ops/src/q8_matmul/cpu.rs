//! The Q8_0 products on the host, for the CPU backends: the integer dot where the CPU has one
//! ([`crate::cpu::integer_dot`]), else panels dequantized to f32 and sgemm.

use half::f16;

use crate::cpu::{check_grouped, dequantized_matmul, per_expert};
#[cfg(target_arch = "x86_64")]
use crate::cpu::{dot_isa, integer_dot};
use crate::{ActivationBits, round_activations};

/// The order [`q8_matmul`] reads the values of a weight (or a stack of them) `[d_out, d_in]` in on
/// this CPU.
pub fn q8_layout(values: Vec<i8>, d_out: usize, d_in: usize) -> Vec<i8> {
    #[cfg(target_arch = "x86_64")]
    if let Some(isa) = dot_isa() {
        return integer_dot::q8_layout(isa, &values, d_out, d_in);
    }
    let _ = (d_out, d_in);
    values
}

/// `round(x) [n, d_in] · Wᵀ -> [n, d_out]` for `W [d_out, d_in]` in Q8_0 blocks (`values` in
/// [`q8_layout`], `scales [d_out, d_in / 32]`), the activations rounded to blocks of `bits`
/// integers ([`round_activations`]): the [`integer_dot`] where the CPU has one (x86-64 with AVX2),
/// else [`dequantized_q8_matmul`] on the rounded activations.
pub fn q8_matmul(
    x: &[f32],
    n: usize,
    values: &[i8],
    scales: &[f16],
    d_out: usize,
    d_in: usize,
    bits: ActivationBits,
) -> Vec<f32> {
    #[cfg(target_arch = "x86_64")]
    if let Some(isa) = dot_isa() {
        return integer_dot::q8_matmul(isa, x, n, values, scales, d_out, d_in, bits);
    }
    let x = round_activations(x, d_in, bits);
    dequantized_q8_matmul(&x, n, values, scales, d_out, d_in)
}

/// `x [n, d_in] · Wᵀ -> [n, d_out]` for `W [d_out, d_in]` in Q8_0 blocks (`values` in row order,
/// `scales [d_out, d_in / 32]`), through [`dequantized_matmul`].
pub fn dequantized_q8_matmul(
    x: &[f32],
    n: usize,
    values: &[i8],
    scales: &[f16],
    d_out: usize,
    d_in: usize,
) -> Vec<f32> {
    const BLOCK: usize = crate::Q8_BLOCK;
    dequantized_matmul(x, n, d_out, d_in, |first, weights| {
        let blocks = values[first * d_in..][..weights.len()].chunks_exact(BLOCK);
        for ((dst, block), &d) in weights.chunks_exact_mut(BLOCK).zip(blocks).zip(&scales[first * d_in / BLOCK..]) {
            let d = d.to_f32();
            for (w, &v) in dst.iter_mut().zip(block) {
                *w = v as f32 * d;
            }
        }
    })
}

/// [`grouped_matmul`] with the experts' weights in Q8_0 blocks, `[E, d_out, d_in]` (`values` in
/// [`q8_layout`], `scales [E, d_out, d_in / 32]`): [`q8_matmul`] per expert, the experts in
/// parallel (each product is parallel over its weight rows too).
///
/// # Panics
/// If the slices do not match the shapes (`counts` summing to `rows`).
pub fn grouped_q8_matmul(
    x: &[f32],
    counts: &[usize],
    values: &[i8],
    scales: &[f16],
    d_out: usize,
    d_in: usize,
    bits: ActivationBits,
) -> Vec<f32> {
    let (size, blocks) = (d_out * d_in, d_out * d_in / crate::Q8_BLOCK);
    check_grouped(x, counts, d_in, (values.len(), scales.len()), (size, blocks));
    per_expert(x, counts, d_in, |e, x, rows| {
        q8_matmul(x, rows, &values[e * size..][..size], &scales[e * blocks..][..blocks], d_out, d_in, bits)
    })
}
