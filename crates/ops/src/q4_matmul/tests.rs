//! `q4_matmul` on every backend of the build (and through `Autodiff`) against plain loops and its
//! generic form.

use crate::test_support::*;
use crate::{
    Q4_BLOCK, block_scales, dequantize_q4, generic, grouped_q4_matmul, q4_matmul, q4_rows, q4_values, quantize_q4,
    reference,
};
use burn::tensor::{Tensor, TensorData, TensorPrimitive};
use half::f16;

fn q4_matmul_matches_plain_loops<B: Ops>(device: &B::Device) {
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

fn grouped_q4_matmul_matches_plain_loops<B: Ops>(device: &B::Device) {
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

crate::test_support::backend_tests!(q4_matmul_matches_plain_loops, grouped_q4_matmul_matches_plain_loops);
