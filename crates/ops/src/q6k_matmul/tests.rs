//! `q6k_matmul` on every backend of the build (and through `Autodiff`) against plain loops on
//! llama.cpp's dequantization, and its parts against that dequantization bit for bit.

use crate::test_support::*;
use crate::{
    ActivationBits, GgmlType, Q6K_BLOCK, block_scales, dequantize_q6k, grouped_q6k_matmul, q6k_matmul, q8_rows,
    q8_values, split_q3_k, split_q6_k,
};
use burn::tensor::{Int, Tensor, TensorData, TensorPrimitive};

use super::{QK_K, generic};

const BITS: [ActivationBits; 2] = [ActivationBits::Eight, ActivationBits::Sixteen];

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

#[test]
fn q3_k_blocks_are_q6_k_parts_of_llama_cpps_values_bit_for_bit() {
    let mut rng = Rng(74);
    let (bytes, weights) = k_blocks(&mut rng, GgmlType::Q3K, 300);
    let (values, supers, subs) = split_q3_k(&bytes);
    assert_eq!((values.len(), supers.len(), subs.len()), (300 * 256, 300, 300 * 16));
    assert!(values.iter().all(|&q| (-4..4).contains(&q)), "3-bit values less 4");
    assert!(subs.iter().all(|&s| (-32..32).contains(&s)), "6-bit scales less 32");
    let ours = dequantize_q6k(&values, &supers, &subs);
    for (i, (ours, theirs)) in ours.iter().zip(&weights).enumerate() {
        assert_eq!(ours.to_bits(), theirs.to_bits(), "value {i}: {ours} vs llama.cpp's {theirs}");
    }
}

/// The tensors of a Q6_K weight `[..., out, in]` from a file's blocks: the values in the
/// kernel's layout and in row order (the generic form's), the supers, the subs.
type Parts<B, const D: usize> = (Tensor<B, D, Int>, Tensor<B, D, Int>, Tensor<B, D, Int>, Tensor<B, D, Int>);

fn parts<B: Ops, const D: usize>(bytes: &[u8], dims: [usize; D], device: &B::Device) -> Parts<B, D> {
    let (values, supers, subs) = split_q6_k(bytes);
    let d_in = dims[D - 1];
    let with = |width| {
        let mut shape = dims;
        shape[D - 1] = width;
        shape
    };
    (
        q8_values::<B, D>(values.clone(), dims, device),
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
        let x_t = Tensor::<B, 2>::from_data(TensorData::new(x.clone(), [n, d_in]), device);
        let (values, plain, supers, subs) = parts::<B, 2>(&bytes, [d_out, d_in], device);
        for bits in BITS {
            let (expected, magnitude) =
                naive_block_matmul(&round_by_rule(&x, largest(bits)), n, d_out, d_in, |o, i| {
                    weights[o * d_in + i] as f64
                });
            let kernel = q6k_matmul(x_t.clone(), values.clone(), supers.clone(), subs.clone(), bits);
            let generic = generic::q6k_matmul(x_t.clone(), plain.clone(), supers.clone(), subs.clone(), bits);
            for (name, out) in [("kernel", kernel), ("generic", generic)] {
                assert_eq!(out.dims(), [n, d_out], "{name}, {n}x{d_out}x{d_in}");
                let out: Vec<f32> = out.into_data().convert::<f32>().to_vec().unwrap();
                check_outputs(&format!("q6_k {name}, {bits:?}, {n}x{d_out}x{d_in}"), &out, &expected, &magnitude);
            }
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
        let x_t = Tensor::<B, 2>::from_data(TensorData::new(x.clone(), [rows, d_in]), device);
        let (values, _, supers, subs) = parts::<B, 3>(&bytes, [experts, d_out, d_in], device);
        let counts_t = counts_tensor::<B>(counts, device);
        for bits in BITS {
            let rounded = round_by_rule(&x, largest(bits));
            let (mut expected, mut magnitude) = (Vec::new(), Vec::new());
            let mut first = 0;
            for (e, &c) in counts.iter().enumerate() {
                let x = &rounded[first * d_in..(first + c) * d_in];
                let (out, size) =
                    naive_block_matmul(x, c, d_out, d_in, |o, i| weights[(e * d_out + o) * d_in + i] as f64);
                expected.extend(out);
                magnitude.extend(size);
                first += c;
            }
            let kernel =
                grouped_q6k_matmul(x_t.clone(), values.clone(), supers.clone(), subs.clone(), counts_t.clone(), bits);
            let generic = generic::grouped_q6k_matmul::<B>(
                x_t.clone().into_primitive().tensor(),
                values.clone().into_primitive(),
                supers.clone().into_primitive(),
                subs.clone().into_primitive(),
                counts_t.clone().into_primitive(),
                bits,
            );
            let name = format!("{counts:?}, {d_in} -> {d_out}, {bits:?}");
            for (form, out) in
                [("kernel", kernel), ("generic", Tensor::from_primitive(TensorPrimitive::Float(generic)))]
            {
                assert_eq!(out.dims(), [rows, d_out], "{form}, {name}");
                let out = out.into_data().convert::<f32>().to_vec::<f32>().unwrap();
                check_outputs(&format!("q6_k {form}, {name}"), &out, &expected, &magnitude);
            }
        }
    }
}

#[test]
fn every_cpu_q6k_kernel_matches_plain_loops() {
    #[cfg(target_arch = "x86_64")]
    use crate::cpu::integer_dot as dot;
    use crate::{q6k_matmul::cpu::dequantized_q6k_matmul, round_activations};
    let mut rng = Rng(97);
    for (n, d_out, d_in) in K_SHAPES {
        let (bytes, weights) = k_blocks(&mut rng, GgmlType::Q6K, d_out * d_in / QK_K);
        let (x, _) = block_case(&mut rng, n, 0, d_in);
        let (values, supers, subs) = split_q6_k(&bytes);
        for bits in BITS {
            let (expected, magnitude) =
                naive_block_matmul(&round_by_rule(&x, largest(bits)), n, d_out, d_in, |o, i| {
                    weights[o * d_in + i] as f64
                });
            let name = format!("{n}x{d_out}x{d_in}, {bits:?}");
            let rounded = round_activations(&x, d_in, bits);
            let out = dequantized_q6k_matmul(&rounded, n, &values, &supers, &subs, d_out, d_in);
            check_outputs(&format!("q6_k dequantized, {name}"), &out, &expected, &magnitude);
            #[cfg(target_arch = "x86_64")]
            for isa in integer_dots() {
                let laid_out = dot::q8_layout(isa, &values, d_out, d_in);
                let out = dot::q6k_matmul(isa, &x, n, &laid_out, &supers, &subs, d_out, d_in, bits);
                check_outputs(&format!("q6_k {isa:?}, {name}"), &out, &expected, &magnitude);
            }
        }
    }
}

crate::test_support::backend_tests!(q6k_matmul_matches_plain_loops, grouped_q6k_matmul_matches_plain_loops);
