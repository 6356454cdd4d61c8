//! The 16-bit products on the host, for the CPU backends. bf16 weights: the activations rounded
//! to bf16, then the bf16 dot where the CPU has one ([`crate::cpu::bf16_dot`]), else panels
//! widened to f32 and sgemm. f16 weights: the activations as they are, panels widened and sgemm.

use half::f16;
use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};

#[cfg(target_arch = "x86_64")]
use crate::cpu::bf16_dot::{Bf16Isa, bf16_matmul};
use crate::cpu::{check_grouped, dequantized_matmul, per_expert};
use crate::{Half, round_to_bf16};

/// `x [n, d_in] · Wᵀ -> [n, d_out]` for `W [d_out, d_in]` in 16-bit floats (`bits` in row
/// order), `x` rounded to bf16 first for bf16 weights (on every CPU, so that the result does not
/// depend on which kernel runs): [`bf16_matmul`] where the CPU runs it, else
/// [`widened_half_matmul`].
pub fn half_matmul(x: &[f32], n: usize, bits: &[u16], half: Half, d_out: usize, d_in: usize) -> Vec<f32> {
    match half {
        Half::F16 => widened_half_matmul(x, n, bits, half, d_out, d_in),
        Half::Bf16 => {
            #[cfg(target_arch = "x86_64")]
            if let Some(isa) = Bf16Isa::best(n) {
                return bf16_matmul(isa, x, n, bits, d_out, d_in);
            }
            widened_half_matmul(&round_to_bf16(x), n, bits, half, d_out, d_in)
        }
    }
}

/// What [`half_matmul`] runs for weights in `half` on this CPU, in words.
pub fn half_kernel(half: Half) -> String {
    let kernel = match half {
        Half::F16 => None,
        #[cfg(target_arch = "x86_64")]
        Half::Bf16 => Bf16Isa::about_best(),
        #[cfg(not(target_arch = "x86_64"))]
        Half::Bf16 => None,
    };
    let product = kernel.unwrap_or_else(|| "panels widened to f32, then sgemm".to_string());
    match half {
        Half::F16 => product,
        Half::Bf16 => format!("{product}; activations rounded to bf16"),
    }
}

/// `x [n, d_in] · Wᵀ -> [n, d_out]` for `W` in 16-bit floats, `x` as given, through
/// [`dequantized_matmul`]: panels of rows read as f32, then sgemm. An f16 is widened by `half`'s
/// slice conversion (F16C where the CPU has it); a bf16 is the top half of its f32, a shift the
/// compiler vectorises.
pub fn widened_half_matmul(x: &[f32], n: usize, bits: &[u16], half: Half, d_out: usize, d_in: usize) -> Vec<f32> {
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

/// [`half_matmul`] grouped by expert, `bits [E, d_out, d_in]`: per expert, the experts in
/// parallel.
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
