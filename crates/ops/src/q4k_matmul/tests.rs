//! `q4k_matmul` on every backend of the build (and through `Autodiff`) against plain loops on
//! llama.cpp's dequantization, and its parts against that dequantization bit for bit.

use crate::test_support::*;
use crate::{
    GgmlType, block_scales, dequantize_q4k, grouped_q4k_matmul, join_q4_k, q4_rows, q4_values, q4k_matmul,
    quantize_q4_k, split_q4_k,
};
use burn::tensor::{Int, Tensor, TensorData, TensorPrimitive};
use half::f16;

use super::{QK_K, generic};

#[test]
fn q4_k_parts_are_llama_cpp_dequantization_bit_for_bit() {
    let mut rng = Rng(61);
    let (bytes, weights) = k_blocks(&mut rng, GgmlType::Q4K, 300);
    let (packed, supers, subs) = split_q4_k(&bytes);
    assert_eq!((packed.len(), supers.len(), subs.len()), (300 * 128, 300 * 2, 300 * 16));
    assert!(subs.iter().all(|&s| s < 64), "6-bit scales and mins");
    let ours = dequantize_q4k(&packed, &supers, &subs);
    for (i, (ours, theirs)) in ours.iter().zip(&weights).enumerate() {
        assert_eq!(ours.to_bits(), theirs.to_bits(), "value {i}: {ours} vs llama.cpp's {theirs}");
    }
}

#[test]
fn joining_the_parts_gives_back_the_blocks() {
    let mut rng = Rng(62);
    let (bytes, _) = k_blocks(&mut rng, GgmlType::Q4K, 300);
    let (packed, supers, subs) = split_q4_k(&bytes);
    assert_eq!(join_q4_k(&packed, &supers, &subs), bytes);
}

/// The quantizer is held to llama.cpp's bytes by `tests/gguf.rs`; here, that its blocks stand
/// for the weights: within half a step of each block's grid (plus the 6-bit scales' rounding).
#[test]
fn quantized_blocks_stand_for_the_weights() {
    let mut rng = Rng(63);
    let weights: Vec<f32> = (0..64 * QK_K).map(|_| (rng.next_f32() - 0.5) * 0.04).collect();
    let bytes = quantize_q4_k(&weights);
    assert_eq!(bytes.len(), 64 * GgmlType::Q4K.block_bytes());
    let mut back = vec![0f32; weights.len()];
    GgmlType::Q4K.dequantize(&bytes, &mut back);
    let error: f32 = weights.iter().zip(&back).map(|(w, b)| (w - b).powi(2)).sum::<f32>() / weights.len() as f32;
    let power: f32 = weights.iter().map(|w| w * w).sum::<f32>() / weights.len() as f32;
    // 4 bits over a block's range: about 1/225 of the power for uniform weights; a wrong
    // nibble order or scale packing gives errors of the weights' own size.
    assert!(error < power / 100.0, "mean squared error {error} against mean square {power}");
}

/// The tensors of a Q4_K weight `[..., out, in]` from a file's blocks: the values in the
/// kernel's layout and in Q4_0's order (the generic form's), the supers, the subs.
type Parts<B, const D: usize> = (Tensor<B, D, Int>, Tensor<B, D, Int>, Tensor<B, D, Int>, Tensor<B, D, Int>);

fn parts<B: Ops, const D: usize>(bytes: &[u8], dims: [usize; D], device: &B::Device) -> Parts<B, D> {
    let (packed, supers, subs) = split_q4_k(bytes);
    let d_in = dims[D - 1];
    let with = |width| {
        let mut shape = dims;
        shape[D - 1] = width;
        shape
    };
    (
        q4_values::<B, D>(packed.clone(), with(d_in / 2), device),
        q4_rows::<B, D>(packed, with(d_in / 2), device),
        block_scales::<B, D>(supers, with(d_in / QK_K * 2), device),
        q4_rows::<B, D>(subs, with(d_in / 32 * 2), device),
    )
}

fn q4k_matmul_matches_plain_loops<B: Ops>(device: &B::Device) {
    let mut rng = Rng(67);
    for (n, d_out, d_in) in K_SHAPES {
        let (bytes, weights) = k_blocks(&mut rng, GgmlType::Q4K, d_out * d_in / QK_K);
        let (x, _) = block_case(&mut rng, n, 0, d_in);
        let (expected, magnitude) =
            naive_block_matmul(&round_by_rule(&x, 127.0), n, d_out, d_in, |o, i| weights[o * d_in + i] as f64);
        let x_t = Tensor::<B, 2>::from_data(TensorData::new(x, [n, d_in]), device);
        let (values, plain, supers, subs) = parts::<B, 2>(&bytes, [d_out, d_in], device);
        let kernel = q4k_matmul(x_t.clone(), values, supers.clone(), subs.clone());
        let generic = generic::q4k_matmul(x_t, plain, supers, subs);
        for (name, out) in [("kernel", kernel), ("generic", generic)] {
            assert_eq!(out.dims(), [n, d_out], "{name}, {n}x{d_out}x{d_in}");
            let out: Vec<f32> = out.into_data().convert::<f32>().to_vec().unwrap();
            check_outputs(&format!("q4_k {name}, {n}x{d_out}x{d_in}"), &out, &expected, &magnitude);
        }
    }
}

fn grouped_q4k_matmul_matches_plain_loops<B: Ops>(device: &B::Device) {
    let mut rng = Rng(71);
    let cases: [(&[usize], usize, usize); 4] =
        [(&[0, 0], 256, 3), (&[0, 70, 0], 256, 17), (&[3, 0, 8, 1, 5], 512, 40), (&[1], 2048, 5)];
    for (counts, d_in, d_out) in cases {
        let (rows, experts) = (counts.iter().sum::<usize>(), counts.len());
        let (bytes, weights) = k_blocks(&mut rng, GgmlType::Q4K, experts * d_out * d_in / QK_K);
        let (x, _) = block_case(&mut rng, rows, 0, d_in);
        let rounded = round_by_rule(&x, 127.0);
        let (mut expected, mut magnitude) = (Vec::new(), Vec::new());
        let mut first = 0;
        for (e, &c) in counts.iter().enumerate() {
            let (out, size) = naive_block_matmul(&rounded[first * d_in..(first + c) * d_in], c, d_out, d_in, |o, i| {
                weights[(e * d_out + o) * d_in + i] as f64
            });
            expected.extend(out);
            magnitude.extend(size);
            first += c;
        }
        let x_t = Tensor::<B, 2>::from_data(TensorData::new(x, [rows, d_in]), device);
        let (values, _, supers, subs) = parts::<B, 3>(&bytes, [experts, d_out, d_in], device);
        let counts_t = counts_tensor::<B>(counts, device);
        let kernel = grouped_q4k_matmul(x_t.clone(), values.clone(), supers.clone(), subs.clone(), counts_t.clone());
        let generic = generic::grouped_q4k_matmul::<B>(
            x_t.into_primitive().tensor(),
            values.into_primitive(),
            supers.into_primitive(),
            subs.into_primitive(),
            counts_t.into_primitive(),
        );
        let name = format!("{counts:?}, {d_in} -> {d_out}");
        for (form, out) in [("kernel", kernel), ("generic", Tensor::from_primitive(TensorPrimitive::Float(generic)))] {
            assert_eq!(out.dims(), [rows, d_out], "{form}, {name}");
            let out = out.into_data().convert::<f32>().to_vec::<f32>().unwrap();
            check_outputs(&format!("q4_k {form}, {name}"), &out, &expected, &magnitude);
        }
    }
}

#[test]
fn q4_k_zero_block_scales_are_zero_weights() {
    let (packed, supers, subs) = (vec![0x5a; 128], vec![f16::ZERO; 2], vec![63; 16]);
    assert!(dequantize_q4k(&packed, &supers, &subs).iter().all(|&w| w == 0.0));
}

#[test]
fn every_cpu_q4k_kernel_matches_plain_loops() {
    #[cfg(target_arch = "x86_64")]
    use crate::cpu::integer_dot as dot;
    use crate::{q4k_matmul::cpu::dequantized_q4k_matmul, round_activations};
    let mut rng = Rng(89);
    for (n, d_out, d_in) in K_SHAPES {
        let (bytes, weights) = k_blocks(&mut rng, GgmlType::Q4K, d_out * d_in / QK_K);
        let (x, _) = block_case(&mut rng, n, 0, d_in);
        let (expected, magnitude) =
            naive_block_matmul(&round_by_rule(&x, 127.0), n, d_out, d_in, |o, i| weights[o * d_in + i] as f64);
        let (packed, supers, subs) = split_q4_k(&bytes);
        let name = format!("{n}x{d_out}x{d_in}");
        let rounded = round_activations(&x, d_in, crate::Q4_ACTIVATION_BITS);
        let out = dequantized_q4k_matmul(&rounded, n, &packed, &supers, &subs, d_out, d_in);
        check_outputs(&format!("q4_k dequantized, {name}"), &out, &expected, &magnitude);
        #[cfg(target_arch = "x86_64")]
        for isa in integer_dots() {
            let laid_out = dot::q4_layout(isa, &packed, d_out, d_in);
            let out = dot::q4k_matmul(isa, &x, n, &laid_out, &supers, &subs, d_out, d_in);
            check_outputs(&format!("q4_k {isa:?}, {name}"), &out, &expected, &magnitude);
        }
    }
}

crate::test_support::backend_tests!(q4k_matmul_matches_plain_loops, grouped_q4k_matmul_matches_plain_loops);
