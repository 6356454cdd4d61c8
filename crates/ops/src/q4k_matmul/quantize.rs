//! Quantizing f32 weights to Q4_K as llama.cpp does: the blocks `llama-quantize` writes for a
//! Q4_K tensor when it has no importance matrix (`quantize_row_q4_K_ref` and `make_qkx2_quants`
//! in llama.cpp's ggml/src/ggml-quants.c), byte for byte.
//!
//! Per block of 32, a least-squares search picks the scale and min (weighted towards the larger
//! values, 21 candidate grids); per super-block of 256 the 8 scales and 8 mins are rounded to 6
//! bits of the largest of each, and the values are rounded again on those. Every step is the
//! C code's f32 arithmetic in its order (it is compiled without FMA contraction or vectorized
//! sums), so the bytes are the same; `tests/fixtures/gguf/quantized.py` writes llama.cpp's blocks
//! of rows of every kind for the test that holds this to them.

use half::f16;
use rayon::prelude::*;

use super::QK_K;
use crate::GgmlType;

/// Values a block: a 6-bit scale and min each.
const BLOCK: usize = 32;
/// The largest 4-bit value.
const NMAX: u8 = 15;

/// Row-major f32 weights (a whole number of super-blocks of [`QK_K`]) as llama.cpp's Q4_K blocks
/// (`block_q4_K`, 144 bytes each), in parallel over super-blocks.
///
/// # Panics
/// If `weights` is not whole super-blocks.
pub fn quantize_q4_k(weights: &[f32]) -> Vec<u8> {
    assert!(weights.len().is_multiple_of(QK_K), "quantize_q4_k: {} values are not whole super-blocks", weights.len());
    let bytes = GgmlType::Q4K.block_bytes();
    let mut out = vec![0u8; weights.len() / QK_K * bytes];
    out.par_chunks_mut(bytes).zip(weights.par_chunks(QK_K)).for_each(|(block, x)| super_block(x, block));
    out
}

/// One super-block: `quantize_row_q4_K_ref`'s loop body.
fn super_block(x: &[f32], y: &mut [u8]) {
    let mut levels = [0u8; QK_K];
    let (mut scales, mut mins) = ([0f32; QK_K / BLOCK], [0f32; QK_K / BLOCK]);
    let (mut max_scale, mut max_min) = (0f32, 0f32);
    for (j, (x, levels)) in x.chunks_exact(BLOCK).zip(levels.chunks_exact_mut(BLOCK)).enumerate() {
        let mut sum_x2 = 0f32;
        for &v in x {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / BLOCK as f32).sqrt();
        let weights: [f32; BLOCK] = std::array::from_fn(|l| av_x + x[l].abs());
        (scales[j], mins[j]) = make_qkx2_quants(x, &weights, levels);
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }

    let inv_scale = if max_scale > 0.0 { 63.0 / max_scale } else { 0.0 };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let packed = &mut y[4..16];
    packed.fill(0);
    for j in 0..QK_K / BLOCK {
        // `uint8_t ls = nearest_int(...)`: the int's low byte.
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (ls & 0xf) | ((lm & 0xf) << 4);
            packed[j - 4] |= (ls >> 4) << 6;
            packed[j] |= (lm >> 4) << 6;
        }
    }
    let d = f16::from_f32(max_scale / 63.0);
    let dmin = f16::from_f32(max_min / 63.0);
    y[0..2].copy_from_slice(&d.to_le_bytes());
    y[2..4].copy_from_slice(&dmin.to_le_bytes());

    // The values again, on the scales and mins as stored; a block whose scale is 0 keeps the
    // search's levels, as llama.cpp's does.
    for (j, (x, levels)) in x.chunks_exact(BLOCK).zip(levels.chunks_exact_mut(BLOCK)).enumerate() {
        let (sc, m) = crate::ggml_type::scale_min_k4(j, &y[4..16]);
        let d = d.to_f32() * sc as f32;
        if d == 0.0 {
            continue;
        }
        let dm = dmin.to_f32() * m as f32;
        for (level, &v) in levels.iter_mut().zip(x) {
            *level = nearest_int((v + dm) / d).clamp(0, NMAX as i32) as u8;
        }
    }
    // Each 32 bytes: a block's levels low, the next block's high.
    for (q, levels) in y[16..].chunks_exact_mut(BLOCK).zip(levels.chunks_exact(2 * BLOCK)) {
        for l in 0..BLOCK {
            q[l] = levels[l] | (levels[l + BLOCK] << 4);
        }
    }
}

/// `make_qkx2_quants(32, 15, x, weights, L, &the_min, Laux, -1, 0.1, 20, false)`: the levels
/// `0..=15` of `x` (into `levels`) and the `(scale, min)` they stand for as `scale · l - min`,
/// the pair of least weighted squared error over 21 grids, each refit by least squares.
fn make_qkx2_quants(x: &[f32], weights: &[f32; BLOCK], levels: &mut [u8]) -> (f32, f32) {
    const RMIN: f32 = -1.0;
    const RDELTA: f32 = 0.1;
    const NSTEP: i32 = 20;
    let nmax = NMAX as f32;
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..BLOCK {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        levels.fill(0);
        return (0.0, -min);
    }
    let mut iscale = nmax / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0f32;
    for i in 0..BLOCK {
        let l = nearest_int(iscale * (x[i] - min)).clamp(0, NMAX as i32) as u8;
        levels[i] = l;
        let diff = scale * l as f32 + min - x[i];
        best_error += weights[i] * (diff * diff);
    }
    let mut aux = [0u8; BLOCK];
    for is in 0..=NSTEP {
        iscale = (RMIN + RDELTA * is as f32 + nmax) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for i in 0..BLOCK {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, NMAX as i32);
            aux[i] = l as u8;
            let (w, l) = (weights[i], l as f32);
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0f32;
            for i in 0..BLOCK {
                let diff = this_scale * aux[i] as f32 + this_min - x[i];
                cur_error += weights[i] * (diff * diff);
            }
            if cur_error < best_error {
                levels.copy_from_slice(&aux);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// llama.cpp's `nearest_int`: `v` rounded to the nearest int, ties to even, by adding 1.5 · 2²³
/// and reading the mantissa (exact for `|v| < 2²²`, which llama.cpp asserts).
fn nearest_int(v: f32) -> i32 {
    let bits = (v + 12_582_912.0).to_bits() as i32;
    (bits & 0x007f_ffff) - 0x0040_0000
}
