//! The Q8_0 matmul as an integer dot with AVX-512 VNNI (`vpdpbusd`), on x86-64 CPUs that have
//! it (Intel Xeon since Cascade Lake and Core since Ice Lake, AMD since Zen 4).
//!
//! `vpdpbusd` multiplies 64 unsigned bytes by 64 signed bytes and adds each run of four products
//! into one of 16 i32 lanes. [`layout`] makes the lanes weight rows: in each group of 16 rows,
//! the rows' 4 values of inputs `k..k+4` lie side by side, so one instruction with a token's 4
//! activation bytes broadcast to every lane adds 4 inputs' products to 16 outputs. Eight such
//! steps cover a block of 32 inputs; the block's integer sums are then scaled (weight scale ×
//! activation scale) into f32 accumulators. The f32 work is thus one step per 8 integer steps,
//! where a dot product per output (llama.cpp's `ggml_vec_dot_q8_0_q8_0`) pays it every step.
//!
//! Signs: the instruction wants one operand unsigned. The weight bytes are read as `w + 128`
//! (their top bit flipped) and the activations as they are, so a lane gets
//! `Σ (w + 128) x = Σ w x + 128 Σ x`; each lane starts from `-128 Σ x` of its token's block.

use std::arch::x86_64::*;

use half::f16;
use rayon::prelude::*;

use crate::Q8_BLOCK;

/// Weight rows per group: the 16 i32 lanes of a 512-bit register.
const GROUP: usize = 16;
/// Tokens per tile: their accumulators (two registers each) stay in the 32 registers.
const TILE: usize = 8;

/// Whether this CPU runs the kernel (checked once by the standard library, then cached).
pub fn available() -> bool {
    is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw") && is_x86_feature_detected!("avx512vnni")
}

/// The values of each weight `[d_out, d_in]` of a stack regrouped as the kernel reads them: for
/// each group of 16 rows (the last may have fewer, `r`), for each `k` step of 4 inputs, `r × 4`
/// bytes (row by row, 4 inputs each). A permutation: the same values, the same count.
pub fn layout(values: &[i8], d_out: usize, d_in: usize) -> Vec<i8> {
    let mut grouped = vec![0i8; values.len()];
    if values.is_empty() {
        return grouped;
    }
    debug_assert_eq!(values.len() % (d_out * d_in), 0);
    // Groups never cross a weight: each weight is cut on its own.
    let weights = grouped.par_chunks_mut(d_out * d_in).zip(values.par_chunks(d_out * d_in));
    weights.flat_map(|(grouped, weight)| grouped.par_chunks_mut(GROUP * d_in).zip(weight.par_chunks(GROUP * d_in))).for_each(
        |(grouped, rows)| {
            let width = rows.len() / d_in;
            for (r, row) in rows.chunks_exact(d_in).enumerate() {
                for (step, four) in row.chunks_exact(4).enumerate() {
                    grouped[step * width * 4 + r * 4..][..4].copy_from_slice(four);
                }
            }
        },
    );
    grouped
}

/// `round_q8(x) [n, d_in] · Wᵀ -> [n, d_out]`: `W` as Q8_0 `values` in [`layout`] and `scales
/// [d_out, d_in / 32]` (f16), `x` rounded here ([`crate::quantize_activations_q8`], compiled for
/// AVX-512). Parallel over groups of 16 weight rows; each group's values are read once per 8
/// tokens.
///
/// # Panics
/// If the CPU lacks the instructions ([`available`]) or the lengths do not match the shape.
pub fn matmul(x: &[f32], n: usize, values: &[i8], scales: &[f16], d_out: usize, d_in: usize) -> Vec<f32> {
    assert!(available(), "q8_vnni::matmul needs AVX-512 VNNI");
    let blocks = d_in / Q8_BLOCK;
    assert!(
        d_in % Q8_BLOCK == 0 && x.len() == n * d_in && values.len() == d_out * d_in && scales.len() == d_out * blocks,
        "q8_vnni::matmul: lengths do not match [{n}, {d_in}] x [{d_out}, {d_in}]"
    );
    let mut out = vec![0f32; n * d_out];
    if n == 0 || d_out == 0 || d_in == 0 {
        return out;
    }
    let (mut xq, mut xs, mut corrections) = (vec![0i8; x.len()], vec![0f32; n * blocks], vec![0i32; n * blocks]);
    xq.par_chunks_mut(Q8_BLOCK).zip(xs.par_iter_mut()).zip(corrections.par_iter_mut()).zip(x.par_chunks(Q8_BLOCK)).for_each(
        // SAFETY: `available()` was checked above.
        |(((values, scale), correction), block)| unsafe { round_block(block, values, scale, correction) },
    );
    let activations = Activations { values: &xq, scales: &xs, corrections: &corrections, d_in };
    let out_ptr = OutPtr(out.as_mut_ptr());
    values.par_chunks(GROUP * d_in).enumerate().for_each(|(group, weights)| {
        let rows = weights.len() / d_in;
        let first = group * GROUP;
        // The group's scales in f32 block by block, 16 lanes each (zero past the last row).
        let mut group_scales = vec![0f32; blocks * GROUP];
        for (r, row) in scales[first * blocks..(first + rows) * blocks].chunks_exact(blocks).enumerate() {
            for (b, &d) in row.iter().enumerate() {
                group_scales[b * GROUP + r] = d.to_f32();
            }
        }
        let group = Group { weights, rows, scales: &group_scales };
        let mut token = 0;
        while token < n {
            let tokens = (n - token).min(TILE);
            // SAFETY: `available()` was checked above. The tile writes outputs `first..first +
            // rows` of its tokens' rows of `out [n, d_out]`: in bounds, and no other task writes
            // these columns.
            unsafe {
                let out = out_ptr.at(token * d_out + first);
                match tokens {
                    8 => tile::<8>(&group, &activations, token, out, d_out),
                    7 => tile::<7>(&group, &activations, token, out, d_out),
                    6 => tile::<6>(&group, &activations, token, out, d_out),
                    5 => tile::<5>(&group, &activations, token, out, d_out),
                    4 => tile::<4>(&group, &activations, token, out, d_out),
                    3 => tile::<3>(&group, &activations, token, out, d_out),
                    2 => tile::<2>(&group, &activations, token, out, d_out),
                    _ => tile::<1>(&group, &activations, token, out, d_out),
                }
            }
            token += tokens;
        }
    });
    out
}

/// The output's start, shared by the tasks, which write disjoint columns.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: see `matmul`: each task writes only its own group's columns.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// # Safety
    /// `offset` is within the output.
    unsafe fn at(self, offset: usize) -> *mut f32 {
        // SAFETY: the caller's.
        unsafe { self.0.add(offset) }
    }
}

/// One group of up to 16 weight rows.
struct Group<'a> {
    /// The rows' values in [`layout`].
    weights: &'a [i8],
    rows: usize,
    /// `[blocks, 16]`: block `b`'s scale of each row.
    scales: &'a [f32],
}

/// The rounded activations `[n, d_in]`, their block scales and lane starting values.
struct Activations<'a> {
    values: &'a [i8],
    scales: &'a [f32],
    corrections: &'a [i32],
    d_in: usize,
}

/// One block of activations rounded (the scale to `scale`) and `-128 Σ values`, its lanes'
/// starting value, to `correction`; compiled for AVX-512, where the rounding is one instruction.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn round_block(block: &[f32], values: &mut [i8], scale: &mut f32, correction: &mut i32) {
    *scale = crate::q8_matmul::round_activation_block(block, values);
    *correction = -128 * values.iter().map(|&v| v as i32).sum::<i32>();
}

/// Outputs of one group for `C` tokens from `token`, written to `out + j * d_out` for token `j`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile<const C: usize>(group: &Group, x: &Activations, token: usize, out: *mut f32, d_out: usize) {
    let blocks = x.d_in / Q8_BLOCK;
    let row_bytes: u64 = if group.rows == GROUP { !0 } else { (1u64 << (group.rows * 4)) - 1 };
    let row_lanes: u16 = if group.rows == GROUP { !0 } else { (1u16 << group.rows) - 1 };
    let step_bytes = group.rows * 4;
    let flip = _mm512_set1_epi8(i8::MIN);
    let mut sums = [_mm512_setzero_ps(); C];
    for b in 0..blocks {
        let mut dots: [__m512i; C] = std::array::from_fn(|j| _mm512_set1_epi32(x.corrections[(token + j) * blocks + b]));
        for step in b * Q8_BLOCK / 4..(b + 1) * Q8_BLOCK / 4 {
            // SAFETY: the masked load reads only the group's `rows × 4` bytes of this step, inside
            // `weights`; masked-off bytes are not read (no fault) and are zero.
            let w = unsafe { _mm512_maskz_loadu_epi8(row_bytes, group.weights.as_ptr().add(step * step_bytes)) };
            let w = _mm512_xor_si512(w, flip);
            for (j, dot) in dots.iter_mut().enumerate() {
                // SAFETY: token `token + j < n`, inputs `4 step..4 step + 4 <= d_in`.
                let four = unsafe { x.values.as_ptr().add((token + j) * x.d_in + step * 4).cast::<i32>().read_unaligned() };
                *dot = _mm512_dpbusd_epi32(*dot, w, _mm512_set1_epi32(four));
            }
        }
        // SAFETY: `scales` holds 16 lanes for each block.
        let weight_scales = unsafe { _mm512_loadu_ps(group.scales.as_ptr().add(b * GROUP)) };
        for (j, (sum, dot)) in sums.iter_mut().zip(dots).enumerate() {
            let scale = _mm512_mul_ps(weight_scales, _mm512_set1_ps(x.scales[(token + j) * blocks + b]));
            *sum = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, *sum);
        }
    }
    for (j, sum) in sums.into_iter().enumerate() {
        // SAFETY: the caller's `out` plus token `j`'s row holds the group's `rows` columns.
        unsafe { _mm512_mask_storeu_ps(out.add(j * d_out), row_lanes, sum) };
    }
}
