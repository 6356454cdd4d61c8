//! `q6k_matmul` on every backend of the build (and through `Autodiff`) against plain loops on
//! llama.cpp's dequantization, and its parts against that dequantization bit for bit.

use crate::test_support::*;
use crate::{GgmlType, Q6K_BLOCK, block_scales, dequantize_q6k, grouped_q6k_matmul, q6k_matmul, q8_rows, split_q6_k};
use burn::tensor::{Int, Tensor, TensorData, TensorPrimitive};

use super::{QK_K, generic};

#[test]
fn q6_k_parts_are_llama_cpp_dequantization_bit_for_bit() {
    let mut rng = Rng(73);
    let (bytes, weights) = k_blocks(&mut rng, GgmlType::Q6K, 300);
    let (values, supers, subs) = split_q6_k(&bytes);
    assert_eq!((values.len(), supers.len(), subs.len()), (300 * 256, 300, 300 * 16));
    assert!(values.iter().all(|&q| (-32..32).contains(&q)), "6-bit values less 32");
    let ours = dequantize_q6k(&values, &supers, &subs);
    for (i, (ours, theirs)) in ours.iter().zip(&weights).enumerate() {
        assert_eq!(ours.to_bits(), theirs.to_bits(), "value {i}: {ours} vs llama.cpp's {theirs}");
    }
}

/// The tensors `(values, supers, subs)` of a Q6_K weight `[..., out, in]` from a file's blocks.
fn parts<B: Ops, const D: usize>(
    bytes: &[u8],
    dims: [usize; D],
    device: &B::Device,
) -> (Tensor<B, D, Int>, Tensor<B, D, Int>, Tensor<B, D, Int>) {
    let (values, supers, subs) = split_q6_k(bytes);
    let d_in = dims[D - 1];
    let with = |width| {
        let mut shape = dims;
        shape[D - 1] = width;
        shape
    };
    (
        q8_rows::<B, D>(values, dims, device),
        block_scales::<B, D>(supers, with(d_in / QK_K), device),
        q8_rows::<B, D>(subs, with(d_in / Q6K_BLOCK), device),
    )
}

fn q6k_matmul_matches_plain_loops<B: Ops>(device: &B::Device) {
    let mut rng = Rng(79);
    for (n, d_out, d_in) in K_SHAPES {
        let (bytes, weights) = k_blocks(&mut rng, GgmlType::Q6K, d_out * d_in / QK_K);
        let (x, _) = block_case(&mut rng, n, 0, d_in);
        let exact: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        let (expected, magnitude) = naive_block_matmul(&exact, n, d_out, d_in, |o, i| weights[o * d_in + i] as f64);
        let x_t = Tensor::<B, 2>::from_data(TensorData::new(x, [n, d_in]), device);
        let (values, supers, subs) = parts::<B, 2>(&bytes, [d_out, d_in], device);
        let kernel = q6k_matmul(x_t.clone(), values.clone(), supers.clone(), subs.clone());
        let generic = generic::q6k_matmul(x_t, values, supers, subs);
        for (name, out) in [("kernel", kernel), ("generic", generic)] {
            assert_eq!(out.dims(), [n, d_out], "{name}, {n}x{d_out}x{d_in}");
            let out: Vec<f32> = out.into_data().convert::<f32>().to_vec().unwrap();
            check_outputs(&format!("q6_k {name}, {n}x{d_out}x{d_in}"), &out, &expected, &magnitude);
        }
    }
}

fn grouped_q6k_matmul_matches_plain_loops<B: Ops>(device: &B::Device) {
    let mut rng = Rng(83);
    let cases: [(&[usize], usize, usize); 3] = [(&[0, 0], 256, 3), (&[0, 70, 0], 256, 17), (&[3, 0, 8, 1, 5], 512, 40)];
    for (counts, d_in, d_out) in cases {
        let (rows, experts) = (counts.iter().sum::<usize>(), counts.len());
        let (bytes, weights) = k_blocks(&mut rng, GgmlType::Q6K, experts * d_out * d_in / QK_K);
        let (x, _) = block_case(&mut rng, rows, 0, d_in);
        let exact: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        let (mut expected, mut magnitude) = (Vec::new(), Vec::new());
        let mut first = 0;
        for (e, &c) in counts.iter().enumerate() {
            let (out, size) = naive_block_matmul(&exact[first * d_in..(first + c) * d_in], c, d_out, d_in, |o, i| {
                weights[(e * d_out + o) * d_in + i] as f64
            });
            expected.extend(out);
            magnitude.extend(size);
            first += c;
        }
        let x_t = Tensor::<B, 2>::from_data(TensorData::new(x, [rows, d_in]), device);
        let (values, supers, subs) = parts::<B, 3>(&bytes, [experts, d_out, d_in], device);
        let counts_t = counts_tensor::<B>(counts, device);
        let kernel = grouped_q6k_matmul(x_t.clone(), values.clone(), supers.clone(), subs.clone(), counts_t.clone());
        let generic = generic::grouped_q6k_matmul::<B>(
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
            check_outputs(&format!("q6_k {form}, {name}"), &out, &expected, &magnitude);
        }
    }
}

crate::test_support::backend_tests!(q6k_matmul_matches_plain_loops, grouped_q6k_matmul_matches_plain_loops);
