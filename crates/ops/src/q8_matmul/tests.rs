//! `q8_matmul` on every backend of the build (and through `Autodiff`) against plain loops and its
//! generic form.

use super::round_half_away;
use crate::test_support::*;
use crate::{
    ActivationBits, BlockInts, Q4_ACTIVATION_BITS, Q8_BLOCK, block_scales, block_scales_f32, dequantize_q8, generic,
    grouped_q8_matmul, q8_matmul, q8_rows, q8_values, q8_values_f32, quantize_q4, quantize_q8,
};
use burn::tensor::{Tensor, TensorData, TensorPrimitive};
use half::f16;

/// Every f16 a scale can be (finite, of either sign: subnormals, both zeros and the largest
/// included), stored as the backend holds scales and read back as f32, equals `half`'s
/// conversion. Rows of an odd 31 scales: where the bytes are packed four to an int, each row ends
/// in a padded int.
fn block_scales_read_back_as_their_f16_values<B: Ops>(device: &B::Device) {
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
fn q8_values_read_back_as_themselves<B: Ops>(device: &B::Device) {
    let values: Vec<i8> = (-127..=127).chain([0]).collect();
    let held = q8_rows::<B, 2>(values.clone(), [values.len() / 4, 4], device);
    assert_eq!(held.dims(), B::block_storage().shape(BlockInts::Q8Values, [values.len() / 4, 4]));
    assert_eq!(held.dtype(), B::block_storage().dtype::<B>(BlockInts::Q8Values));
    let read: Vec<f32> = q8_values_f32(held).into_data().convert::<f32>().to_vec().unwrap();
    assert_eq!(read, values.iter().map(|&v| f32::from(v)).collect::<Vec<_>>());
}

fn q8_matmul_matches_plain_loops<B: Ops>(device: &B::Device) {
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

fn grouped_q8_matmul_matches_plain_loops<B: Ops>(device: &B::Device) {
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

/// Every CPU form of the q8 and q4 matmuls, whichever this CPU would choose: each integer dot this
/// CPU runs (AVX-512 VNNI, AVX2; the test says which it cannot) and the dequantized sgemm.
#[cfg(feature = "cpu-kernels")]
#[test]
fn both_cpu_block_kernels_match_plain_loops() {
    #[cfg(target_arch = "x86_64")]
    use crate::cpu::integer_dot as dot;
    use crate::round_activations;
    use crate::{q4_matmul::cpu::dequantized_q4_matmul, q8_matmul::cpu::dequantized_q8_matmul};
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
            let dequantized = dequantized_q8_matmul(&rounded, n, &values, &scales, d_out, d_in);
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
        let q4_dequantized = dequantized_q4_matmul(&rounded, n, &packed, &q4_scales, d_out, d_in);
        check_outputs(&format!("q4 dequantized, {name}"), &q4_dequantized, &q4_expected, &q4_magnitude);
        #[cfg(target_arch = "x86_64")]
        for &isa in &dots {
            let laid_out = dot::q4_layout(isa, &packed, d_out, d_in);
            let out = dot::q4_matmul(isa, &x, n, &laid_out, &q4_scales, d_out, d_in);
            check_outputs(&format!("q4 {isa:?}, {name}"), &out, &q4_expected, &q4_magnitude);
        }
    }
}

#[test]
fn activations_round_to_8_and_16_bit_blocks() {
    use crate::round_activations;
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

fn generic_rounding_takes_ties_to_even<B: Ops>(device: &B::Device) {
    // Scale 1 (the block's largest is 127): the halves are ties, to the even neighbour.
    let mut x = vec![0.0f32; crate::Q8_BLOCK];
    x[..8].copy_from_slice(&[127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.4]);
    let x_t = Tensor::<B, 2>::from_data(TensorData::new(x, [1, crate::Q8_BLOCK]), device);
    let rounded = crate::q8_matmul::generic::round_activations(x_t, ActivationBits::Eight);
    let rounded: Vec<f32> = rounded.into_data().convert::<f32>().to_vec().unwrap();
    assert_eq!(&rounded[..8], &[127.0, 0.0, 2.0, 2.0, 0.0, -2.0, -2.0, 3.0]);
}

crate::test_support::backend_tests!(
    generic_rounding_takes_ties_to_even,
    block_scales_read_back_as_their_f16_values,
    q8_values_read_back_as_themselves,
    q8_matmul_matches_plain_loops,
    grouped_q8_matmul_matches_plain_loops
);

#[test]
fn rounding_is_half_away_from_zero_as_roundf() {
    let mut values =
        vec![0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 126.5, -126.5, 127.0, -127.0, 127.49, f32::MIN_POSITIVE];
    // Either side of every half step, and a sweep of the range a block's values take.
    for k in -128..128 {
        let half = k as f32 + 0.5;
        values.extend([half.next_down(), half, half.next_up()]);
    }
    values.extend((0..100_000).map(|i| -128.0 + i as f32 * 0.00256));
    for x in values {
        assert_eq!(round_half_away(x), x.round() as i32, "{x:e}");
    }
}

#[test]
fn blocks_too_small_for_their_scale_quantize_to_zero_scales() {
    // `1 / d` overflows to infinity: the values stay in range and the f16 scale is 0.
    let mut block = [0.0f32; 32];
    block[3] = 1e-40;
    block[7] = -3e-41;
    let mut values = [0i8; 32];
    let scale = super::quantize_q8_block(&block, &mut values);
    assert_eq!(scale.to_f32(), 0.0);
    assert!(values.iter().all(|v| (-127..=127).contains(v)), "{values:?}");
}
