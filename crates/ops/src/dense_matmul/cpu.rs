//! The f32 products on the host, for the CPU backends: sgemm on operands read in place, and the
//! grouped product of an MoE layer in one parallel pass.

use rayon::prelude::*;

use super::few_rows;
use crate::cpu::{group_starts, sgemm};

/// What the f32 products run on this CPU, in words.
pub fn dense_kernel() -> String {
    let panels = match crate::cpu::Isa::best() {
        crate::cpu::Isa::Avx512 => "AVX-512",
        crate::cpu::Isa::Avx2 => "AVX2",
        crate::cpu::Isa::Portable => "portable",
    };
    format!("sgemm (matrixmultiply); an expert's few rows: {panels} panels")
}

/// `x [n, d_in] · W [d_in, d_out] -> [n, d_out]`, row-major slices, with `matrixmultiply`'s
/// sgemm (its `threading` feature spreads a large product over the cores).
pub fn dense_matmul(x: &[f32], n: usize, weight: &[f32], d_in: usize, d_out: usize) -> Vec<f32> {
    let mut out = vec![0f32; n * d_out];
    sgemm(x, n, weight, d_in, d_out, &mut out);
    out
}

/// Rows of one expert above which [`grouped_matmul`] multiplies them with sgemm, whose packing
/// of the weight pays for itself once it is reused by that many rows.
const SGEMM_ROWS: usize = 64;

/// Output columns of one expert per parallel task of [`grouped_matmul`]: 4–8 tasks an expert
/// keep every core busy even when only a few experts have rows.
const TASK_COLUMNS: usize = 256;

/// The grouped product of an MoE layer (llama.cpp's `mul_mat_id`): `x [rows, d_in]` sorted by
/// expert, `counts[e]` rows for expert `e`, each times its expert's `W [d_in, d_out]` of
/// `weights [E, d_in, d_out]`; returns `[rows, d_out]`.
///
/// Experts with a few rows ([`few_rows`], which reads a weight in place, once per 4 rows) run as (expert, column
/// panel) tasks all in one parallel pass; experts with more than [`SGEMM_ROWS`] rows then run
/// through sgemm, which threads each product itself.
///
/// # Panics
/// If the slices do not match the shapes (`counts` summing to `rows`).
pub fn grouped_matmul(x: &[f32], counts: &[usize], weights: &[f32], d_in: usize, d_out: usize) -> Vec<f32> {
    let rows: usize = counts.iter().sum();
    let size = d_in * d_out;
    assert!(
        x.len() == rows * d_in && weights.len() == counts.len() * size,
        "grouped_matmul: x has {} values for {rows} rows of {d_in}; weights {} for {} experts [{d_in}, {d_out}]",
        x.len(),
        weights.len(),
        counts.len()
    );
    let mut out = vec![0f32; rows * d_out];
    if d_out == 0 {
        return out;
    }
    let starts = group_starts(counts);
    let rows_of = |e: usize| &x[starts[e] * d_in..(starts[e] + counts[e]) * d_in];
    let weight = |e: usize| &weights[e * size..(e + 1) * size];

    let few = (0..counts.len()).filter(|&e| (1..=SGEMM_ROWS).contains(&counts[e]));
    let tasks: Vec<(usize, usize)> =
        few.flat_map(|e| (0..d_out).step_by(TASK_COLUMNS).map(move |column| (e, column))).collect();
    let panels: Vec<Vec<f32>> = tasks
        .par_iter()
        .map(|&(e, column)| {
            let columns = column..(column + TASK_COLUMNS).min(d_out);
            let mut panel = vec![0f32; counts[e] * columns.len()];
            few_rows::matmul(rows_of(e), counts[e], weight(e), d_in, d_out, columns, &mut panel);
            panel
        })
        .collect();
    for (&(e, column), panel) in tasks.iter().zip(&panels) {
        let width = panel.len() / counts[e];
        for (r, values) in panel.chunks_exact(width).enumerate() {
            out[(starts[e] + r) * d_out + column..][..width].copy_from_slice(values);
        }
    }

    for e in (0..counts.len()).filter(|&e| counts[e] > SGEMM_ROWS) {
        sgemm(
            rows_of(e),
            counts[e],
            weight(e),
            d_in,
            d_out,
            &mut out[starts[e] * d_out..(starts[e] + counts[e]) * d_out],
        );
    }
    out
}
