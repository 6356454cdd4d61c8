//! `x [m, k] · W [k, n]` for a few rows `m`: one expert's share of an MoE layer, where each of
//! 256 experts gets a handful of a prompt's tokens (top-8 of 128 tokens is 4 rows an expert).
//!
//! A general sgemm (`matrixmultiply`) first copies `W` into its packed panel layout, so at 4
//! rows it reads the weight twice and writes it once to use each value 4 times; the product is
//! bound by memory, and that copy made it 3–5x slower than reading `W` in place. Here a tile of 4
//! output rows × `P` columns stays in registers while `k` runs, each step one contiguous run of
//! `P` weights and 4 broadcast activations, so `W` is read once per 4 rows (once for the few rows
//! an expert usually has). The row tiles are the inner loop, so a strip of `P` columns is read
//! again from cache, not memory. `P` takes half the vector registers for the 4 × `P` sums,
//! leaving room for the weights and the broadcasts: 64 with AVX-512 (16 of 32 zmm), 16 with
//! AVX2 (8 of 16 ymm), 8 otherwise (8 of SSE2's 16 xmm; NEON has 32).

use std::ops::Range;

use crate::cpu::Isa;

/// Output rows per tile: the rows that share each weight read.
const TILE_ROWS: usize = 4;

/// Columns `columns` of `x [m, k] · W [k, n]` (all `m` rows, row-major), written to `out [m,
/// columns.len()]`, with the [`Isa::best`] of this CPU.
pub fn matmul(x: &[f32], m: usize, w: &[f32], k: usize, n: usize, columns: Range<usize>, out: &mut [f32]) {
    matmul_in(Isa::best(), x, m, w, k, n, columns, out)
}

/// [`matmul`] compiled for `isa`, whose tiles are 64 (AVX-512), 16 (AVX2) or 8 (baseline)
/// columns wide.
///
/// # Panics
/// If the slices are shorter than the shapes say, or this CPU does not run `isa`.
#[allow(clippy::too_many_arguments)]
pub fn matmul_in(isa: Isa, x: &[f32], m: usize, w: &[f32], k: usize, n: usize, columns: Range<usize>, out: &mut [f32]) {
    assert!(
        x.len() >= m * k && w.len() >= k * n && columns.end <= n && out.len() >= m * columns.len(),
        "few_rows::matmul: slices shorter than x [{m}, {k}] · W [{k}, {n}], columns {columns:?}"
    );
    assert!(isa.available(), "this CPU does not run {isa:?}");
    match isa {
        // SAFETY: the CPU has the features (checked above).
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { panels_avx512(x, m, w, k, n, columns, out) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { panels_avx2(x, m, w, k, n, columns, out) },
        _ => panels::<8>(x, m, w, k, n, columns, out),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn panels_avx512(x: &[f32], m: usize, w: &[f32], k: usize, n: usize, columns: Range<usize>, out: &mut [f32]) {
    panels::<64>(x, m, w, k, n, columns, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn panels_avx2(x: &[f32], m: usize, w: &[f32], k: usize, n: usize, columns: Range<usize>, out: &mut [f32]) {
    panels::<16>(x, m, w, k, n, columns, out)
}

/// The columns in strips of `P` (the last one narrower), each over tiles of [`TILE_ROWS`] rows.
#[inline(always)]
fn panels<const P: usize>(x: &[f32], m: usize, w: &[f32], k: usize, n: usize, columns: Range<usize>, out: &mut [f32]) {
    let width = columns.len();
    let mut column = columns.start;
    while column < columns.end {
        let strip = P.min(columns.end - column);
        for first_row in (0..m).step_by(TILE_ROWS) {
            let rows = TILE_ROWS.min(m - first_row);
            let x = &x[first_row * k..(first_row + rows) * k];
            let out = &mut out[first_row * width..(first_row + rows) * width];
            match strip == P {
                true => tile::<P>(x, rows, w, k, n, column, out, column - columns.start, width),
                false => narrow_tile(x, rows, w, k, n, column..columns.end, out, column - columns.start, width),
            }
        }
        column += strip;
    }
}

/// `rows ≤ 4` rows of `x` times columns `column..column + P` of `W`, into `out` at
/// `out_column` of rows `width` wide.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn tile<const P: usize>(
    x: &[f32],
    rows: usize,
    w: &[f32],
    k: usize,
    n: usize,
    column: usize,
    out: &mut [f32],
    out_column: usize,
    width: usize,
) {
    let mut sums = [[0f32; P]; TILE_ROWS];
    // Missing rows of a last, partial tile read zeros (and are not written).
    let mut activations = [0f32; TILE_ROWS];
    for step in 0..k {
        let weights: &[f32; P] = w[step * n + column..][..P].try_into().expect("P weights");
        for (r, a) in activations.iter_mut().enumerate().take(rows) {
            *a = x[r * k + step];
        }
        for (sum, &a) in sums.iter_mut().zip(&activations) {
            for (s, &weight) in sum.iter_mut().zip(weights) {
                *s += a * weight;
            }
        }
    }
    for (r, sum) in sums.iter().enumerate().take(rows) {
        out[r * width + out_column..][..P].copy_from_slice(sum);
    }
}

/// [`tile`] for the last columns of a panel narrower than a tile.
#[allow(clippy::too_many_arguments)]
fn narrow_tile(
    x: &[f32],
    rows: usize,
    w: &[f32],
    k: usize,
    n: usize,
    columns: Range<usize>,
    out: &mut [f32],
    out_column: usize,
    width: usize,
) {
    for r in 0..rows {
        let sums = &mut out[r * width + out_column..][..columns.len()];
        sums.fill(0.0);
        for step in 0..k {
            let a = x[r * k + step];
            for (s, &weight) in sums.iter_mut().zip(&w[step * n + columns.start..step * n + columns.end]) {
                *s += a * weight;
            }
        }
    }
}
