//! Every backend's kernels (specialised where the backend has one) against the generic tensor-op
//! implementations, the naive tensor-op baselines and plain reference loops, on random inputs and
//! edge cases. Each backend compiled in gets the same suite.

use burn::tensor::{Int, Tensor, TensorData, TensorPrimitive, backend::Backend};
use decider_ops::{
    ActivationBits, BlockInts, CausalConv1d, DenseMatmul, ExpertCount, GatedDeltaRule, Gating, Half, HalfMatmul,
    Q4_ACTIVATION_BITS, Q4_BLOCK, Q4Matmul, Q8_BLOCK, Q8Matmul, Reshape, UnitLowerInverse, block_scales,
    block_scales_f32, causal_conv1d, dense_matmul, dequantize_q4, dequantize_q8, expert_count, gated_delta_rule,
    generic, grouped_half_float_matmul, grouped_half_matmul, grouped_matmul, grouped_q4_matmul, grouped_q8_matmul,
    half_bits, half_bits_f32, half_float_matmul, half_floats, half_matmul, holds_half_floats, q4_matmul, q4_rows,
    q4_values, q8_matmul, q8_rows, q8_values, q8_values_f32, quantize_q4, quantize_q8, reference, reshape, sigmoid,
    silu, unit_lower_inverse,
};
use half::{bf16, f16};

/// Every extension of this crate.
trait Ops:
    ExpertCount
    + UnitLowerInverse
    + Q8Matmul
    + Q4Matmul
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
struct Rng(u64);
impl Rng {
    fn next_f32(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 24) as f32
    }
    fn below(&mut self, n: u64) -> i64 {
        (self.next_f32() as f64 * n as f64) as i64
    }
}

fn naive_count(ids: &[i64], experts: usize) -> Vec<i64> {
    let mut counts = vec![0; experts];
    for &id in ids {
        if id >= 0 && (id as usize) < experts {
            counts[id as usize] += 1;
        }
    }
    counts
}

/// Forward substitution `X = (I + L)^-1`, entry by entry, in f64.
fn naive_inverse(a: &[f32], n: usize) -> Vec<f64> {
    let mut x = vec![0.0f64; n * n];
    for i in 0..n {
        x[i * n + i] = 1.0;
        for j in 0..i {
            let s: f64 = (j..i).map(|m| a[i * n + m] as f64 * x[m * n + j]).sum();
            x[i * n + j] = -s;
        }
    }
    x
}

/// Matrices built like the delta rule's systems: `(beta k) k^T * decay`, strictly lower, with
/// unit-norm, strongly aligned keys, so the entries are close to 1.
fn delta_rule_like(rng: &mut Rng, n: usize) -> Vec<f32> {
    let d = 16;
    let keys: Vec<Vec<f32>> = (0..n)
        .map(|_| {
            let base: Vec<f32> = (0..d).map(|c| if c == 0 { 4.0 } else { rng.next_f32() - 0.5 }).collect();
            let norm = base.iter().map(|v| v * v).sum::<f32>().sqrt();
            base.iter().map(|v| v / norm).collect()
        })
        .collect();
    let beta: Vec<f32> = (0..n).map(|_| 0.5 + 0.5 * rng.next_f32()).collect();
    let mut a = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..i {
            let dot: f32 = keys[i].iter().zip(&keys[j]).map(|(x, y)| x * y).sum();
            a[i * n + j] = beta[i] * dot * (-0.001 * (i - j) as f32).exp();
        }
    }
    a
}

fn count_cases() -> Vec<(&'static str, Vec<i64>, usize)> {
    let mut rng = Rng(7);
    vec![
        ("8 into 64", (0..8).map(|_| rng.below(64)).collect(), 64),
        ("1024 into 128", (0..1024).map(|_| rng.below(128)).collect(), 128),
        ("944 into 256", (0..944).map(|_| rng.below(256)).collect(), 256),
        ("65536 into 256", (0..65_536).map(|_| rng.below(256)).collect(), 256),
        ("all on one expert", vec![3; 100], 8),
        ("no ids", vec![], 16),
        ("ids >= E and < 0 dropped", vec![0, 5, 8, 9, 100, 7, -1], 8),
    ]
}

fn check_counts<B: Ops>(device: &B::Device) {
    for (case, ids, experts) in count_cases() {
        let tensor = Tensor::<B, 1, Int>::from_data(TensorData::new(ids.clone(), [ids.len()]), device);
        let expected = naive_count(&ids, experts);
        let as_vec = |t: Tensor<B, 1, Int>| t.into_data().iter::<i64>().collect::<Vec<_>>();
        assert_eq!(as_vec(expert_count(tensor.clone(), experts)), expected, "kernel, {case}");
        assert_eq!(as_vec(generic::expert_count(tensor.clone(), experts)), expected, "generic, {case}");
        assert_eq!(as_vec(reference::expert_count_per_bin(tensor, experts)), expected, "per-bin, {case}");
    }
}

fn inverse_cases() -> Vec<(&'static str, usize, Vec<Vec<f32>>, f64)> {
    let mut rng = Rng(11);
    let mut cases = vec![("n = 1", 1, vec![vec![0.7], vec![-3.0]], 0.0)];
    for n in [2, 3, 5, 17, 64] {
        let random = (0..3).map(|_| (0..n * n).map(|_| rng.next_f32() - 0.5).collect()).collect();
        cases.push(("random", n, random, 1e-5));
    }
    // Entries near 1, as in real delta-rule chunks (32 heads x 2 chunks): the inverse grows.
    cases.push(("delta-rule-like n = 64", 64, (0..64).map(|_| delta_rule_like(&mut rng, 64)).collect(), 1e-4));
    cases
}

/// `with_by_rows`: also hold the naive per-row tensor-op baseline to the loops. It is off on
/// wgpu, where burn-wgpu 0.21 computes that chain of small ops wrongly from row 32 on (an
/// upstream bug this suite found; the kernel and the generic implementation are right there).
fn check_inverses<B: Ops>(device: &B::Device, with_by_rows: bool) {
    for (case, n, matrices, tolerance) in inverse_cases() {
        let flat: Vec<f32> = matrices.iter().flatten().copied().collect();
        let a = Tensor::<B, 3>::from_data(TensorData::new(flat, [matrices.len(), n, n]), device);
        let mut implementations =
            vec![("kernel", unit_lower_inverse(a.clone())), ("generic", generic::unit_lower_inverse(a.clone()))];
        if with_by_rows {
            implementations.push(("by rows", reference::unit_lower_inverse_by_rows(a.clone())));
        }
        for (name, x) in implementations {
            let x: Vec<f32> = x.into_data().convert::<f32>().to_vec().unwrap();
            for (b, m) in matrices.iter().enumerate() {
                for (k, e) in naive_inverse(m, n).iter().enumerate() {
                    let got = x[b * n * n + k] as f64;
                    assert!(
                        (got - e).abs() <= tolerance * e.abs().max(1.0),
                        "{name}, {case}, matrix {b} entry {k}: {got} vs {e}"
                    );
                }
            }
        }
    }
}

fn check_inverse_reads_only_the_strictly_lower_part<B: Ops>(device: &B::Device) {
    let lower = [0.0, 0.0, 0.0, 0.5, 0.0, 0.0, -1.0, 2.0, 0.0];
    let noisy = [9.0, 7.0, -3.0, 0.5, 4.0, 6.0, -1.0, 2.0, 8.0];
    let inverse = |m: [f32; 9]| -> Vec<f32> {
        unit_lower_inverse(Tensor::<B, 2>::from_data(TensorData::new(m.to_vec(), [3, 3]), device))
            .into_data()
            .convert::<f32>()
            .to_vec()
            .unwrap()
    };
    // (I + L)^-1 of this L, by hand.
    let expected = vec![1.0, 0.0, 0.0, -0.5, 1.0, 0.0, 2.0, -2.0, 1.0];
    assert_eq!(inverse(lower), expected);
    assert_eq!(inverse(noisy), expected);
}

fn check_empty_batch<B: Ops>(device: &B::Device) {
    let a = Tensor::<B, 4>::zeros([0, 3, 4, 4], device);
    assert_eq!(unit_lower_inverse(a).dims(), [0, 3, 4, 4]);
}

/// An activation row's blocks of 32 rounded to integers of at most `max` and back (in f64),
/// written out from the rule rather than taken from the crate: `d = max|x| / max` in f32 and `q
/// = round(x / d)` to the nearest, ties to even; the value is `q d`.
fn round_by_rule(x: &[f32], max: f32) -> Vec<f64> {
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
fn largest(bits: ActivationBits) -> f32 {
    match bits {
        ActivationBits::Eight => 127.0,
        ActivationBits::Sixteen => 32_767.0,
    }
}

/// `round(x) · Wᵀ` by plain loops in f64, `x` rounded to `bits` and `W` dequantized from Q8_0
/// blocks; with each output's `sum |x w|`, the scale of its rounding error.
fn naive_q8_matmul(
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
fn naive_q4_matmul(
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
fn naive_block_matmul(
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
const Q8_SHAPES: [(usize, usize, usize); 10] = [
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
const MANY_PASSES: (usize, usize, usize) = (520, 17, 8192);

/// Random weights in Q8_0 (with a zero block and an outlier) and activations (with a zero block
/// and a block whose values tie at half a step) of one shape.
fn q8_case(rng: &mut Rng, n: usize, d_out: usize, d_in: usize) -> (Vec<f32>, Vec<i8>, Vec<f16>) {
    let (x, weights) = block_case(rng, n, d_out, d_in);
    let (values, scales) = quantize_q8(&weights, d_in);
    (x, values, scales)
}

/// [`q8_case`] in Q4_0.
fn q4_case(rng: &mut Rng, n: usize, d_out: usize, d_in: usize) -> (Vec<f32>, Vec<u8>, Vec<f16>) {
    let (x, weights) = block_case(rng, n, d_out, d_in);
    let (packed, scales) = quantize_q4(&weights, d_in);
    (x, packed, scales)
}

/// The activations and f32 weights of [`q8_case`].
fn block_case(rng: &mut Rng, n: usize, d_out: usize, d_in: usize) -> (Vec<f32>, Vec<f32>) {
    let mut weights: Vec<f32> = (0..d_out * d_in).map(|_| rng.next_f32() - 0.5).collect();
    weights[..Q8_BLOCK].fill(0.0); // a zero block: scale 0
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

/// Every f16 a scale can be (finite, of either sign: subnormals, both zeros and the largest
/// included), stored as the backend holds scales and read back as f32, equals `half`'s
/// conversion. Rows of an odd 31 scales: where the bytes are packed four to an int, each row ends
/// in a padded int.
fn check_block_scales<B: Ops>(device: &B::Device) {
    const ROW: usize = 31;
    let scales: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).filter(|d| d.is_finite()).collect();
    let (count, scales_bits): (usize, Vec<u16>) = (scales.len(), scales.iter().map(|d| d.to_bits()).collect());
    assert_eq!(count % ROW, 0);
    let expected: Vec<f32> = scales.iter().map(|d| d.to_f32()).collect();
    let held = block_scales::<B, 2>(scales, [count / ROW, ROW], device);
    assert_eq!(held.dims(), B::block_storage().shape(BlockInts::ScaleBits, [count / ROW, ROW]));
    assert_eq!(held.dtype(), B::block_storage().dtype::<B>(BlockInts::ScaleBits));
    let decoded = block_scales_f32(held, ROW);
    let decoded: Vec<f32> = decoded.into_data().convert::<f32>().to_vec().unwrap();
    for ((got, want), d) in decoded.iter().zip(&expected).zip(&scales_bits) {
        assert_eq!(got.to_bits(), want.to_bits(), "f16 bits {d:#06x}: {got:e}, not {want:e}");
    }
}

/// Every Q8_0 value, stored as the backend holds them (with an offset in bytes, packed four to an
/// int on wgpu) and read back as a float, is itself.
fn check_q8_values<B: Ops>(device: &B::Device) {
    let values: Vec<i8> = (-127..=127).chain([0]).collect();
    let held = q8_rows::<B, 2>(values.clone(), [values.len() / 4, 4], device);
    assert_eq!(held.dims(), B::block_storage().shape(BlockInts::Q8Values, [values.len() / 4, 4]));
    assert_eq!(held.dtype(), B::block_storage().dtype::<B>(BlockInts::Q8Values));
    let read: Vec<f32> = q8_values_f32(held).into_data().convert::<f32>().to_vec().unwrap();
    assert_eq!(read, values.iter().map(|&v| f32::from(v)).collect::<Vec<_>>());
}

/// Every finite bf16 (subnormals, both zeros and the largest of each sign included), stored in
/// the backend's dtype for 16-bit patterns and read back as f32, equals `half`'s conversion.
/// (Every finite f16 is checked through [`check_block_scales`].)
fn check_bf16_bits<B: Ops>(device: &B::Device) {
    let bits: Vec<u16> = (0..=u16::MAX).filter(|&b| bf16::from_bits(b).is_finite()).collect();
    let expected: Vec<f32> = bits.iter().map(|&b| bf16::from_bits(b).to_f32()).collect();
    let decoded = half_bits_f32(half_bits::<B, 2>(bits.clone(), [bits.len() / 2, 2], device), Half::Bf16);
    let decoded: Vec<f32> = decoded.into_data().convert::<f32>().to_vec().unwrap();
    for ((got, want), b) in decoded.iter().zip(&expected).zip(&bits) {
        assert_eq!(got.to_bits(), want.to_bits(), "bf16 bits {b:#06x}: {got:e}, not {want:e}");
    }
}

/// Every finite value of each 16-bit float the device holds as a float tensor
/// ([`holds_half_floats`]), stored in that dtype and cast to f32, equals `half`'s conversion.
fn check_half_floats<B: Ops>(device: &B::Device) {
    for half in [Half::F16, Half::Bf16].into_iter().filter(|&half| holds_half_floats::<B>(half, device)) {
        let bits: Vec<u16> = (0..=u16::MAX).filter(|&b| half.is_finite(b)).collect();
        let floats = half_floats::<B, 2>(bits.clone(), half, [bits.len() / 2, 2], device);
        assert_eq!(floats.dtype(), half.dtype());
        let decoded: Vec<f32> =
            floats.cast(burn::tensor::FloatDType::F32).into_data().convert::<f32>().to_vec().unwrap();
        for (got, b) in decoded.iter().zip(&bits) {
            let want = half.to_f32(*b);
            assert_eq!(got.to_bits(), want.to_bits(), "{half:?} {b:#06x}: {got:e}, not {want:e}");
        }
    }
}

/// candle holds both 16-bit floats as float tensors, so the suites above test the floats forms
/// (wgpu's f16 depends on the adapter).
#[cfg(feature = "candle")]
#[test]
fn candle_holds_16_bit_floats() {
    let device = Default::default();
    assert!(holds_half_floats::<decider_ops::backend_list::Candle>(Half::F16, &device));
    assert!(holds_half_floats::<decider_ops::backend_list::Candle>(Half::Bf16, &device));
}

/// `x [n, d_in]` (not rounded) times the 16-bit weight `bits [d_out, d_in]`, by plain loops in
/// f64: `(out, Σ |terms|)`.
fn naive_half_matmul(x: &[f32], n: usize, bits: &[u16], half: Half, d_out: usize, d_in: usize) -> (Vec<f64>, Vec<f64>) {
    let (mut out, mut magnitude) = (vec![0.0; n * d_out], vec![0.0; n * d_out]);
    for o in 0..d_out {
        for t in 0..n {
            for i in 0..d_in {
                let term = x[t * d_in + i] as f64 * half.to_f32(bits[o * d_in + i]) as f64;
                out[t * d_out + o] += term;
                magnitude[t * d_out + o] += term.abs();
            }
        }
    }
    (out, magnitude)
}

/// Activations and a weight rounded to `half` (with an outlier beyond bf16's precision and a
/// value f16 holds only as a subnormal).
fn half_case(rng: &mut Rng, n: usize, d_out: usize, d_in: usize, half: Half) -> (Vec<f32>, Vec<u16>) {
    let mut weights: Vec<f32> = (0..d_out * d_in).map(|_| rng.next_f32() - 0.5).collect();
    if let [first, second, ..] = weights.as_mut_slice() {
        (*first, *second) = (300.123_45, 3e-6);
    }
    let x: Vec<f32> = (0..n * d_in).map(|_| 2.0 * rng.next_f32() - 1.0).collect();
    (x, weights.iter().map(|&w| half.from_f32(w).unwrap()).collect())
}

/// The shapes of the block formats and ones no block format takes (inputs not a multiple of 32).
const HALF_SHAPES: [(usize, usize, usize); 12] = [
    (1, 1, 32),
    (0, 5, 64),
    (3, 1, 32),
    (7, 65, 96),
    (2, 129, 256),
    (130, 64, 2048),
    (1, 3, 4096),
    (9, 17, 64),
    (17, 31, 160),
    (1, 1, 1),
    (5, 3, 7),
    (33, 257, 33),
];

fn check_half_matmul<B: Ops>(device: &B::Device) {
    let mut rng = Rng(53);
    for half in [Half::F16, Half::Bf16] {
        for (n, d_out, d_in) in HALF_SHAPES {
            let (x, bits) = half_case(&mut rng, n, d_out, d_in, half);
            let (expected, magnitude) = naive_half_matmul(&x, n, &bits, half, d_out, d_in);
            let x_t = Tensor::<B, 2>::from_data(TensorData::new(x, [n, d_in]), device);
            let bits_t = half_bits::<B, 2>(bits.clone(), [d_out, d_in], device);
            let kernel = half_matmul(x_t.clone(), bits_t.clone(), half);
            let generic = generic::half_matmul(x_t.clone(), bits_t, half);
            let mut forms = vec![("kernel", kernel), ("generic", generic)];
            if holds_half_floats::<B>(half, device) {
                let floats = half_floats::<B, 2>(bits, half, [d_out, d_in], device);
                assert_eq!(floats.dtype(), half.dtype(), "{half:?} held as floats");
                forms.push(("floats kernel", half_float_matmul(x_t.clone(), floats.clone())));
                forms.push(("floats generic", generic::half_float_matmul(x_t, floats)));
            }
            for (name, out) in forms {
                assert_eq!(out.dims(), [n, d_out], "{half:?} {name}, {n}x{d_out}x{d_in}");
                let out: Vec<f32> = out.into_data().convert::<f32>().to_vec().unwrap();
                check_outputs(&format!("{half:?} {name}, {n}x{d_out}x{d_in}"), &out, &expected, &magnitude);
            }
        }
    }
}

fn check_grouped_half_matmul<B: Ops>(device: &B::Device) {
    let mut rng = Rng(59);
    for half in [Half::F16, Half::Bf16] {
        for (name, counts, d_in, d_out) in GROUPED_CASES {
            let (rows, experts) = (counts.iter().sum::<usize>(), counts.len());
            let cases: Vec<_> = counts.iter().map(|&c| half_case(&mut rng, c, d_out, d_in, half)).collect();
            let (mut expected, mut magnitude) = (Vec::new(), Vec::new());
            for ((x, bits), &c) in cases.iter().zip(counts) {
                let (out, size) = naive_half_matmul(x, c, bits, half, d_out, d_in);
                expected.extend(out);
                magnitude.extend(size);
            }
            let x: Vec<f32> = cases.iter().flat_map(|(x, _)| x.clone()).collect();
            let bits: Vec<u16> = cases.iter().flat_map(|(_, bits)| bits.clone()).collect();
            let x_t = Tensor::<B, 2>::from_data(TensorData::new(x, [rows, d_in]), device);
            let bits_t = half_bits::<B, 3>(bits.clone(), [experts, d_out, d_in], device);
            let counts_t = counts_tensor::<B>(counts, device);
            let kernel = grouped_half_matmul(x_t.clone(), bits_t.clone(), counts_t.clone(), half);
            let generic = generic::grouped_half_matmul::<B>(
                x_t.clone().into_primitive().tensor(),
                bits_t.into_primitive(),
                counts_t.clone().into_primitive(),
                half,
            );
            let mut forms =
                vec![("kernel", kernel), ("generic", Tensor::from_primitive(TensorPrimitive::Float(generic)))];
            if holds_half_floats::<B>(half, device) {
                let floats = half_floats::<B, 3>(bits, half, [experts, d_out, d_in], device);
                forms.push(("floats kernel", grouped_half_float_matmul(x_t.clone(), floats.clone(), counts_t.clone())));
                let generic = generic::grouped_half_float_matmul::<B>(
                    x_t.into_primitive().tensor(),
                    floats.into_primitive().tensor(),
                    counts_t.into_primitive(),
                );
                forms.push(("floats generic", Tensor::from_primitive(TensorPrimitive::Float(generic))));
            }
            for (form, out) in forms {
                assert_eq!(out.dims(), [rows, d_out], "{half:?} {form}, {name}");
                check_outputs(
                    &format!("{half:?} {form}, {name}"),
                    &out.into_data().convert::<f32>().to_vec::<f32>().unwrap(),
                    &expected,
                    &magnitude,
                );
            }
        }
    }
}

/// 16-bit floats round to nearest, ties to even, as `half` does; a value f16 cannot hold is
/// refused, and so is a non-finite one.
#[test]
fn half_rounding_and_range() {
    assert_eq!(Half::Bf16.from_f32(1.0 + 1.0 / 256.0), Some(bf16::ONE.to_bits()), "a tie rounds to the even 1.0");
    assert_eq!(
        Half::Bf16.from_f32(1.0 + 3.0 / 256.0),
        Some(bf16::from_f32(1.0 + 4.0 / 256.0).to_bits()),
        "a tie rounds to the even neighbour"
    );
    assert_eq!(Half::F16.from_f32(65504.0), Some(f16::MAX.to_bits()));
    assert_eq!(Half::F16.from_f32(65519.0), Some(f16::MAX.to_bits()), "below the halfway point to 65,536");
    assert_eq!(Half::F16.from_f32(65520.0), None, "rounds to infinity");
    assert_eq!(Half::Bf16.from_f32(1e38), Some(bf16::from_f32(1e38).to_bits()), "bf16 has f32's range");
    assert_eq!(Half::Bf16.from_f32(f32::NAN), None);
    assert_eq!(Half::F16.from_f32(f32::INFINITY), None);
    for half in [Half::F16, Half::Bf16] {
        for bits in [0u16, 1, 0x3c00, 0x7bff, 0x8001] {
            assert!(half.is_finite(bits), "{half:?} {bits:#06x}");
        }
    }
    assert!(!Half::F16.is_finite(0x7c00) && !Half::F16.is_finite(0xfe00) && Half::Bf16.is_finite(0x7c00));
    assert!(!Half::Bf16.is_finite(0x7f80) && !Half::Bf16.is_finite(0xffc1));
}

fn check_outputs(name: &str, out: &[f32], expected: &[f64], magnitude: &[f64]) {
    assert_eq!(out.len(), expected.len(), "{name}");
    for (k, ((got, e), m)) in out.iter().zip(expected).zip(magnitude).enumerate() {
        let got = *got as f64;
        assert!((got - e).abs() <= 1e-5 * m + 1e-6, "{name}, entry {k}: {got} vs {e}");
    }
}

fn check_q8_matmul<B: Ops>(device: &B::Device) {
    let mut rng = Rng(13);
    for (n, d_out, d_in) in Q8_SHAPES {
        let (x, values, scales) = q8_case(&mut rng, n, d_out, d_in);
        let x_t = Tensor::<B, 2>::from_data(TensorData::new(x.clone(), [n, d_in]), device);
        let scales_t = block_scales::<B, 2>(scales.clone(), [d_out, d_in / Q8_BLOCK], device);
        // The kernel reads the values in its layout; the generic form as they are.
        let laid_out = q8_values::<B, 2>(values.clone(), [d_out, d_in], device);
        let plain = q8_rows::<B, 2>(values.clone(), [d_out, d_in], device);
        for bits in [ActivationBits::Eight, ActivationBits::Sixteen] {
            let (expected, magnitude) = naive_q8_matmul(&x, n, &values, &scales, d_out, d_in, bits);
            let kernel = q8_matmul(x_t.clone(), laid_out.clone(), scales_t.clone(), bits);
            let generic = generic::q8_matmul(x_t.clone(), plain.clone(), scales_t.clone(), bits);
            for (name, out) in [("kernel", kernel), ("generic", generic)] {
                let name = format!("{name}, {bits:?}, {n}x{d_out}x{d_in}");
                assert_eq!(out.dims(), [n, d_out], "{name}");
                check_outputs(&name, &out.into_data().convert::<f32>().to_vec().unwrap(), &expected, &magnitude);
            }
        }
    }
}

fn check_q4_matmul<B: Ops>(device: &B::Device) {
    let mut rng = Rng(19);
    for (n, d_out, d_in) in Q8_SHAPES {
        let (x, packed, scales) = q4_case(&mut rng, n, d_out, d_in);
        let (expected, magnitude) = naive_q4_matmul(&x, n, &packed, &scales, d_out, d_in);
        let x_t = Tensor::<B, 2>::from_data(TensorData::new(x, [n, d_in]), device);
        let scales_t = block_scales::<B, 2>(scales, [d_out, d_in / Q4_BLOCK], device);
        // The kernel reads the bytes in its layout; the generic form in Q4_0's order.
        let kernel =
            q4_matmul(x_t.clone(), q4_values::<B, 2>(packed.clone(), [d_out, d_in / 2], device), scales_t.clone());
        let plain = q4_rows::<B, 2>(packed, [d_out, d_in / 2], device);
        let generic = generic::q4_matmul(x_t, plain, scales_t);
        for (name, out) in [("kernel", kernel), ("generic", generic)] {
            assert_eq!(out.dims(), [n, d_out], "{name}, {n}x{d_out}x{d_in}");
            let out: Vec<f32> = out.into_data().convert::<f32>().to_vec().unwrap();
            check_outputs(&format!("q4 {name}, {n}x{d_out}x{d_in}"), &out, &expected, &magnitude);
        }
    }
}

/// Every CPU form of the q8 and q4 matmuls, whichever this CPU would choose: each integer dot this
/// CPU runs (AVX-512 VNNI, AVX2; the test says which it cannot) and the dequantized sgemm.
#[cfg(feature = "cpu-kernels")]
#[test]
fn both_cpu_block_kernels_match_plain_loops() {
    #[cfg(target_arch = "x86_64")]
    use decider_ops::cpu::integer_dot as dot;
    use decider_ops::{cpu, round_activations};
    #[cfg(target_arch = "x86_64")]
    let dots = integer_dots();
    #[cfg(target_arch = "x86_64")]
    assert!(
        MANY_PASSES.0 * MANY_PASSES.2 > dot::PASS_BYTES,
        "MANY_PASSES no longer spans several passes of the kernels"
    );
    let mut rng = Rng(17);
    for (n, d_out, d_in) in Q8_SHAPES {
        let (x, values, scales) = q8_case(&mut rng, n, d_out, d_in);
        let name = format!("{n}x{d_out}x{d_in}");
        for bits in [ActivationBits::Eight, ActivationBits::Sixteen] {
            let (expected, magnitude) = naive_q8_matmul(&x, n, &values, &scales, d_out, d_in, bits);
            let rounded = round_activations(&x, d_in, bits);
            let dequantized = cpu::dequantized_q8_matmul(&rounded, n, &values, &scales, d_out, d_in);
            check_outputs(&format!("dequantized, {bits:?}, {name}"), &dequantized, &expected, &magnitude);
            #[cfg(target_arch = "x86_64")]
            for &isa in &dots {
                let laid_out = dot::q8_layout(isa, &values, d_out, d_in);
                let out = dot::q8_matmul(isa, &x, n, &laid_out, &scales, d_out, d_in, bits);
                check_outputs(&format!("{isa:?}, {bits:?}, {name}"), &out, &expected, &magnitude);
            }
        }
        let rounded = round_activations(&x, d_in, Q4_ACTIVATION_BITS);
        let (packed, q4_scales) = quantize_q4(&dequantize_q8(&values, &scales), d_in);
        let (q4_expected, q4_magnitude) = naive_q4_matmul(&x, n, &packed, &q4_scales, d_out, d_in);
        let q4_dequantized = cpu::dequantized_q4_matmul(&rounded, n, &packed, &q4_scales, d_out, d_in);
        check_outputs(&format!("q4 dequantized, {name}"), &q4_dequantized, &q4_expected, &q4_magnitude);
        #[cfg(target_arch = "x86_64")]
        for &isa in &dots {
            let laid_out = dot::q4_layout(isa, &packed, d_out, d_in);
            let out = dot::q4_matmul(isa, &x, n, &laid_out, &q4_scales, d_out, d_in);
            check_outputs(&format!("q4 {isa:?}, {name}"), &out, &q4_expected, &q4_magnitude);
        }
    }
}

/// The integer-dot kernels this CPU runs (saying which it cannot).
#[cfg(all(feature = "cpu-kernels", target_arch = "x86_64"))]
fn integer_dots() -> Vec<decider_ops::cpu::integer_dot::DotIsa> {
    use decider_ops::cpu::integer_dot::DotIsa;
    let (run, skip): (Vec<DotIsa>, Vec<DotIsa>) = DotIsa::ALL.into_iter().partition(|isa| isa.available());
    for isa in skip {
        println!("this CPU does not run {isa:?}: that integer dot is not checked here");
    }
    run
}

/// Every CPU form of the delta rule's steps this CPU runs (the test says which it cannot): in
/// AVX-512 registers, the portable loops compiled for AVX2 and for the baseline, against the
/// definition.
#[cfg(feature = "cpu-kernels")]
#[test]
fn every_cpu_delta_rule_form_matches_the_definition() {
    use decider_ops::cpu::Isa;
    use decider_ops::cpu::delta_rule::{Dims, gated_delta_rule};
    let mut rng = Rng(43);
    for dims in DELTA_SHAPES {
        let [batch, len, heads, dk, dv] = dims;
        let (q, k, v, g, beta, state) = delta_case(&mut rng, dims);
        let (expected_out, expected_state) = naive_delta_rule(&q, &k, &v, &g, &beta, &state, dims);
        for isa in Isa::ALL {
            if !isa.available() {
                println!("this CPU does not run {isa:?}: that form is not checked here");
                continue;
            }
            let (out, final_state) =
                gated_delta_rule([&q, &k, &v, &g, &beta, &state], Dims { batch, len, heads, dk, dv }, isa);
            check_delta_outputs(&format!("{isa:?}"), dims, &out, &expected_out, &final_state, &expected_state);
        }
    }
}

#[test]
fn activations_round_to_8_and_16_bit_blocks() {
    use decider_ops::round_activations;
    let mut x = vec![0.0f32; 2 * Q8_BLOCK];
    x[..5].copy_from_slice(&[127.0, 0.5, 1.5, -2.5, 3.4]);
    // 8 bits, scale 1: ties go to the even neighbour, others to the nearest.
    let eight = round_activations(&x, Q8_BLOCK, ActivationBits::Eight);
    assert_eq!(&eight[..5], &[127.0, 0.0, 2.0, -2.0, 3.0]);
    // 16 bits, scale 127 / 32,767: 0.5, 1.5, -2.5 and 3.4 are 129.004, 387.012, -645.020 and 877.23
    // steps, rounded to 129, 387, -645 and 877 steps, each `q d` in f32.
    let d = 127.0f32 / 32_767.0;
    let sixteen = round_activations(&x, Q8_BLOCK, ActivationBits::Sixteen);
    assert_eq!(&sixteen[..5], &[32_767.0 * d, 129.0 * d, 387.0 * d, -645.0 * d, 877.0 * d]);
    // The rest of the first block, and the second block, are zero and stay zero.
    for rounded in [eight, sixteen] {
        assert!(rounded[5..].iter().all(|&v| v == 0.0));
    }
    let mut rng = Rng(7);
    let x: Vec<f32> = (0..4 * 96).map(|_| 5.0 * (rng.next_f32() - 0.5)).collect();
    for bits in [ActivationBits::Eight, ActivationBits::Sixteen] {
        let rounded = round_activations(&x, 96, bits);
        let expected = round_by_rule(&x, largest(bits));
        // In f32 `q d` rounds once.
        for (i, (&got, &want)) in rounded.iter().zip(&expected).enumerate() {
            assert!(
                (got as f64 - want).abs() <= want.abs() * f32::EPSILON as f64,
                "{bits:?}, value {i}: {got} != {want}"
            );
        }
        // A block is held within half its step, `max|x| / 254` or `max|x| / 65,534`; the f32
        // result rounds once more (`max|x| · EPS` covers it and the scale's rounding).
        let bound = 2.0 * largest(bits) as f64;
        for (block, rounded) in x.chunks(Q8_BLOCK).zip(rounded.chunks(Q8_BLOCK)) {
            let max = block.iter().fold(0f32, |m, v| m.max(v.abs())) as f64;
            for (&v, &r) in block.iter().zip(rounded) {
                assert!(
                    (v as f64 - r as f64).abs() <= max / bound + max * f32::EPSILON as f64,
                    "{bits:?}: {v} rounded to {r}, block max {max}"
                );
            }
        }
    }
}

/// The gated delta rule by its definition, token by token in f64: per batch element and head,
/// `S <- S exp(g)`, `S <- S + k (beta (v - S^T k))^T`, `o = S^T q`. Returns the outputs
/// `[batch, len, heads, dv]` and the final state `[batch, heads, dk, dv]`.
#[allow(clippy::too_many_arguments)]
fn naive_delta_rule(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    g: &[f32],
    beta: &[f32],
    state: &[f32],
    [batch, len, heads, dk, dv]: [usize; 5],
) -> (Vec<f64>, Vec<f64>) {
    let mut state: Vec<f64> = state.iter().map(|&x| x as f64).collect();
    let mut out = vec![0.0; batch * len * heads * dv];
    for b in 0..batch {
        for h in 0..heads {
            let s = &mut state[(b * heads + h) * dk * dv..][..dk * dv];
            for t in 0..len {
                let token = (b * len + t) * heads + h;
                let decay = (g[token] as f64).exp();
                s.iter_mut().for_each(|x| *x *= decay);
                for j in 0..dv {
                    let predicted: f64 = (0..dk).map(|i| s[i * dv + j] * k[token * dk + i] as f64).sum();
                    let delta = (v[token * dv + j] as f64 - predicted) * beta[token] as f64;
                    (0..dk).for_each(|i| s[i * dv + j] += k[token * dk + i] as f64 * delta);
                    out[token * dv + j] = (0..dk).map(|i| s[i * dv + j] * q[token * dk + i] as f64).sum();
                }
            }
        }
    }
    (out, state)
}

/// `[batch, len, heads, dk, dv]`: one of everything, several heads and batch elements, a
/// length across three 64-token chunks, no tokens, the 2B model's head width.
const DELTA_SHAPES: [[usize; 5]; 5] =
    [[1, 1, 1, 4, 3], [2, 7, 3, 8, 5], [1, 130, 2, 16, 8], [2, 0, 2, 4, 4], [1, 70, 1, 128, 128]];

/// Inputs shaped like the layer's: unit-norm keys, queries scaled by `dk^-0.5`, `beta` in `[0,
/// 1)`, log decays in `(-0.2, 0]`, and a nonzero state: `(q, k, v, g, beta, state)`.
fn delta_case(
    rng: &mut Rng,
    [batch, len, heads, dk, dv]: [usize; 5],
) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
    let tokens = batch * len * heads;
    let mut unit_rows = |scale: f32| -> Vec<f32> {
        let mut x: Vec<f32> = (0..tokens * dk).map(|_| rng.next_f32() - 0.5).collect();
        for row in x.chunks_mut(dk) {
            let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt();
            row.iter_mut().for_each(|v| *v *= scale / norm);
        }
        x
    };
    let (q, k) = (unit_rows((dk as f32).powf(-0.5)), unit_rows(1.0));
    let v: Vec<f32> = (0..tokens * dv).map(|_| 2.0 * rng.next_f32() - 1.0).collect();
    let g: Vec<f32> = (0..tokens).map(|_| -0.2 * rng.next_f32()).collect();
    let beta: Vec<f32> = (0..tokens).map(|_| rng.next_f32()).collect();
    let state: Vec<f32> = (0..batch * heads * dk * dv).map(|_| rng.next_f32() - 0.5).collect();
    (q, k, v, g, beta, state)
}

/// Outputs and final state within `1e-4 (1 + |expected|)` of the definition's.
fn check_delta_outputs(
    name: &str,
    dims: [usize; 5],
    out: &[f32],
    expected_out: &[f64],
    state: &[f32],
    expected_state: &[f64],
) {
    for (part, got, want) in [("out", out, expected_out), ("state", state, expected_state)] {
        assert_eq!(got.len(), want.len(), "{name} {dims:?} {part}");
        for (i, (a, e)) in got.iter().zip(want).enumerate() {
            assert!((*a as f64 - e).abs() <= 1e-4 * (1.0 + e.abs()), "{name} {dims:?} {part}[{i}]: {a} vs {e}");
        }
    }
}

/// The backend's scan and the generic chunked form against the definition.
fn check_delta_rule<B: Ops>(device: &B::Device) {
    let mut rng = Rng(41);
    for dims in DELTA_SHAPES {
        let [batch, len, heads, dk, dv] = dims;
        let (q, k, v, g, beta, state) = delta_case(&mut rng, dims);
        let (expected_out, expected_state) = naive_delta_rule(&q, &k, &v, &g, &beta, &state, dims);
        let t4 = |x: &[f32], shape: [usize; 4]| Tensor::<B, 4>::from_data(TensorData::new(x.to_vec(), shape), device);
        let t3 = |x: &[f32]| Tensor::<B, 3>::from_data(TensorData::new(x.to_vec(), [batch, len, heads]), device);
        let inputs = || {
            (
                t4(&q, [batch, len, heads, dk]),
                t4(&k, [batch, len, heads, dk]),
                t4(&v, [batch, len, heads, dv]),
                t3(&g),
                t3(&beta),
                t4(&state, [batch, heads, dk, dv]),
            )
        };
        let (q_t, k_t, v_t, g_t, beta_t, state_t) = inputs();
        let kernel = gated_delta_rule(q_t, k_t, v_t, g_t, beta_t, state_t);
        let (q_t, k_t, v_t, g_t, beta_t, state_t) = inputs();
        let chunked = generic::chunked_gated_delta_rule(q_t, k_t, v_t, g_t, beta_t, state_t);
        for (name, (out, final_state)) in [("kernel", kernel), ("generic chunked", chunked)] {
            assert_eq!(out.dims(), [batch, len, heads, dv], "{name} {dims:?}");
            assert_eq!(final_state.dims(), [batch, heads, dk, dv], "{name} {dims:?}");
            let values = |x: Tensor<B, 4>| -> Vec<f32> { x.into_data().convert::<f32>().to_vec().unwrap() };
            check_delta_outputs(name, dims, &values(out), &expected_out, &values(final_state), &expected_state);
        }
    }
}

/// `sigmoid` and `silu` against their definitions in f64, on a `[2, 3, len]` tensor (rank 3, so
/// the shape must survive) of values from -100 to 100 (past `exp`'s f32 range both ways), zeros of
/// both signs, tiny values and more values than one parallel task takes. `on_gpu`: allow the
/// looser `exp` and `log` a GPU may have (below).
fn check_gating<B: Ops>(device: &B::Device, on_gpu: bool) {
    let mut rng = Rng(53);
    let len = 6_000;
    let mut x: Vec<f32> = (0..6 * len).map(|_| 200.0 * rng.next_f32() - 100.0).collect();
    x[..8].copy_from_slice(&[0.0, -0.0, 1e-30, -1e-30, 88.0, -88.0, 100.0, -100.0]);
    let x_t = Tensor::<B, 3>::from_data(TensorData::new(x.clone(), [2, 3, len]), device);
    let sigmoid_of = |v: f32| 1.0 / (1.0 + (-(v as f64)).exp());
    let cases: [(&str, Tensor<B, 3>, &dyn Fn(f32) -> f64); 2] =
        [("sigmoid", sigmoid(x_t.clone()), &sigmoid_of), ("silu", silu(x_t), &|v: f32| v as f64 * sigmoid_of(v))];
    for (name, out, definition) in cases {
        assert_eq!(out.dims(), [2, 3, len], "{name}");
        let out: Vec<f32> = out.into_data().convert::<f32>().to_vec().unwrap();
        for (k, (&got, &v)) in out.iter().zip(&x).enumerate() {
            // Within a few roundings of an `exp` whose argument has the size of `x`: burn's
            // default form, `exp(-log(1 + exp(-x)))`, rounds `log(..)` to f32 first, an error of
            // `|x| ε` relative in the result. A GPU's `exp` and `log` may each be a few ulps off
            // besides (Vulkan allows `exp` 3 + 2|x| ulps, `log` 3). Where the exact sigmoid is
            // below f32's smallest normal value (x < -87.4), a device may give 0 (`exp(-x)`
            // overflows, or subnormals are flushed, as on GPUs): silu's exact value there is at
            // most 87.4 times that smallest value.
            let e = definition(v);
            let roundings = if on_gpu { 8.0 + 3.0 * v.abs() as f64 } else { 2.0 + v.abs() as f64 };
            let bound = roundings * f32::EPSILON as f64 * e.abs();
            assert!(
                (got as f64 - e).abs() <= bound + 88.0 * f32::MIN_POSITIVE as f64,
                "{name}({v}), entry {k}: {got} vs {e}"
            );
        }
    }
}

/// `(batch, len, channels, K)`: no tokens, one token after a history (decoding), fewer tokens
/// than the history (the new history mixes both), several parallel tasks with a partial last one,
/// no history at all (`K = 1`).
const CONV_SHAPES: [(usize, usize, usize, usize); 5] =
    [(1, 0, 5, 4), (1, 1, 3, 4), (2, 2, 7, 4), (2, 37, 100, 4), (2, 9, 16, 1)];

/// The causal conv against its definition in f64: `silu(Σ_j window[t + j] w[:, j])` over the
/// window `history ++ x`, and the window's last `K - 1` rows, exactly.
fn check_causal_conv1d<B: Ops>(device: &B::Device) {
    let mut rng = Rng(61);
    for (batch, len, channels, kernel) in CONV_SHAPES {
        let past = kernel - 1;
        let mut values = |count: usize| -> Vec<f32> { (0..count).map(|_| 2.0 * rng.next_f32() - 1.0).collect() };
        let (x, history, weight) =
            (values(batch * len * channels), values(batch * past * channels), values(channels * kernel));
        let window = |b: usize, i: usize, c: usize| {
            if i < past { history[(b * past + i) * channels + c] } else { x[(b * len + i - past) * channels + c] }
        };
        let tensor3 = |v: &[f32], rows: usize| {
            Tensor::<B, 3>::from_data(TensorData::new(v.to_vec(), [batch, rows, channels]), device)
        };
        let weight_t = Tensor::<B, 2>::from_data(TensorData::new(weight.clone(), [channels, kernel]), device);
        let (out, state) = causal_conv1d(tensor3(&x, len), tensor3(&history, past), weight_t);
        let case = format!("batch {batch}, len {len}, {channels} channels, K = {kernel}");
        assert_eq!(out.dims(), [batch, len, channels], "{case}");
        assert_eq!(state.dims(), [batch, past, channels], "{case}");
        let out: Vec<f32> = out.into_data().convert::<f32>().to_vec().unwrap();
        for b in 0..batch {
            for t in 0..len {
                for c in 0..channels {
                    let terms = (0..kernel).map(|j| weight[c * kernel + j] as f64 * window(b, t + j, c) as f64);
                    let (sum, size) = terms.fold((0.0, 0.0), |(s, m), v| (s + v, m + v.abs()));
                    let e = sum / (1.0 + (-sum).exp());
                    let got = out[(b * len + t) * channels + c] as f64;
                    assert!((got - e).abs() <= 1e-5 * (size + e.abs()), "{case}: out [{b}, {t}, {c}]: {got} vs {e}");
                }
            }
        }
        let expected: Vec<f32> = (0..batch)
            .flat_map(|b| (len..len + past).flat_map(move |i| (0..channels).map(move |c| (b, i, c))))
            .map(|(b, i, c)| window(b, i, c))
            .collect();
        assert_eq!(state.into_data().convert::<f32>().to_vec::<f32>().unwrap(), expected, "{case}: the new history");
    }
}

/// `reshape` of row-major, strided and empty tensors, to fewer and more dimensions: the values in
/// row-major order under the new shape, and the input unchanged by a later op on the output.
fn check_reshape<B: Ops>(device: &B::Device) {
    let values: Vec<f32> = (0..24).map(|v| v as f32).collect();
    let x = Tensor::<B, 3>::from_data(TensorData::new(values.clone(), [2, 3, 4]), device);
    let read = |t: Tensor<B, 2>| -> Vec<f32> { t.into_data().convert::<f32>().to_vec().unwrap() };

    let rows = reshape(x.clone(), [6, 4]);
    assert_eq!(rows.dims(), [6, 4]);
    assert_eq!(read(rows.clone().add_scalar(100.0)), values.iter().map(|v| v + 100.0).collect::<Vec<_>>(), "row-major");
    assert_eq!(
        x.clone().into_data().convert::<f32>().to_vec::<f32>().unwrap(),
        values,
        "the input after an op on its reshape"
    );

    // `swap_dims(0, 1)`: entry [j, i, k] is values[i * 12 + j * 4 + k].
    let swapped: Vec<f32> =
        (0..3).flat_map(|j| (0..2).flat_map(move |i| (0..4).map(move |k| (i * 12 + j * 4 + k) as f32))).collect();
    assert_eq!(read(reshape(x.clone().swap_dims(0, 1), [6, 4])), swapped, "strided");

    let up = reshape(reshape(x, [24]), [4, 3, 2]);
    assert_eq!(up.dims(), [4, 3, 2]);
    assert_eq!(up.into_data().convert::<f32>().to_vec::<f32>().unwrap(), values, "rank 1 to 3");

    let empty = reshape(Tensor::<B, 2>::zeros([0, 4], device), [0, 2, 2]);
    assert_eq!(empty.dims(), [0, 2, 2]);
}

#[cfg(feature = "ndarray")]
#[test]
#[should_panic(expected = "not as many elements")]
fn reshape_to_another_number_of_elements_panics() {
    let x = Tensor::<burn::backend::NdArray, 2>::zeros([2, 3], &Default::default());
    let _ = reshape(x, [4, 2]);
}

/// The point of ndarray's `Reshape`: a row-major array it owns keeps its storage.
#[cfg(feature = "ndarray")]
#[test]
fn ndarray_reshapes_a_row_major_array_in_place() {
    use burn::backend::ndarray::NdArrayTensor;
    type B = burn::backend::NdArray;
    fn address<const D: usize>(t: &Tensor<B, D>) -> usize {
        match t.clone().into_primitive().tensor() {
            NdArrayTensor::F32(storage) => storage.view().as_ptr() as usize,
            _ => panic!("not an f32 tensor"),
        }
    }
    let x = Tensor::<B, 3>::from_data(
        TensorData::new((0..24).map(|v| v as f32).collect::<Vec<_>>(), [2, 3, 4]),
        &Default::default(),
    )
    .add_scalar(1.0);
    let rows = reshape(x.clone(), [6, 4]);
    assert_eq!(address(&rows), address(&x), "reshape copied a row-major array");
    let strided = reshape(x.clone().swap_dims(1, 2), [6, 4]);
    assert_ne!(address(&strided), address(&x), "a strided view must be copied into row-major order");
}

/// `(n, d_in, d_out)`: no tokens, one of everything, a wide output, a 2B-model width, a long row.
const DENSE_SHAPES: [(usize, usize, usize); 6] =
    [(0, 4, 3), (1, 1, 1), (3, 5, 257), (7, 33, 65), (130, 2048, 96), (1, 4096, 5)];

/// `x · W` for `W [in, out]`, and `x · W[e]` for each slice of stacked `[3, in, out]` weights,
/// against plain f64 loops.
fn check_dense_matmul<B: Ops>(device: &B::Device) {
    let mut rng = Rng(29);
    for (n, d_in, d_out) in DENSE_SHAPES {
        let experts = 3;
        let weights: Vec<f32> = (0..experts * d_in * d_out).map(|_| rng.next_f32() - 0.5).collect();
        let x: Vec<f32> = (0..n * d_in).map(|_| 2.0 * rng.next_f32() - 1.0).collect();
        let naive = |e: usize| -> Vec<f64> {
            let w = &weights[e * d_in * d_out..];
            (0..n * d_out)
                .map(|k| (0..d_in).map(|i| x[k / d_out * d_in + i] as f64 * w[i * d_out + k % d_out] as f64).sum())
                .collect()
        };
        let check = |name: String, out: Tensor<B, 2>, expected: Vec<f64>| {
            assert_eq!(out.dims(), [n, d_out], "{name}");
            let out: Vec<f32> = out.into_data().convert::<f32>().to_vec().unwrap();
            for (k, (got, e)) in out.iter().zip(&expected).enumerate() {
                assert!(
                    (*got as f64 - e).abs() <= 1e-5 * (d_in as f64).sqrt() + 1e-6,
                    "{name}, entry {k}: {got} vs {e}"
                );
            }
        };
        let x_t = Tensor::<B, 2>::from_data(TensorData::new(x.clone(), [n, d_in]), device);
        let first = Tensor::<B, 2>::from_data(TensorData::new(weights[..d_in * d_out].to_vec(), [d_in, d_out]), device);
        check(format!("{n}x{d_in}x{d_out}"), dense_matmul(x_t.clone(), first), naive(0));
    }
}

/// `(name, rows of each expert, d_in, d_out)`: no rows at all; one expert with every row, past
/// the CPU's few-row kernel (64); experts on both sides of that limit (64, 65 rows) at nonzero
/// offsets; single rows between empty experts, with more output columns
/// than a parallel task takes (256) and a last tile narrower than any tile width; 16 experts
/// of 0–8 rows as a router spreads them; a lone row of a long input. `d_in` is a whole number
/// of Q8_0 blocks where the q8 form runs the case too.
const GROUPED_CASES: [(&str, &[usize], usize, usize); 6] = [
    ("no rows", &[0, 0, 0], 32, 3),
    ("one expert has every row", &[0, 70, 0], 96, 65),
    ("few-row and sgemm experts after one another", &[5, 0, 70, 2, 64, 65], 32, 40),
    ("single rows and gaps", &[1, 0, 2, 0, 1], 33, 257),
    ("a router's spread", &[3, 0, 8, 1, 5, 2, 0, 7, 4, 4, 6, 1, 0, 2, 3, 5], 64, 96),
    ("a lone row of a long input", &[1], 4096, 5),
];

/// The expert of each row, for rows sorted by expert with `counts` rows each.
fn expert_of_rows(counts: &[usize]) -> Vec<usize> {
    counts.iter().enumerate().flat_map(|(e, &c)| std::iter::repeat_n(e, c)).collect()
}

/// `x · W[expert of row]` by plain loops in f64, for stacked `W [E, d_in, d_out]`.
fn naive_grouped(x: &[f32], counts: &[usize], weights: &[f32], d_in: usize, d_out: usize) -> Vec<f64> {
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

fn counts_tensor<B: Backend>(counts: &[usize], device: &B::Device) -> Tensor<B, 1, Int> {
    let counts: Vec<i64> = counts.iter().map(|&c| c as i64).collect();
    Tensor::from_data(TensorData::new(counts.clone(), [counts.len()]), device)
}

fn check_grouped_matmul<B: Ops>(device: &B::Device) {
    let mut rng = Rng(31);
    for (name, counts, d_in, d_out) in GROUPED_CASES {
        let rows: usize = counts.iter().sum();
        let weights: Vec<f32> = (0..counts.len() * d_in * d_out).map(|_| rng.next_f32() - 0.5).collect();
        let x: Vec<f32> = (0..rows * d_in).map(|_| 2.0 * rng.next_f32() - 1.0).collect();
        let expected = naive_grouped(&x, counts, &weights, d_in, d_out);
        let x_t = Tensor::<B, 2>::from_data(TensorData::new(x, [rows, d_in]), device);
        let w_t = Tensor::<B, 3>::from_data(TensorData::new(weights, [counts.len(), d_in, d_out]), device);
        let counts_t = counts_tensor::<B>(counts, device);
        let generic = generic::grouped_matmul::<B>(
            x_t.clone().into_primitive().tensor(),
            w_t.clone().into_primitive().tensor(),
            counts_t.clone().into_primitive(),
        );
        for (form, out) in [
            ("kernel", grouped_matmul(x_t, w_t, counts_t)),
            ("generic", Tensor::from_primitive(TensorPrimitive::Float(generic))),
        ] {
            assert_eq!(out.dims(), [rows, d_out], "{form}, {name}");
            let out: Vec<f32> = out.into_data().convert::<f32>().to_vec().unwrap();
            for (k, (got, e)) in out.iter().zip(&expected).enumerate() {
                assert!(
                    (*got as f64 - e).abs() <= 1e-5 * (d_in as f64).sqrt() + 1e-6,
                    "{form}, {name}, entry {k}: {got} vs {e}"
                );
            }
        }
    }
}

fn check_grouped_q8_matmul<B: Ops>(device: &B::Device) {
    let mut rng = Rng(37);
    for (name, counts, d_in, d_out) in GROUPED_CASES.into_iter().filter(|(_, _, d_in, _)| d_in % Q8_BLOCK == 0) {
        let (rows, experts) = (counts.iter().sum::<usize>(), counts.len());
        let cases: Vec<_> = counts.iter().map(|&c| q8_case(&mut rng, c, d_out, d_in)).collect();
        let x: Vec<f32> = cases.iter().flat_map(|(x, _, _)| x.clone()).collect();
        let values: Vec<i8> = cases.iter().flat_map(|(_, values, _)| values.clone()).collect();
        let scales: Vec<f16> = cases.iter().flat_map(|(_, _, scales)| scales.clone()).collect();
        let x_t = Tensor::<B, 2>::from_data(TensorData::new(x, [rows, d_in]), device);
        let scales_t = block_scales::<B, 3>(scales, [experts, d_out, d_in / Q8_BLOCK], device);
        let counts_t = counts_tensor::<B>(counts, device);
        let values_t = q8_values::<B, 3>(values, [experts, d_out, d_in], device);
        for bits in [ActivationBits::Eight, ActivationBits::Sixteen] {
            let (mut expected, mut magnitude) = (Vec::new(), Vec::new());
            for ((x, values, scales), &c) in cases.iter().zip(counts) {
                let (out, size) = naive_q8_matmul(x, c, values, scales, d_out, d_in, bits);
                expected.extend(out);
                magnitude.extend(size);
            }
            let kernel = grouped_q8_matmul(x_t.clone(), values_t.clone(), scales_t.clone(), counts_t.clone(), bits);
            // The generic form is the backend's own q8 matmul per expert: it reads the same layout.
            let generic = generic::grouped_q8_matmul::<B>(
                x_t.clone().into_primitive().tensor(),
                values_t.clone().into_primitive(),
                scales_t.clone().into_primitive(),
                counts_t.clone().into_primitive(),
                bits,
            );
            for (form, out) in
                [("kernel", kernel), ("generic", Tensor::from_primitive(TensorPrimitive::Float(generic)))]
            {
                let form = format!("{form}, {bits:?}, {name}");
                assert_eq!(out.dims(), [rows, d_out], "{form}");
                check_outputs(&form, &out.into_data().convert::<f32>().to_vec::<f32>().unwrap(), &expected, &magnitude);
            }
        }
    }
}

fn check_grouped_q4_matmul<B: Ops>(device: &B::Device) {
    let mut rng = Rng(43);
    for (name, counts, d_in, d_out) in GROUPED_CASES.into_iter().filter(|(_, _, d_in, _)| d_in % Q4_BLOCK == 0) {
        let (rows, experts) = (counts.iter().sum::<usize>(), counts.len());
        let cases: Vec<_> = counts.iter().map(|&c| q4_case(&mut rng, c, d_out, d_in)).collect();
        let (mut expected, mut magnitude) = (Vec::new(), Vec::new());
        for ((x, packed, scales), &c) in cases.iter().zip(counts) {
            let (out, size) = naive_q4_matmul(x, c, packed, scales, d_out, d_in);
            expected.extend(out);
            magnitude.extend(size);
        }
        let x: Vec<f32> = cases.iter().flat_map(|(x, _, _)| x.clone()).collect();
        let packed: Vec<u8> = cases.iter().flat_map(|(_, packed, _)| packed.clone()).collect();
        let scales: Vec<f16> = cases.iter().flat_map(|(_, _, scales)| scales.clone()).collect();
        let x_t = Tensor::<B, 2>::from_data(TensorData::new(x, [rows, d_in]), device);
        let scales_t = block_scales::<B, 3>(scales, [experts, d_out, d_in / Q4_BLOCK], device);
        let counts_t = counts_tensor::<B>(counts, device);
        let values_t = q4_values::<B, 3>(packed, [experts, d_out, d_in / 2], device);
        let kernel = grouped_q4_matmul(x_t.clone(), values_t.clone(), scales_t.clone(), counts_t.clone());
        let generic = generic::grouped_q4_matmul::<B>(
            x_t.into_primitive().tensor(),
            values_t.into_primitive(),
            scales_t.into_primitive(),
            counts_t.into_primitive(),
        );
        for (form, out) in [("kernel", kernel), ("generic", Tensor::from_primitive(TensorPrimitive::Float(generic)))] {
            assert_eq!(out.dims(), [rows, d_out], "{form}, {name}");
            check_outputs(
                &format!("q4 {form}, {name}"),
                &out.into_data().convert::<f32>().to_vec::<f32>().unwrap(),
                &expected,
                &magnitude,
            );
        }
    }
}

/// Every tile width of the CPU's few-row kernel this CPU runs (the test says which it cannot),
/// on whole and partial tiles of rows and columns, against plain loops.
#[cfg(feature = "cpu-kernels")]
#[test]
fn every_cpu_few_row_tile_matches_plain_loops() {
    use decider_ops::cpu::Isa;
    use decider_ops::cpu::few_rows::matmul_in;
    let mut rng = Rng(41);
    for (m, k, n, columns) in
        [(1, 1, 1, 0..1), (4, 33, 64, 0..64), (5, 70, 200, 7..200), (9, 3, 130, 0..130), (3, 0, 16, 0..16)]
    {
        let w: Vec<f32> = (0..k * n).map(|_| rng.next_f32() - 0.5).collect();
        let x: Vec<f32> = (0..m * k).map(|_| 2.0 * rng.next_f32() - 1.0).collect();
        let full = naive_grouped(&x, &[m], &w, k, n);
        for isa in Isa::ALL {
            if !isa.available() {
                println!("this CPU does not run {isa:?}: those tiles are not checked here");
                continue;
            }
            let mut out = vec![f32::NAN; m * columns.len()];
            matmul_in(isa, &x, m, &w, k, n, columns.clone(), &mut out);
            for (r, row) in out.chunks(columns.len().max(1)).enumerate().take(m) {
                for (c, got) in columns.clone().zip(row) {
                    let e = full[r * n + c];
                    assert!(
                        (*got as f64 - e).abs() <= 1e-5 * (k as f64).sqrt() + 1e-6,
                        "{isa:?}, {m}x{k}x{n} {columns:?}, row {r} column {c}: {got} vs {e}"
                    );
                }
            }
        }
    }
}

#[test]
fn q8_blocks_round_as_llama_cpp_q8_0() {
    // One block: the largest magnitude maps to ±127, the scale is max|w| / 127 rounded to f16.
    let mut block = vec![0.0f32; Q8_BLOCK];
    block[..4].copy_from_slice(&[1.27, -0.5, 0.3, -0.004]);
    let (values, scales) = quantize_q8(&block, Q8_BLOCK);
    assert_eq!(&values[..4], &[127, -50, 30, 0]);
    assert!(values[4..].iter().all(|&v| v == 0));
    assert_eq!(scales, vec![f16::from_f32(0.01)]);
    // A zero block has scale 0 and values 0.
    let (values, scales) = quantize_q8(&[0.0; Q8_BLOCK], Q8_BLOCK);
    assert_eq!((values, scales), (vec![0; Q8_BLOCK], vec![f16::ZERO]));
    // Random rows: every value within half a step of its weight (plus the f16 scale's rounding).
    let mut rng = Rng(5);
    let weights: Vec<f32> = (0..8 * 96).map(|_| 3.0 * (rng.next_f32() - 0.5)).collect();
    let (values, scales) = quantize_q8(&weights, 96);
    let rounded = dequantize_q8(&values, &scales);
    for (k, (w, r)) in weights.iter().zip(&rounded).enumerate() {
        let block = &weights[k / Q8_BLOCK * Q8_BLOCK..][..Q8_BLOCK];
        let d = block.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
        let bound = d / 2.0 + 127.0 * (d - scales[k / Q8_BLOCK].to_f32()).abs() + 1e-6;
        assert!((w - r).abs() <= bound, "weight {k}: {w} rounds to {r}, more than {bound} away");
    }
}

/// The squared error, in f64, of Q4_0 blocks against the weights they stand for.
fn q4_errors(weights: &[f32], packed: &[u8], scales: &[f16]) -> Vec<f64> {
    let rounded = dequantize_q4(packed, scales);
    weights
        .chunks(Q4_BLOCK)
        .zip(rounded.chunks(Q4_BLOCK))
        .map(|(w, r)| w.iter().zip(r).map(|(&w, &r)| (w as f64 - r as f64).powi(2)).sum())
        .collect()
}

#[test]
fn q4_blocks_are_llama_cpp_q4_0_with_a_better_scale() {
    // A zero block: scale 0, every value 8 (standing for 0).
    let (packed, scales) = quantize_q4(&[0.0; Q4_BLOCK], Q4_BLOCK);
    assert_eq!((packed, scales), (vec![0x88; 16], vec![f16::ZERO]));
    // A block on the grid of llama.cpp's scale (`max / -8` = -0.2): values 0.2 apart round to
    // themselves, up to the f16 rounding of the scale; the largest maps to 0.
    let mut block = [0.0f32; Q4_BLOCK];
    block[..4].copy_from_slice(&[1.6, -0.8, 0.4, -1.4]);
    block[16] = 0.6;
    let (packed, scales) = quantize_q4(&block, Q4_BLOCK);
    for (w, r) in block.iter().zip(dequantize_q4(&packed, &scales)) {
        assert!((w - r).abs() < 1e-3, "{w} rounds to {r}");
    }
    // Random rows (uniform, and heavy-tailed as trained weights are): every block's error is at
    // most llama.cpp's, and the total measurably lower.
    let mut rng = Rng(23);
    let uniform: Vec<f32> = (0..4096 * Q4_BLOCK).map(|_| rng.next_f32() - 0.5).collect();
    let tailed: Vec<f32> = (0..4096 * Q4_BLOCK).map(|_| (rng.next_f32() - 0.5).powi(3)).collect();
    for (name, weights) in [("uniform", uniform), ("heavy-tailed", tailed)] {
        let (packed, scales) = quantize_q4(&weights, 8 * Q4_BLOCK);
        let ours = q4_errors(&weights, &packed, &scales);
        let (llama_packed, llama_scales): (Vec<Vec<u8>>, Vec<f16>) =
            weights.chunks(Q4_BLOCK).map(reference::llama_q4_0_block).unzip();
        let theirs = q4_errors(&weights, &llama_packed.concat(), &llama_scales);
        for (b, (ours, theirs)) in ours.iter().zip(&theirs).enumerate() {
            // The quantizer compares its candidates' errors in f32: a tie there may differ here
            // in the last bits.
            assert!(*ours <= theirs * (1.0 + 1e-5), "{name} block {b}: error {ours:e}, llama.cpp's {theirs:e}");
        }
        let ratio = ours.iter().sum::<f64>() / theirs.iter().sum::<f64>();
        println!("{name}: squared error {ratio:.3} of llama.cpp's Q4_0");
        assert!(ratio < 0.95, "{name}: squared error {ratio:.3} of llama.cpp's Q4_0");
    }
}

/// The suite on a backend, and (feature `autodiff`) on that backend inside `Autodiff`, whose
/// extensions must give the same values.
macro_rules! backend_suite {
    (tests: $backend:ty, $name:expr) => {
        type B = $backend;

        #[test]
        fn expert_count_matches_the_naive_histogram() {
            check_counts::<B>(&Default::default());
        }

        #[test]
        fn inverse_matches_forward_substitution() {
            check_inverses::<B>(&Default::default(), $name != "wgpu");
        }

        #[test]
        fn inverse_reads_only_the_strictly_lower_part() {
            check_inverse_reads_only_the_strictly_lower_part::<B>(&Default::default());
        }

        #[test]
        fn inverse_of_an_empty_batch_is_empty() {
            check_empty_batch::<B>(&Default::default());
        }

        #[test]
        fn sigmoid_and_silu_match_their_definitions() {
            check_gating::<B>(&Default::default(), $name == "wgpu");
        }

        #[test]
        fn causal_conv1d_matches_its_definition() {
            check_causal_conv1d::<B>(&Default::default());
        }

        #[test]
        fn reshape_keeps_row_major_order() {
            check_reshape::<B>(&Default::default());
        }

        #[test]
        fn dense_matmul_matches_plain_loops() {
            check_dense_matmul::<B>(&Default::default());
        }

        #[test]
        fn block_scales_read_back_as_their_f16_values() {
            check_block_scales::<B>(&Default::default());
        }

        #[test]
        fn q8_matmul_matches_plain_loops() {
            check_q8_matmul::<B>(&Default::default());
        }

        #[test]
        fn q4_matmul_matches_plain_loops() {
            check_q4_matmul::<B>(&Default::default());
        }

        #[test]
        fn grouped_q4_matmul_matches_plain_loops() {
            check_grouped_q4_matmul::<B>(&Default::default());
        }

        #[test]
        fn grouped_matmul_matches_plain_loops() {
            check_grouped_matmul::<B>(&Default::default());
        }

        #[test]
        fn grouped_q8_matmul_matches_plain_loops() {
            check_grouped_q8_matmul::<B>(&Default::default());
        }

        #[test]
        fn q8_values_read_back_as_themselves() {
            check_q8_values::<B>(&Default::default());
        }

        #[test]
        fn bf16_patterns_read_back_as_their_values() {
            check_bf16_bits::<B>(&Default::default());
        }

        #[test]
        fn half_floats_read_back_as_their_values() {
            check_half_floats::<B>(&Default::default());
        }

        #[test]
        fn half_matmul_matches_plain_loops() {
            check_half_matmul::<B>(&Default::default());
        }

        #[test]
        fn grouped_half_matmul_matches_plain_loops() {
            check_grouped_half_matmul::<B>(&Default::default());
        }

        #[test]
        fn delta_rule_matches_its_definition() {
            check_delta_rule::<B>(&Default::default());
        }
    };
    ($name:ident, $backend:ty, $about:literal) => {
        mod $name {
            use super::*;
            backend_suite!(tests: $backend, stringify!($name));
        }
    };
}

decider_ops::for_each_backend!(backend_suite);

/// The suite through `Autodiff`, over ndarray: the wrapper is one generic impl for every inner
/// backend (`crates/ops/src/backends/autodiff.rs`: the inner kernel, or the generic form through
/// autodiff's ops on the inner backend's storage). Over candle and wgpu it is not run: the plain
/// suites above call every generic form by name on those backends' own storage, which is what the
/// wrapper runs there less the gradient tracking, and on wgpu's software driver the tracked suite
/// took minutes.
#[cfg(all(feature = "autodiff", feature = "ndarray"))]
mod autodiff {
    use super::*;
    backend_suite!(tests: burn::backend::Autodiff<decider_ops::backend_list::NdArray>, "ndarray");
}
