//! The Q5_K products on the host, for the CPU backends: Q8_0's integer dot with Q4_K's scales and
//! mins ([`crate::cpu::integer_dot::q5k_matmul`]) where the CPU has one, else panels of rows
//! dequantized to f32 and sgemm.

use half::f16;

use crate::cpu::{check_grouped, dequantized_matmul, per_expert};
#[cfg(target_arch = "x86_64")]
use crate::cpu::{dot_isa, integer_dot};
use crate::{Q4_ACTIVATION_BITS, Q8_BLOCK, round_activations};

use super::QK_K;

/// `round(x) [n, d_in] · Wᵀ -> [n, d_out]` for `W` in Q5_K parts (`values [d_out, d_in]` in
/// [`crate::q8_matmul::cpu::q8_layout`], `supers`, `subs` as [`super`] holds them).
#[allow(clippy::too_many_arguments)]
pub fn q5k_matmul(
    x: &[f32],
    n: usize,
    values: &[i8],
    supers: &[f16],
    subs: &[u8],
    d_out: usize,
    d_in: usize,
) -> Vec<f32> {
    #[cfg(target_arch = "x86_64")]
    if let Some(isa) = dot_isa() {
        return integer_dot::q5k_matmul(isa, x, n, values, supers, subs, d_out, d_in);
    }
    let x = round_activations(x, d_in, Q4_ACTIVATION_BITS);
    dequantized_q5k_matmul(&x, n, values, supers, subs, d_out, d_in)
}

/// `x · Wᵀ` for `W` in Q5_K parts (`values` in row order): panels of rows dequantized to f32,
/// then sgemm ([`dequantized_matmul`]); `x` as it is.
pub fn dequantized_q5k_matmul(
    x: &[f32],
    n: usize,
    values: &[i8],
    supers: &[f16],
    subs: &[u8],
    d_out: usize,
    d_in: usize,
) -> Vec<f32> {
    dequantized_matmul(x, n, d_out, d_in, |first, weights| {
        let rows = weights.len() / d_in;
        let part = super::dequantize_q5k(
            &values[first * d_in..][..rows * d_in],
            &supers[first * d_in / QK_K * 2..][..rows * d_in / QK_K * 2],
            &subs[first * d_in / Q8_BLOCK * 2..][..rows * d_in / Q8_BLOCK * 2],
        );
        weights.copy_from_slice(&part);
    })
}

/// [`q5k_matmul`] per expert (`[E, ...]` stacks), the experts in parallel.
///
/// # Panics
/// If the slices do not match the shapes (`counts` summing to `rows`).
#[allow(clippy::too_many_arguments)]
pub fn grouped_q5k_matmul(
    x: &[f32],
    counts: &[usize],
    values: &[i8],
    supers: &[f16],
    subs: &[u8],
    d_out: usize,
    d_in: usize,
) -> Vec<f32> {
    let (size, super_count, sub_count) = (d_out * d_in, d_out * d_in / QK_K * 2, d_out * d_in / Q8_BLOCK * 2);
    check_grouped(x, counts, d_in, (values.len(), supers.len()), (size, super_count));
    assert_eq!(subs.len(), counts.len() * sub_count, "grouped_q5k_matmul: subs do not match the experts");
    per_expert(x, counts, d_in, |e, x, rows| {
        q5k_matmul(
            x,
            rows,
            &values[e * size..][..size],
            &supers[e * super_count..][..super_count],
            &subs[e * sub_count..][..sub_count],
            d_out,
            d_in,
        )
    })
}
