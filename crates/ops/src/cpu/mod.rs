//! What the CPU backends' plain-Rust kernels share: the instruction set a kernel runs
//! ([`Isa`], [`integer_dot`]'s `DotIsa`, [`bf16_dot`]'s `Bf16Isa`), the integer dot of the block
//! formats, the bf16 dot, f32 panels of a
//! weight through sgemm, and the per-expert split of the grouped products. Each op's host kernel
//! is in its folder (`q8_matmul/cpu.rs`, ...).

use rayon::prelude::*;

pub use isa::Isa;

#[cfg(target_arch = "x86_64")]
pub mod bf16_dot;
#[cfg(target_arch = "x86_64")]
pub mod integer_dot;
mod isa;
#[cfg(target_arch = "x86_64")]
mod out_ptr;

/// The integer-dot kernel the block formats' products run on this CPU, if any (and so the
/// order their layouts give the weights).
#[cfg(target_arch = "x86_64")]
pub(crate) fn dot_isa() -> Option<integer_dot::DotIsa> {
    integer_dot::DotIsa::best()
}

/// What the block formats' (q8, q4) products run on this CPU, in words.
pub fn block_kernel() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    if let Some(isa) = dot_isa() {
        return isa.about();
    }
    "panels dequantized to f32, then sgemm"
}

/// `x [n, d_in] · Wᵀ -> [n, d_out]` for a block-quantized `W [d_out, d_in]`, of which
/// `dequantize(first, weights)` writes rows `first..` into `weights` (whole rows, in f32).
///
/// The output is computed transposed, `W · xᵀ`, a panel of weight rows per task: each task
/// dequantizes its rows into an f32 buffer (a panel, not the whole weight, is ever f32) and
/// multiplies it with `matrixmultiply`'s sgemm into its contiguous rows of `outᵀ`; `outᵀ` is
/// transposed at the end. The weight is read once, in its own bytes. Panels are as large as
/// four tasks per thread allow, up to 256 rows: each sgemm packs `x` again, so fewer, larger
/// panels cost less (64-row panels were 20 % slower at 2B widths).
pub(crate) fn dequantized_matmul(
    x: &[f32],
    n: usize,
    d_out: usize,
    d_in: usize,
    dequantize: impl Fn(usize, &mut [f32]) + Sync,
) -> Vec<f32> {
    let panel_rows = d_out.div_ceil(4 * rayon::current_num_threads()).next_multiple_of(16).clamp(16, 256);
    let mut transposed = vec![0f32; d_out * n];
    if n == 0 || d_out == 0 || d_in == 0 {
        return transposed;
    }
    transposed.par_chunks_mut(panel_rows * n).enumerate().for_each(|(panel, out)| {
        let rows = out.len() / n;
        let mut weights = vec![0f32; rows * d_in];
        dequantize(panel * panel_rows, &mut weights);
        // SAFETY: the pointers cover `weights [rows, d_in]`, `x [n, d_in]` read as `xᵀ [d_in, n]`
        // through its strides, and `out [rows, n]`, all in bounds and not aliased.
        unsafe {
            matrixmultiply::sgemm(
                rows,
                d_in,
                n,
                1.0,
                weights.as_ptr(),
                d_in as isize,
                1,
                x.as_ptr(),
                1,
                d_in as isize,
                0.0,
                out.as_mut_ptr(),
                n as isize,
                1,
            );
        }
    });
    let mut out = vec![0f32; n * d_out];
    out.par_chunks_mut(d_out).enumerate().for_each(|(token, row)| {
        for (o, value) in row.iter_mut().enumerate() {
            *value = transposed[o * n + token];
        }
    });
    out
}

/// `x [n, d_in] · W [d_in, d_out]` into `out [n, d_out]`.
pub(crate) fn sgemm(x: &[f32], n: usize, weight: &[f32], d_in: usize, d_out: usize, out: &mut [f32]) {
    assert!(
        x.len() == n * d_in && weight.len() == d_in * d_out && out.len() == n * d_out,
        "sgemm: slices do not match [{n}, {d_in}] · [{d_in}, {d_out}]"
    );
    if n == 0 || d_out == 0 {
        return;
    }
    // SAFETY: the pointers cover `x [n, d_in]`, `weight [d_in, d_out]` and `out [n, d_out]`,
    // row-major, in bounds (checked above) and not aliased.
    unsafe {
        matrixmultiply::sgemm(
            n,
            d_in,
            d_out,
            1.0,
            x.as_ptr(),
            d_in as isize,
            1,
            weight.as_ptr(),
            d_out as isize,
            1,
            0.0,
            out.as_mut_ptr(),
            d_out as isize,
            1,
        );
    }
}

/// Where each group of rows starts: the running sum of `counts`.
pub(crate) fn group_starts(counts: &[usize]) -> Vec<usize> {
    counts.iter().scan(0, |next, &count| Some(std::mem::replace(next, *next + count))).collect()
}

/// Panics unless `x` holds the rows `counts` sum to and the weights' `(values, scales)` lengths
/// are `each` (per expert) times the experts.
pub(crate) fn check_grouped(
    x: &[f32],
    counts: &[usize],
    d_in: usize,
    (values, scales): (usize, usize),
    each: (usize, usize),
) {
    let (rows, experts) = (counts.iter().sum::<usize>(), counts.len());
    assert!(
        x.len() == rows * d_in && (values, scales) == (experts * each.0, experts * each.1),
        "grouped matmul: x has {} values for {rows} rows of {d_in}; values {values} and scales {scales} for {experts} experts of {} and {}",
        x.len(),
        each.0,
        each.1
    );
}

/// `product(e, rows of expert e, their count)` for each expert in parallel, concatenated.
pub(crate) fn per_expert(
    x: &[f32],
    counts: &[usize],
    d_in: usize,
    product: impl Fn(usize, &[f32], usize) -> Vec<f32> + Sync,
) -> Vec<f32> {
    let starts = group_starts(counts);
    let products: Vec<Vec<f32>> = (0..counts.len())
        .into_par_iter()
        .map(|e| product(e, &x[starts[e] * d_in..(starts[e] + counts[e]) * d_in], counts[e]))
        .collect();
    products.concat()
}
