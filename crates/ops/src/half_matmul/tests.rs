//! `half_matmul` on every backend of the build (and through `Autodiff`) against plain loops and its
//! generic form.

use crate::test_support::*;
use crate::{
    Half, generic, grouped_half_float_matmul, grouped_half_matmul, half_bits, half_bits_f32, half_float_matmul,
    half_floats, half_matmul, holds_half_floats, round_to_bf16,
};
use burn::tensor::{Tensor, TensorData, TensorPrimitive};
use half::{bf16, f16};

/// Every finite bf16 (subnormals, both zeros and the largest of each sign included), stored in
/// the backend's dtype for 16-bit patterns and read back as f32, equals `half`'s conversion.
/// (Every finite f16 is checked through [`block_scales_read_back_as_their_f16_values`].)
fn bf16_patterns_read_back_as_their_values<B: Ops>(device: &B::Device) {
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
fn half_floats_read_back_as_their_values<B: Ops>(device: &B::Device) {
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
    assert!(holds_half_floats::<crate::backend_list::Candle>(Half::F16, &device));
    assert!(holds_half_floats::<crate::backend_list::Candle>(Half::Bf16, &device));
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

fn half_matmul_matches_plain_loops<B: Ops>(device: &B::Device) {
    let mut rng = Rng(53);
    for half in [Half::F16, Half::Bf16] {
        for (n, d_out, d_in) in HALF_SHAPES {
            let (x, bits) = half_case(&mut rng, n, d_out, d_in, half);
            let (expected, magnitude) = naive_half_matmul(&x, n, &bits, half, d_out, d_in);
            let rounded = naive_half_matmul(&round_to_bf16(&x), n, &bits, half, d_out, d_in);
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
                let (expected, magnitude) = match name.ends_with("kernel") && B::rounds_activations(half) {
                    true => (&rounded.0, &rounded.1),
                    false => (&expected, &magnitude),
                };
                check_outputs(&format!("{half:?} {name}, {n}x{d_out}x{d_in}"), &out, expected, magnitude);
            }
        }
    }
}

fn grouped_half_matmul_matches_plain_loops<B: Ops>(device: &B::Device) {
    let mut rng = Rng(59);
    for half in [Half::F16, Half::Bf16] {
        for (name, counts, d_in, d_out) in GROUPED_CASES {
            let (rows, experts) = (counts.iter().sum::<usize>(), counts.len());
            let cases: Vec<_> = counts.iter().map(|&c| half_case(&mut rng, c, d_out, d_in, half)).collect();
            // Of the activations as they are, and rounded to bf16.
            let [mut plain, mut rounded] = [(); 2].map(|_| (Vec::new(), Vec::new()));
            for ((x, bits), &c) in cases.iter().zip(counts) {
                for ((expected, magnitude), x) in [(&mut plain, x.clone()), (&mut rounded, round_to_bf16(x))] {
                    let (out, size) = naive_half_matmul(&x, c, bits, half, d_out, d_in);
                    expected.extend(out);
                    magnitude.extend(size);
                }
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
                // The generic grouped forms run the backend's product per expert, so they round too.
                let (expected, magnitude) = match B::rounds_activations(half) {
                    true => &rounded,
                    false => &plain,
                };
                check_outputs(
                    &format!("{half:?} {form}, {name}"),
                    &out.into_data().convert::<f32>().to_vec::<f32>().unwrap(),
                    expected,
                    magnitude,
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

/// Rounding to bf16 is `half`'s rule (nearest, ties to even; NaN stays NaN) on every f32 high
/// half with low halves below, at, just above and past the tie, and at the ends.
#[test]
fn rounding_to_bf16_is_halfs_rule() {
    for high in 0..=u16::MAX as u32 {
        for low in [0u32, 1, 0x7fff, 0x8000, 0x8001, 0xc000, 0xffff] {
            let x = f32::from_bits(high << 16 | low);
            let want = bf16::from_f32(x).to_bits();
            let got = crate::half_matmul::bf16_of(x);
            assert!(
                got == want || (x.is_nan() && bf16::from_bits(got).is_nan()),
                "{x:e} ({:#010x}): {got:#06x}, not {want:#06x}",
                x.to_bits()
            );
            let widened = round_to_bf16(&[x])[0];
            assert!(widened.to_bits() == u32::from(got) << 16, "{x:e}: widened {widened:e}");
        }
    }
}

/// The shapes of [`HALF_SHAPES`] and ones at the bf16 dot's edges: rows and tokens on both sides
/// of its 4 × 6 tile, inputs below, at and past one 32-value step, decider-2b's widths, and 2,085
/// inputs: several of the FMA kernel's blocks of inputs, the last with a tail.
#[cfg(feature = "cpu-kernels")]
const BF16_SHAPES: [(usize, usize, usize); 11] = [
    (6, 4, 32),
    (5, 3, 31),
    (7, 5, 33),
    (13, 9, 65),
    (12, 8, 64),
    (1, 257, 2048),
    (19, 130, 1000),
    (2, 2, 1),
    (64, 60, 512),
    (40, 48, 6144),
    (7, 9, 2085),
];

/// Every CPU form of the bf16 product on the activations rounded to bf16, whichever this CPU
/// would choose: each bf16 dot this CPU runs (saying which it cannot) and the widened sgemm; and
/// `half_matmul` itself rounds on every CPU.
#[cfg(feature = "cpu-kernels")]
#[test]
fn every_cpu_bf16_form_matches_plain_loops_on_rounded_activations() {
    use crate::half_matmul::cpu::{half_matmul, widened_half_matmul};
    #[cfg(target_arch = "x86_64")]
    let dots = {
        use crate::cpu::bf16_dot::Bf16Isa;
        let (run, skip): (Vec<Bf16Isa>, Vec<Bf16Isa>) = Bf16Isa::ALL.into_iter().partition(|isa| isa.available());
        for isa in skip {
            println!("this CPU does not run {isa:?}: that bf16 dot is not checked here");
        }
        run
    };
    let mut rng = Rng(61);
    for (n, d_out, d_in) in HALF_SHAPES.into_iter().chain(BF16_SHAPES) {
        let (x, bits) = half_case(&mut rng, n, d_out, d_in, Half::Bf16);
        let rounded = round_to_bf16(&x);
        let (expected, magnitude) = naive_half_matmul(&rounded, n, &bits, Half::Bf16, d_out, d_in);
        let name = format!("{n}x{d_out}x{d_in}");
        let mut forms = vec![
            ("half_matmul", half_matmul(&x, n, &bits, Half::Bf16, d_out, d_in)),
            ("widened", widened_half_matmul(&rounded, n, &bits, Half::Bf16, d_out, d_in)),
        ];
        #[cfg(target_arch = "x86_64")]
        for &isa in &dots {
            forms.push((isa.about(), crate::cpu::bf16_dot::bf16_matmul(isa, &x, n, &bits, d_out, d_in)));
        }
        for (form, out) in forms {
            check_outputs(&format!("{form}, {name}"), &out, &expected, &magnitude);
        }
    }
}

crate::test_support::backend_tests!(
    bf16_patterns_read_back_as_their_values,
    half_floats_read_back_as_their_values,
    half_matmul_matches_plain_loops,
    grouped_half_matmul_matches_plain_loops
);
