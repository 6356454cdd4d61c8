//! Plain-Rust kernels for the CPU backends (ndarray, candle): one pass over the ids, forward
//! substitution per matrix in parallel over the batch, sgemm on operands read in place, the
//! grouped (per-expert) products in one parallel pass, the Q8_0 and Q4_0 matmuls as an integer
//! dot where the CPU has one, 16-bit weights read as f32 a panel at a time, the delta rule
//! token by token, the causal conv and the sigmoid and SiLU gates in one parallel pass each.

use half::f16;
use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
use num_traits::Float;
use rayon::prelude::*;

use crate::{ActivationBits, Half, Q4_ACTIVATION_BITS, round_activations};

pub use isa::Isa;

pub mod causal_conv1d;
pub mod delta_rule;
pub mod few_rows;
#[cfg(target_arch = "x86_64")]
pub mod integer_dot;
mod isa;

/// The integer-dot kernel [`q8_matmul`] and [`q4_matmul`] run on this CPU, if any (and so the
/// order [`q8_layout`] and [`q4_layout`] give the weights).
#[cfg(target_arch = "x86_64")]
fn dot_isa() -> Option<integer_dot::DotIsa> {
    integer_dot::DotIsa::best()
}

/// The order [`q8_matmul`] reads the values of a weight (or a stack of them) `[d_out, d_in]` in on
/// this CPU.
pub fn q8_layout(values: Vec<i8>, d_out: usize, d_in: usize) -> Vec<i8> {
    #[cfg(target_arch = "x86_64")]
    if let Some(isa) = dot_isa() {
        return integer_dot::q8_layout(isa, &values, d_out, d_in);
    }
    let _ = (d_out, d_in);
    values
}

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

/// Values a parallel task of [`sigmoid`] and [`silu`] takes.
const GATE_CHUNK: usize = 16 * 1024;

/// `1 / (1 + exp(-x))` of each value, in one parallel pass.
pub fn sigmoid(x: &[f32]) -> Vec<f32> {
    gate(x, |v| 1.0 / (1.0 + (-v).exp()))
}

/// `x / (1 + exp(-x))` (SiLU) of each value, in one parallel pass.
pub fn silu(x: &[f32]) -> Vec<f32> {
    gate(x, silu_of)
}

/// `x / (1 + exp(-x))`: one `exp`, and 0 (not NaN) where it overflows.
#[inline(always)]
fn silu_of(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// `f` of each value, in parallel chunks, written into an output not zeroed first (a serial
/// pass on the calling thread).
fn gate(x: &[f32], f: impl Fn(f32) -> f32 + Sync) -> Vec<f32> {
    let mut out = Vec::<f32>::with_capacity(x.len());
    out.spare_capacity_mut().par_chunks_mut(GATE_CHUNK).zip(x.par_chunks(GATE_CHUNK)).for_each(|(out, x)| {
        for (o, &v) in out.iter_mut().zip(x) {
            o.write(f(v));
        }
    });
    // SAFETY: the chunks cover the `x.len()` values and each chunk wrote each of its values.
    unsafe { out.set_len(x.len()) };
    out
}

/// Counts of ids in `0..num_experts`; other ids are dropped.
pub fn expert_count(ids: impl Iterator<Item = i64>, num_experts: usize) -> Vec<i64> {
    let mut counts = vec![0i64; num_experts];
    for id in ids {
        if let Some(count) = usize::try_from(id).ok().and_then(|id| counts.get_mut(id)) {
            *count += 1;
        }
    }
    counts
}

/// `(I + strictly_lower(A))^-1` for each of the `a.len() / (n * n)` row-major matrices of `a`.
///
/// Forward substitution by rows: row `i` of `X` is `e_i - sum_{m < i} A[i, m] X[m, ..]`, where
/// row `m` of `X` is zero beyond column `m`; each update is a contiguous axpy.
pub fn unit_lower_inverse<T: Float + Send + Sync>(a: &[T], n: usize) -> Vec<T> {
    let mut x = vec![T::zero(); a.len()];
    if n == 0 {
        return x;
    }
    x.par_chunks_mut(n * n).zip(a.par_chunks(n * n)).for_each(|(x, a)| {
        for i in 0..n {
            let (done, rest) = x.split_at_mut(i * n);
            let row = &mut rest[..n];
            row[i] = T::one();
            for m in 0..i {
                let coefficient = a[i * n + m];
                if coefficient == T::zero() {
                    continue;
                }
                for (target, source) in row[..=m].iter_mut().zip(&done[m * n..m * n + m + 1]) {
                    *target = *target - coefficient * *source;
                }
            }
        }
    });
    x
}

/// `round(x) [n, d_in] · Wᵀ -> [n, d_out]` for `W [d_out, d_in]` in Q8_0 blocks (`values` in
/// [`q8_layout`], `scales [d_out, d_in / 32]`), the activations rounded to blocks of `bits`
/// integers ([`round_activations`]): the [`integer_dot`] where the CPU has one (x86-64 with AVX2),
/// else [`dequantized_q8_matmul`] on the rounded activations.
pub fn q8_matmul(
    x: &[f32],
    n: usize,
    values: &[i8],
    scales: &[f16],
    d_out: usize,
    d_in: usize,
    bits: ActivationBits,
) -> Vec<f32> {
    #[cfg(target_arch = "x86_64")]
    if let Some(isa) = dot_isa() {
        return integer_dot::q8_matmul(isa, x, n, values, scales, d_out, d_in, bits);
    }
    let x = round_activations(x, d_in, bits);
    dequantized_q8_matmul(&x, n, values, scales, d_out, d_in)
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

/// `x [n, d_in] · Wᵀ -> [n, d_out]` for `W [d_out, d_in]` in Q8_0 blocks (`values` in row order,
/// `scales [d_out, d_in / 32]`), through [`dequantized_matmul`].
pub fn dequantized_q8_matmul(
    x: &[f32],
    n: usize,
    values: &[i8],
    scales: &[f16],
    d_out: usize,
    d_in: usize,
) -> Vec<f32> {
    const BLOCK: usize = crate::Q8_BLOCK;
    dequantized_matmul(x, n, d_out, d_in, |first, weights| {
        let blocks = values[first * d_in..][..weights.len()].chunks_exact(BLOCK);
        for ((dst, block), &d) in weights.chunks_exact_mut(BLOCK).zip(blocks).zip(&scales[first * d_in / BLOCK..]) {
            let d = d.to_f32();
            for (w, &v) in dst.iter_mut().zip(block) {
                *w = v as f32 * d;
            }
        }
    })
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

/// `x [n, d_in] · Wᵀ -> [n, d_out]` for a block-quantized `W [d_out, d_in]`, of which
/// `dequantize(first, weights)` writes rows `first..` into `weights` (whole rows, in f32).
///
/// The output is computed transposed, `W · xᵀ`, a panel of weight rows per task: each task
/// dequantizes its rows into an f32 buffer (a panel, not the whole weight, is ever f32) and
/// multiplies it with `matrixmultiply`'s sgemm into its contiguous rows of `outᵀ`; `outᵀ` is
/// transposed at the end. The weight is read once, in its own bytes. Panels are as large as
/// four tasks per thread allow, up to 256 rows: each sgemm packs `x` again, so fewer, larger
/// panels cost less (64-row panels were 20 % slower at 2B widths).
fn dequantized_matmul(
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

/// `x [n, d_in] · W [d_in, d_out] -> [n, d_out]`, row-major slices, with `matrixmultiply`'s
/// sgemm (its `threading` feature spreads a large product over the cores).
pub fn dense_matmul(x: &[f32], n: usize, weight: &[f32], d_in: usize, d_out: usize) -> Vec<f32> {
    let mut out = vec![0f32; n * d_out];
    sgemm(x, n, weight, d_in, d_out, &mut out);
    out
}

/// [`dense_matmul`] into `out [n, d_out]`.
fn sgemm(x: &[f32], n: usize, weight: &[f32], d_in: usize, d_out: usize, out: &mut [f32]) {
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

/// Rows of one expert above which [`grouped_matmul`] multiplies them with sgemm, whose packing
/// of the weight pays for itself once it is reused by that many rows.
const SGEMM_ROWS: usize = 64;

/// Output columns of one expert per parallel task of [`grouped_matmul`]: 4–8 tasks an expert
/// keep every core busy even when only a few experts have rows.
const TASK_COLUMNS: usize = 256;

/// Where each group of rows starts: the running sum of `counts`.
fn group_starts(counts: &[usize]) -> Vec<usize> {
    counts.iter().scan(0, |next, &count| Some(std::mem::replace(next, *next + count))).collect()
}

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

/// [`grouped_matmul`] with the experts' weights in Q8_0 blocks, `[E, d_out, d_in]` (`values` in
/// [`q8_layout`], `scales [E, d_out, d_in / 32]`): [`q8_matmul`] per expert, the experts in
/// parallel (each product is parallel over its weight rows too).
///
/// # Panics
/// If the slices do not match the shapes (`counts` summing to `rows`).
pub fn grouped_q8_matmul(
    x: &[f32],
    counts: &[usize],
    values: &[i8],
    scales: &[f16],
    d_out: usize,
    d_in: usize,
    bits: ActivationBits,
) -> Vec<f32> {
    let (size, blocks) = (d_out * d_in, d_out * d_in / crate::Q8_BLOCK);
    check_grouped(x, counts, d_in, (values.len(), scales.len()), (size, blocks));
    per_expert(x, counts, d_in, |e, x, rows| {
        q8_matmul(x, rows, &values[e * size..][..size], &scales[e * blocks..][..blocks], d_out, d_in, bits)
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

/// Panics unless `x` holds the rows `counts` sum to and the weights' `(values, scales)` lengths
/// are `each` (per expert) times the experts.
fn check_grouped(x: &[f32], counts: &[usize], d_in: usize, (values, scales): (usize, usize), each: (usize, usize)) {
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
fn per_expert(
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
