//! What the ops' test suites share (each op's `tests.rs` is beside its kernels): a generator,
//! the block formats' cases and plain-loop products, the grouped products' cases, and
//! [`backend_tests!`], which runs a suite on every backend of the build.

use crate::{
    ActivationBits, CausalConv1d, DenseMatmul, ExpertCount, GatedDeltaRule, Gating, GgmlType, HalfMatmul,
    Q4_ACTIVATION_BITS, Q4_BLOCK, Q4KMatmul, Q4Matmul, Q5KMatmul, Q6KMatmul, Q8_BLOCK, Q8Matmul, Reshape,
    UnitLowerInverse, quantize_q4, quantize_q8,
};
use burn::tensor::{Int, Tensor, TensorData, backend::Backend};
use half::f16;

/// Every extension of this crate.
pub(crate) trait Ops:
    ExpertCount
    + UnitLowerInverse
    + Q8Matmul
    + Q4Matmul
    + Q4KMatmul
    + Q5KMatmul
    + Q6KMatmul
    + HalfMatmul
    + DenseMatmul
    + GatedDeltaRule
    + CausalConv1d
    + Gating
    + Reshape
{
}

impl<
    B: ExpertCount
        + UnitLowerInverse
        + Q8Matmul
        + Q4Matmul
        + Q4KMatmul
        + Q5KMatmul
        + Q6KMatmul
        + HalfMatmul
        + DenseMatmul
        + GatedDeltaRule
        + CausalConv1d
        + Gating
        + Reshape,
> Ops for B
{
}

/// A tiny deterministic generator (xorshift), so the tests need no RNG crate.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next_f32(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 24) as f32
    }
    pub(crate) fn below(&mut self, n: u64) -> i64 {
        (self.next_f32() as f64 * n as f64) as i64
    }
}

/// An activation row's blocks of 32 rounded to integers of at most `max` and back (in f64),
/// written out from the rule rather than taken from the crate: `d = max|x| / max` in f32 and `q
/// = round(x / d)` to the nearest, ties to even; the value is `q d`.
pub(crate) fn round_by_rule(x: &[f32], max: f32) -> Vec<f64> {
    x.chunks(Q8_BLOCK)
        .flat_map(|block| {
            let d = block.iter().map(|v| v.abs()).fold(0.0, f32::max) / max;
            block.iter().map(move |&v| {
                let q = if d == 0.0 { 0.0 } else { (v / d) as f64 };
                let nearest = if q - q.floor() == 0.5 { 2.0 * (q / 2.0).round() } else { q.round() };
                nearest * d as f64
            })
        })
        .collect()
}

/// The largest integer of `bits`, written out here: 127 and 32,767.
pub(crate) fn largest(bits: ActivationBits) -> f32 {
    match bits {
        ActivationBits::Eight => 127.0,
        ActivationBits::Sixteen => 32_767.0,
    }
}

/// `round(x) · Wᵀ` by plain loops in f64, `x` rounded to `bits` and `W` dequantized from Q8_0
/// blocks; with each output's `sum |x w|`, the scale of its rounding error.
pub(crate) fn naive_q8_matmul(
    x: &[f32],
    n: usize,
    values: &[i8],
    scales: &[f16],
    d_out: usize,
    d_in: usize,
    bits: ActivationBits,
) -> (Vec<f64>, Vec<f64>) {
    naive_block_matmul(&round_by_rule(x, largest(bits)), n, d_out, d_in, |o, i| {
        values[o * d_in + i] as f64 * scales[(o * d_in + i) / Q8_BLOCK].to_f64()
    })
}

/// [`naive_q8_matmul`] with `x` rounded to [`Q4_ACTIVATION_BITS`] and `W` in Q4_0
/// blocks, decoded as llama.cpp's `dequantize_row_q4_0` does: byte `j` of a block holds value `j`
/// (low nibble) and value `j + 16` (high), each standing for `(q - 8) d`.
pub(crate) fn naive_q4_matmul(
    x: &[f32],
    n: usize,
    packed: &[u8],
    scales: &[f16],
    d_out: usize,
    d_in: usize,
) -> (Vec<f64>, Vec<f64>) {
    naive_block_matmul(&round_by_rule(x, largest(Q4_ACTIVATION_BITS)), n, d_out, d_in, |o, i| {
        let (block, j) = ((o * d_in + i) / Q4_BLOCK, i % Q4_BLOCK);
        let byte = packed[block * 16 + j % 16];
        let q = if j < 16 { byte & 15 } else { byte >> 4 };
        (q as f64 - 8.0) * scales[block].to_f64()
    })
}

/// `x · Wᵀ` by plain loops in f64 for `W [d_out, d_in]` given entry by entry.
pub(crate) fn naive_block_matmul(
    x: &[f64],
    n: usize,
    d_out: usize,
    d_in: usize,
    weight: impl Fn(usize, usize) -> f64,
) -> (Vec<f64>, Vec<f64>) {
    let (mut out, mut magnitude) = (vec![0.0; n * d_out], vec![0.0; n * d_out]);
    for o in 0..d_out {
        let w: Vec<f64> = (0..d_in).map(|i| weight(o, i)).collect();
        for t in 0..n {
            for (i, w) in w.iter().enumerate() {
                out[t * d_out + o] += x[t * d_in + i] * w;
                magnitude[t * d_out + o] += (x[t * d_in + i] * w).abs();
            }
        }
    }
    (out, magnitude)
}

/// `(n, d_out, d_in)`: one block, no tokens, one output, odd panel counts (65, 129 rows), a
/// 2B-model width, one long row; token counts around the integer dots' tiles (8 tokens, 4 with
/// 16-bit activations, AVX-512 and AVX2) and row counts around their groups (16 and 8 rows: 17 rows leave a group
/// of one, 31 a group of 15 or 7).
/// The last spans two passes of the integer-dot kernels with 8-bit activations and three with
/// 16-bit ones, the last pass shorter ([`MANY_PASSES`]).
pub(crate) const Q8_SHAPES: [(usize, usize, usize); 10] = [
    (1, 1, 32),
    (0, 5, 64),
    (3, 1, 32),
    (7, 65, 96),
    (2, 129, 256),
    (130, 64, 2048),
    (1, 3, 4096),
    (9, 17, 64),
    (17, 31, 160),
    MANY_PASSES,
];

/// More tokens than one pass of `integer_dot`'s kernels holds, with a wide input.
pub(crate) const MANY_PASSES: (usize, usize, usize) = (520, 17, 8192);

/// Random weights in Q8_0 (with a zero block and an outlier) and activations (with a zero block
/// and a block whose values tie at half a step) of one shape.
pub(crate) fn q8_case(rng: &mut Rng, n: usize, d_out: usize, d_in: usize) -> (Vec<f32>, Vec<i8>, Vec<f16>) {
    let (x, weights) = block_case(rng, n, d_out, d_in);
    let (values, scales) = quantize_q8(&weights, d_in);
    (x, values, scales)
}

/// [`q8_case`] in Q4_0.
pub(crate) fn q4_case(rng: &mut Rng, n: usize, d_out: usize, d_in: usize) -> (Vec<f32>, Vec<u8>, Vec<f16>) {
    let (x, weights) = block_case(rng, n, d_out, d_in);
    let (packed, scales) = quantize_q4(&weights, d_in);
    (x, packed, scales)
}

/// `(n, d_out, d_in)` for the k-quants, whose rows are whole super-blocks of 256: no tokens,
/// one output, token and row counts around the integer dots' tiles and groups, a 2B-model width,
/// and the passes of [`MANY_PASSES`].
pub(crate) const K_SHAPES: [(usize, usize, usize); 7] =
    [(1, 1, 256), (0, 5, 256), (3, 17, 512), (9, 31, 256), (17, 16, 768), (130, 64, 2048), MANY_PASSES];

/// `blocks` random GGUF blocks of k-quant `ty` (every byte random but the f16 scales, small and
/// finite; the first block's scales zero) and the weights llama.cpp dequantizes them to
/// ([`GgmlType::dequantize`], held to llama.cpp's bit for bit by `tests/fixtures/gguf`).
pub(crate) fn k_blocks(rng: &mut Rng, ty: GgmlType, blocks: usize) -> (Vec<u8>, Vec<f32>) {
    let mut bytes: Vec<u8> = (0..blocks * ty.block_bytes()).map(|_| rng.below(256) as u8).collect();
    let scales: &[usize] = match ty {
        GgmlType::Q4K | GgmlType::Q5K => &[0, 2],
        GgmlType::Q6K => &[208],
        GgmlType::Q3K => &[108],
        _ => unreachable!("k_blocks: {} is not a k-quant with kernels", ty.name()),
    };
    for (b, block) in bytes.chunks_exact_mut(ty.block_bytes()).enumerate() {
        for &at in scales {
            let d = if b == 0 { f16::ZERO } else { f16::from_f32(rng.next_f32() * 0.01) };
            block[at..at + 2].copy_from_slice(&d.to_le_bytes());
        }
    }
    let mut weights = vec![0f32; blocks * ty.block_values()];
    ty.dequantize(&bytes, &mut weights);
    (bytes, weights)
}

/// The integer-dot kernels this CPU runs (saying which it cannot).
#[cfg(all(feature = "cpu-kernels", target_arch = "x86_64"))]
pub(crate) fn integer_dots() -> Vec<crate::cpu::integer_dot::DotIsa> {
    use crate::cpu::integer_dot::DotIsa;
    let (run, skip): (Vec<DotIsa>, Vec<DotIsa>) = DotIsa::ALL.into_iter().partition(|isa| isa.available());
    for isa in skip {
        println!("this CPU does not run {isa:?}: that integer dot is not checked here");
    }
    run
}

/// The activations and f32 weights of [`q8_case`].
pub(crate) fn block_case(rng: &mut Rng, n: usize, d_out: usize, d_in: usize) -> (Vec<f32>, Vec<f32>) {
    let mut weights: Vec<f32> = (0..d_out * d_in).map(|_| rng.next_f32() - 0.5).collect();
    let first = Q8_BLOCK.min(weights.len());
    weights[..first].fill(0.0); // a zero block: scale 0
    if weights.len() > 2 * Q8_BLOCK {
        weights[Q8_BLOCK + 3] = 40.0; // an outlier that sets its block's scale
    }
    let mut x: Vec<f32> = (0..n * d_in).map(|_| 2.0 * rng.next_f32() - 1.0).collect();
    if x.len() >= 2 * Q8_BLOCK {
        x[..Q8_BLOCK].fill(0.0);
        // max 127 (scale 1): 0.5 and 2.5 are ties, to 0 and 2.
        x[Q8_BLOCK..2 * Q8_BLOCK].fill(0.5);
        x[Q8_BLOCK] = 127.0;
        x[Q8_BLOCK + 1] = -2.5;
    }
    (x, weights)
}

pub(crate) fn check_outputs(name: &str, out: &[f32], expected: &[f64], magnitude: &[f64]) {
    assert_eq!(out.len(), expected.len(), "{name}");
    for (k, ((got, e), m)) in out.iter().zip(expected).zip(magnitude).enumerate() {
        let got = *got as f64;
        assert!((got - e).abs() <= 1e-5 * m + 1e-6, "{name}, entry {k}: {got} vs {e}");
    }
}

/// `(name, rows of each expert, d_in, d_out)`: no rows at all; one expert with every row, past
/// the CPU's few-row kernel (64); experts on both sides of that limit (64, 65 rows) at nonzero
/// offsets; single rows between empty experts, with more output columns
/// than a parallel task takes (256) and a last tile narrower than any tile width; 16 experts
/// of 0–8 rows as a router spreads them; a lone row of a long input. `d_in` is a whole number
/// of Q8_0 blocks where the q8 form runs the case too.
pub(crate) const GROUPED_CASES: [(&str, &[usize], usize, usize); 6] = [
    ("no rows", &[0, 0, 0], 32, 3),
    ("one expert has every row", &[0, 70, 0], 96, 65),
    ("few-row and sgemm experts after one another", &[5, 0, 70, 2, 64, 65], 32, 40),
    ("single rows and gaps", &[1, 0, 2, 0, 1], 33, 257),
    ("a router's spread", &[3, 0, 8, 1, 5, 2, 0, 7, 4, 4, 6, 1, 0, 2, 3, 5], 64, 96),
    ("a lone row of a long input", &[1], 4096, 5),
];

/// The expert of each row, for rows sorted by expert with `counts` rows each.
pub(crate) fn expert_of_rows(counts: &[usize]) -> Vec<usize> {
    counts.iter().enumerate().flat_map(|(e, &c)| std::iter::repeat_n(e, c)).collect()
}

/// `x · W[expert of row]` by plain loops in f64, for stacked `W [E, d_in, d_out]`.
pub(crate) fn naive_grouped(x: &[f32], counts: &[usize], weights: &[f32], d_in: usize, d_out: usize) -> Vec<f64> {
    let experts = expert_of_rows(counts);
    let mut out = vec![0.0; experts.len() * d_out];
    for (r, &e) in experts.iter().enumerate() {
        for o in 0..d_out {
            out[r * d_out + o] =
                (0..d_in).map(|i| x[r * d_in + i] as f64 * weights[(e * d_in + i) * d_out + o] as f64).sum();
        }
    }
    out
}

pub(crate) fn counts_tensor<B: Backend>(counts: &[usize], device: &B::Device) -> Tensor<B, 1, Int> {
    let counts: Vec<i64> = counts.iter().map(|&c| c as i64).collect();
    Tensor::from_data(TensorData::new(counts.clone(), [counts.len()]), device)
}

/// Whether `B` is burn's wgpu backend (its name, `fusion<cubecl<wgpu<..>>>`, says so).
pub(crate) fn on_wgpu<B: Backend>(device: &B::Device) -> bool {
    B::name(device).contains("wgpu")
}

/// `backend_tests!(check, ...)`: for every backend of the build ([`crate::for_each_backend!`])
/// and for `Autodiff<NdArray>`, whose extensions must give the same values, a module of tests,
/// each `check::<Backend>(&device)`.
macro_rules! backend_tests {
    ($($check:ident),+ $(,)?) => {
        crate::for_each_backend!(tests_on_backend, $($check),+);
        #[cfg(all(feature = "autodiff", feature = "ndarray"))]
        tests_on_backend!(autodiff, burn::backend::Autodiff<crate::backend_list::NdArray>, "", $($check),+);
    };
}

/// One backend's module of [`backend_tests!`].
macro_rules! tests_on_backend {
    ($name:ident, $backend:ty, $about:literal, $($check:ident),+) => {
        mod $name {
            $(
                #[test]
                fn $check() {
                    super::$check::<$backend>(&Default::default());
                }
            )+
        }
    };
}
pub(crate) use {backend_tests, tests_on_backend};
