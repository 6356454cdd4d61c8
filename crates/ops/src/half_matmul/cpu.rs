//! The 16-bit products on the host, for the CPU backends: panels widened to f32, then sgemm.

use half::f16;
use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};

use crate::Half;
use crate::cpu::{check_grouped, dequantized_matmul, per_expert};

/// `x [n, d_in] · Wᵀ -> [n, d_out]` for `W [d_out, d_in]` in 16-bit floats (`bits` in row
/// order), through [`dequantized_matmul`]: panels of rows read as f32, then sgemm. The
/// activations stay f32. An f16 is widened by `half`'s slice conversion (F16C where the CPU has
/// it); a bf16 is the top half of its f32, a shift the compiler vectorises.
pub fn half_matmul(x: &[f32], n: usize, bits: &[u16], half: Half, d_out: usize, d_in: usize) -> Vec<f32> {
    dequantized_matmul(x, n, d_out, d_in, |first, weights| {
        let bits = &bits[first * d_in..][..weights.len()];
        match half {
            Half::F16 => bits.reinterpret_cast::<f16>().convert_to_f32_slice(weights),
            Half::Bf16 => {
                for (w, &b) in weights.iter_mut().zip(bits) {
                    *w = f32::from_bits(u32::from(b) << 16);
                }
            }
        }
    })
}

/// [`grouped_q8_matmul`] with the experts' weights in 16-bit floats, `bits [E, d_out, d_in]`:
/// [`half_matmul`] per expert, the experts in parallel.
///
/// # Panics
/// If the slices do not match the shapes (`counts` summing to `rows`).
pub fn grouped_half_matmul(
    x: &[f32],
    counts: &[usize],
    bits: &[u16],
    half: Half,
    d_out: usize,
    d_in: usize,
) -> Vec<f32> {
    let size = d_out * d_in;
    check_grouped(x, counts, d_in, (bits.len(), 0), (size, 0));
    per_expert(x, counts, d_in, |e, x, rows| half_matmul(x, rows, &bits[e * size..][..size], half, d_out, d_in))
}
