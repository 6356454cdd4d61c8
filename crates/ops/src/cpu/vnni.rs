//! The Q8_0 and Q4_0 matmuls as an integer dot with AVX-512 VNNI (`vpdpbusd`), on x86-64 CPUs
//! that have it (Intel Xeon since Cascade Lake and Core since Ice Lake, AMD since Zen 4).
//!
//! `vpdpbusd` multiplies 64 unsigned bytes by 64 signed bytes and adds each run of four products
//! into one of 16 i32 lanes. The layouts ([`q8_layout`], [`q4_layout`]) make the lanes weight
//! rows: in each group of 16 rows, the rows' 4 values of inputs `k..k+4` lie side by side, so one
//! instruction with a token's 4 activation bytes broadcast to every lane adds 4 inputs' products
//! to 16 outputs. Eight such steps cover a block of 32 inputs; the block's integer sums are then
//! scaled (weight scale × activation scale) into f32 accumulators. The f32 work is thus one step
//! per 8 integer steps, where a dot product per output (llama.cpp's `ggml_vec_dot_q8_0_q8_0`)
//! pays it every step. Activations rounded to two planes ([`crate::ActivationPlanes`]) take one
//! instruction per plane on the same weight registers.
//!
//! Signs: the instruction wants one operand unsigned. The weights are read as unsigned bytes `w +
//! bias` (Q8_0's i8 with the top bit flipped: bias 128; Q4_0's nibbles are `q = w + 8` already)
//! and the activations as they are, so a lane gets `Σ (w + bias) x = Σ w x + bias Σ x`; each lane
//! starts from `-bias Σ x` of its token's block.

use std::arch::x86_64::*;

use half::f16;
use rayon::prelude::*;

use crate::{ActivationPlanes, Q4_ACTIVATION_PLANES, Q4_BLOCK, Q8_BLOCK};

/// Weight rows per group: the 16 i32 lanes of a 512-bit register.
const GROUP: usize = 16;
/// Tokens per tile times activation planes: the accumulators (an f32 register per token and an
/// i32 one per token and plane) stay in the 32 registers.
const TILE: usize = 8;

/// Whether this CPU runs the kernel (checked once by the standard library, then cached).
pub fn available() -> bool {
    is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw") && is_x86_feature_detected!("avx512vnni")
}

/// The values of each weight `[d_out, d_in]` of a stack regrouped as the Q8_0 kernel reads them:
/// for each group of 16 rows (the last may have fewer, `r`), for each `k` step of 4 inputs, `r ×
/// 4` bytes (row by row, 4 inputs each). A permutation: the same values, the same count.
pub fn q8_layout(values: &[i8], d_out: usize, d_in: usize) -> Vec<i8> {
    regroup(values, d_out, d_in, |grouped, rows, width| {
        for (r, row) in rows.chunks_exact(d_in).enumerate() {
            for (step, four) in row.chunks_exact(4).enumerate() {
                grouped[step * width * 4 + r * 4..][..4].copy_from_slice(four);
            }
        }
    })
}

/// The packed bytes of each Q4_0 weight `[d_out, d_in / 2]` of a stack regrouped as the Q4_0
/// kernel reads them: for each group of 16 rows (the last may have fewer, `r`), for each pair of
/// `k` steps (8 inputs), `r × 4` bytes (row by row): byte `i` holds input `8 p + i` in its low
/// nibble and input `8 p + 4 + i` in its high one. The same values, the same count of bytes.
pub fn q4_layout(packed: &[u8], d_out: usize, d_in: usize) -> Vec<u8> {
    let row_bytes = d_in / 2;
    regroup(packed, d_out, row_bytes, |grouped, rows, width| {
        const HALF: usize = Q4_BLOCK / 2;
        for (r, row) in rows.chunks_exact(row_bytes).enumerate() {
            // Input `i` of the row: in block `i / 32`, byte `i % 16`, low nibble for the first 16.
            let value = |i: usize| {
                let byte = row[i / Q4_BLOCK * HALF + i % HALF];
                if i % Q4_BLOCK < HALF { byte & 15 } else { byte >> 4 }
            };
            for pair in 0..d_in / 8 {
                for k in 0..4 {
                    grouped[pair * width * 4 + r * 4 + k] = value(8 * pair + k) | (value(8 * pair + 4 + k) << 4);
                }
            }
        }
    })
}

/// Applies `fill(grouped, rows, width)` to each group of up to 16 rows (`width` of them) of each
/// weight `[d_out, _]` of a stack held as `row_bytes` elements a row; in parallel over groups,
/// which never cross a weight.
fn regroup<T: Copy + Default + Send + Sync>(values: &[T], d_out: usize, row_bytes: usize, fill: impl Fn(&mut [T], &[T], usize) + Sync) -> Vec<T> {
    let mut grouped = vec![T::default(); values.len()];
    if values.is_empty() || row_bytes == 0 {
        return grouped;
    }
    let weight = d_out * row_bytes;
    debug_assert_eq!(values.len() % weight, 0);
    let weights = grouped.par_chunks_mut(weight).zip(values.par_chunks(weight));
    weights
        .flat_map(|(grouped, weight)| grouped.par_chunks_mut(GROUP * row_bytes).zip(weight.par_chunks(GROUP * row_bytes)))
        .for_each(|(grouped, rows)| fill(grouped, rows, rows.len() / row_bytes));
    grouped
}

/// How a format's weight bytes are read: each row's bytes for 8 inputs (two `k` steps), as two
/// registers of unsigned bytes `w + BIAS`, one per step.
trait Packing {
    /// The unsigned offset of the weights read (see the module's doc).
    const BIAS: i32;
    /// Bytes a row holds for 8 inputs.
    const PAIR_BYTES: usize;

    /// The two steps' weights of a group of `rows` rows at `at` (`rows × PAIR_BYTES` bytes;
    /// `mask` selects each step's `rows × 4` lanes' bytes).
    ///
    /// # Safety
    /// The CPU has AVX-512 VNNI and `at` holds the group's bytes of this pair.
    unsafe fn pair(at: *const u8, rows: usize, mask: u64) -> [__m512i; 2];
}

/// Q8_0: the steps one after the other, i8 read with the top bit flipped.
struct Q8;
impl Packing for Q8 {
    const BIAS: i32 = 128;
    const PAIR_BYTES: usize = 8;

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn pair(at: *const u8, rows: usize, mask: u64) -> [__m512i; 2] {
        let flip = _mm512_set1_epi8(i8::MIN);
        // SAFETY: the caller's; masked-off bytes are not read (no fault) and are zero.
        let (first, second) = unsafe { (_mm512_maskz_loadu_epi8(mask, at.cast()), _mm512_maskz_loadu_epi8(mask, at.add(rows * 4).cast())) };
        [_mm512_xor_si512(first, flip), _mm512_xor_si512(second, flip)]
    }
}

/// Q4_0: both steps in one load, the first in the low nibbles.
struct Q4;
impl Packing for Q4 {
    const BIAS: i32 = 8;
    const PAIR_BYTES: usize = 4;

    #[inline]
    #[target_feature(enable = "avx512f,avx512bw")]
    unsafe fn pair(at: *const u8, _rows: usize, mask: u64) -> [__m512i; 2] {
        // SAFETY: the caller's; masked-off bytes are not read (no fault) and are zero.
        let bytes = unsafe { _mm512_maskz_loadu_epi8(mask, at.cast()) };
        let nibble = _mm512_set1_epi8(15);
        [_mm512_and_si512(bytes, nibble), _mm512_and_si512(_mm512_srli_epi16(bytes, 4), nibble)]
    }
}

/// `round(x) [n, d_in] · Wᵀ -> [n, d_out]`: `W` as Q8_0 `values` in [`q8_layout`] and `scales
/// [d_out, d_in / 32]`, `x` rounded here to `planes`
/// ([`crate::round_activations`], compiled for AVX-512). Parallel over groups of 16 weight
/// rows; each group's values are read once per tile of tokens.
///
/// # Panics
/// If the CPU lacks the instructions ([`available`]) or the lengths do not match the shape.
pub fn q8_matmul(x: &[f32], n: usize, values: &[i8], scales: &[f16], d_out: usize, d_in: usize, planes: ActivationPlanes) -> Vec<f32> {
    // SAFETY: i8 and u8 have the same size and alignment.
    let bytes = unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), values.len()) };
    match planes {
        ActivationPlanes::One => matmul::<Q8, 1>(x, n, bytes, scales, d_out, d_in),
        ActivationPlanes::Two => matmul::<Q8, 2>(x, n, bytes, scales, d_out, d_in),
    }
}

/// [`q8_matmul`] for Q4_0: `W` as packed bytes `[d_out, d_in / 2]` in [`q4_layout`], `x` rounded
/// to [`Q4_ACTIVATION_PLANES`].
///
/// # Panics
/// As [`q8_matmul`].
pub fn q4_matmul(x: &[f32], n: usize, packed: &[u8], scales: &[f16], d_out: usize, d_in: usize) -> Vec<f32> {
    matmul::<Q4, { Q4_ACTIVATION_PLANES.count() }>(x, n, packed, scales, d_out, d_in)
}

fn matmul<P: Packing, const PLANES: usize>(x: &[f32], n: usize, weights: &[u8], scales: &[f16], d_out: usize, d_in: usize) -> Vec<f32> {
    assert!(available(), "vnni::matmul needs AVX-512 VNNI");
    let blocks = d_in / Q8_BLOCK;
    let row_bytes = d_in / 8 * P::PAIR_BYTES;
    assert!(
        d_in % Q8_BLOCK == 0 && x.len() == n * d_in && weights.len() == d_out * row_bytes && scales.len() == d_out * blocks,
        "vnni::matmul: lengths do not match [{n}, {d_in}] x [{d_out}, {d_in}]"
    );
    let mut out = vec![0f32; n * d_out];
    if n == 0 || d_out == 0 || d_in == 0 {
        return out;
    }
    let count = n * blocks * PLANES;
    let (mut xq, mut xs, mut sums) = (vec![0i8; count * Q8_BLOCK], vec![0f32; count], vec![0i32; count]);
    let rounded = xq.par_chunks_mut(Q8_BLOCK * PLANES).zip(xs.par_chunks_mut(PLANES)).zip(sums.par_chunks_mut(PLANES));
    // SAFETY: `available()` was checked above.
    rounded.zip(x.par_chunks(Q8_BLOCK)).for_each(|(((values, scales), sums), block)| unsafe { round_block(block, values, scales, sums) });
    let activations = Activations::<PLANES> { values: &xq, scales: &xs, sums: &sums, blocks };
    let out_ptr = OutPtr(out.as_mut_ptr());
    weights.par_chunks(GROUP * row_bytes).enumerate().for_each(|(group, weights)| {
        let rows = weights.len() / row_bytes;
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
            let tokens = (n - token).min(TILE / PLANES);
            // SAFETY: `available()` was checked above. The tile writes outputs `first..first +
            // rows` of its tokens' rows of `out [n, d_out]`: in bounds, and no other task writes
            // these columns.
            unsafe {
                let out = out_ptr.at(token * d_out + first);
                match tokens {
                    8 => tile::<P, PLANES, 8>(&group, &activations, token, out, d_out),
                    7 => tile::<P, PLANES, 7>(&group, &activations, token, out, d_out),
                    6 => tile::<P, PLANES, 6>(&group, &activations, token, out, d_out),
                    5 => tile::<P, PLANES, 5>(&group, &activations, token, out, d_out),
                    4 => tile::<P, PLANES, 4>(&group, &activations, token, out, d_out),
                    3 => tile::<P, PLANES, 3>(&group, &activations, token, out, d_out),
                    2 => tile::<P, PLANES, 2>(&group, &activations, token, out, d_out),
                    _ => tile::<P, PLANES, 1>(&group, &activations, token, out, d_out),
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
    /// The rows' bytes in their format's layout.
    weights: &'a [u8],
    rows: usize,
    /// `[blocks, 16]`: block `b`'s scale of each row.
    scales: &'a [f32],
}

/// The activations `[n, d_in]` rounded to `PLANES` planes, block by block: for each token's
/// block, each plane's 32 values, scale and value sum.
struct Activations<'a, const PLANES: usize> {
    /// `[n, blocks, PLANES, 32]`.
    values: &'a [i8],
    /// `[n, blocks, PLANES]`.
    scales: &'a [f32],
    /// `[n, blocks, PLANES]`.
    sums: &'a [i32],
    blocks: usize,
}

/// One block of activations rounded into its planes (the values to `values`, the scales to
/// `scales`) and each plane's sum of values to `sums`; compiled for AVX-512, where the rounding
/// is one instruction.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn round_block(block: &[f32], values: &mut [i8], scales: &mut [f32], sums: &mut [i32]) {
    crate::q8_matmul::round_activation_planes(block, values, scales);
    for (sum, plane) in sums.iter_mut().zip(values.chunks_exact(Q8_BLOCK)) {
        *sum = plane.iter().map(|&v| v as i32).sum::<i32>();
    }
}

/// Outputs of one group for `C` tokens from `token`, written to `out + j * d_out` for token `j`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile<P: Packing, const PLANES: usize, const C: usize>(group: &Group, x: &Activations<PLANES>, token: usize, out: *mut f32, d_out: usize) {
    let blocks = x.blocks;
    let byte_mask: u64 = if group.rows == GROUP { !0 } else { (1u64 << (group.rows * 4)) - 1 };
    let lane_mask: u16 = if group.rows == GROUP { !0 } else { (1u16 << group.rows) - 1 };
    let pair_bytes = group.rows * P::PAIR_BYTES;
    // Token `j`'s block `b`, plane `p`: its index in `x.scales` and `x.sums` (× 32 in `x.values`).
    let at = |j: usize, b: usize, p: usize| ((token + j) * blocks + b) * PLANES + p;
    let mut sums = [_mm512_setzero_ps(); C];
    for b in 0..blocks {
        let mut dots: [[__m512i; C]; PLANES] = std::array::from_fn(|p| std::array::from_fn(|j| _mm512_set1_epi32(-P::BIAS * x.sums[at(j, b, p)])));
        for step in 0..Q8_BLOCK / 8 {
            let pair = b * Q8_BLOCK / 8 + step;
            // SAFETY: the group holds `rows × PAIR_BYTES` bytes for each pair of steps.
            let w = unsafe { P::pair(group.weights.as_ptr().add(pair * pair_bytes), group.rows, byte_mask) };
            for (p, dots) in dots.iter_mut().enumerate() {
                for (j, dot) in dots.iter_mut().enumerate() {
                    // SAFETY: token `token + j < n`, block `b < blocks`, plane `p < PLANES`, its
                    // bytes `8 step..8 step + 8 <= 32`. Each 4 bytes are broadcast from memory,
                    // an operand of `vpdpbusd` (read into a register first, they cost a
                    // broadcast each and the kernel ran at half the speed).
                    let four = unsafe { x.values.as_ptr().add(at(j, b, p) * Q8_BLOCK + step * 8).cast::<i32>() };
                    *dot = _mm512_dpbusd_epi32(*dot, w[0], _mm512_set1_epi32(unsafe { four.read_unaligned() }));
                    *dot = _mm512_dpbusd_epi32(*dot, w[1], _mm512_set1_epi32(unsafe { four.add(1).read_unaligned() }));
                }
            }
        }
        // SAFETY: `scales` holds 16 lanes for each block.
        let weight_scales = unsafe { _mm512_loadu_ps(group.scales.as_ptr().add(b * GROUP)) };
        for (p, dots) in dots.into_iter().enumerate() {
            for (j, (sum, dot)) in sums.iter_mut().zip(dots).enumerate() {
                let scale = _mm512_mul_ps(weight_scales, _mm512_set1_ps(x.scales[at(j, b, p)]));
                *sum = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, *sum);
            }
        }
    }
    for (j, sum) in sums.into_iter().enumerate() {
        // SAFETY: the caller's `out` plus token `j`'s row holds the group's `rows` columns.
        unsafe { _mm512_mask_storeu_ps(out.add(j * d_out), lane_mask, sum) };
    }
}
