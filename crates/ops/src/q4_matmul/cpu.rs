//! The Q4_0 products on the host, for the CPU backends: as Q8_0's ([`crate::q8_matmul`]).

use half::f16;

use crate::cpu::{check_grouped, dequantized_matmul, per_expert};
#[cfg(target_arch = "x86_64")]
use crate::cpu::{dot_isa, integer_dot};
use crate::{Q4_ACTIVATION_BITS, round_activations};

/// The order [`q4_matmul`] reads the packed bytes of a weight (or a stack of them) `[d_out, d_in
/// / 2]` in on this CPU.
pub fn q4_layout(packed: Vec<u8>, d_out: usize, d_in: usize) -> Vec<u8> {
    #[cfg(target_arch = "x86_64")]
    if let Some(isa) = dot_isa() {
        return integer_dot::q4_layout(isa, &packed, d_out, d_in);
    }
    let _ = (d_out, d_in);
    packed
}

/// [`q8_matmul`] for `W` in Q4_0 blocks (`packed [d_out, d_in / 2]` in [`q4_layout`]), the
/// activations rounded to [`Q4_ACTIVATION_BITS`].
pub fn q4_matmul(x: &[f32], n: usize, packed: &[u8], scales: &[f16], d_out: usize, d_in: usize) -> Vec<f32> {
    #[cfg(target_arch = "x86_64")]
    if let Some(isa) = dot_isa() {
        return integer_dot::q4_matmul(isa, x, n, packed, scales, d_out, d_in);
    }
    let x = round_activations(x, d_in, Q4_ACTIVATION_BITS);
    dequantized_q4_matmul(&x, n, packed, scales, d_out, d_in)
}

/// [`dequantized_q8_matmul`] for `W` in Q4_0 blocks (`packed [d_out, d_in / 2]` in Q4_0's order).
pub fn dequantized_q4_matmul(
    x: &[f32],
    n: usize,
    packed: &[u8],
    scales: &[f16],
    d_out: usize,
    d_in: usize,
) -> Vec<f32> {
    const BLOCK: usize = crate::Q4_BLOCK;
    dequantized_matmul(x, n, d_out, d_in, |first, weights| {
        let blocks = packed[first * d_in / 2..][..weights.len() / 2].chunks_exact(BLOCK / 2);
        for ((dst, bytes), &d) in weights.chunks_exact_mut(BLOCK).zip(blocks).zip(&scales[first * d_in / BLOCK..]) {
            let d = d.to_f32();
            for (j, &byte) in bytes.iter().enumerate() {
                dst[j] = ((byte & 15) as f32 - 8.0) * d;
                dst[j + BLOCK / 2] = ((byte >> 4) as f32 - 8.0) * d;
            }
        }
    })
}

/// [`grouped_q8_matmul`] with the experts' weights in Q4_0 blocks (`packed [E, d_out, d_in / 2]`
/// in [`q4_layout`]): [`q4_matmul`] per expert, the experts in parallel.
///
/// # Panics
/// If the slices do not match the shapes (`counts` summing to `rows`).
pub fn grouped_q4_matmul(
    x: &[f32],
    counts: &[usize],
    packed: &[u8],
    scales: &[f16],
    d_out: usize,
    d_in: usize,
) -> Vec<f32> {
    let (size, blocks) = (d_out * d_in / 2, d_out * d_in / crate::Q4_BLOCK);
    check_grouped(x, counts, d_in, (packed.len(), scales.len()), (size, blocks));
    per_expert(x, counts, d_in, |e, x, rows| {
        q4_matmul(x, rows, &packed[e * size..][..size], &scales[e * blocks..][..blocks], d_out, d_in)
    })
}
