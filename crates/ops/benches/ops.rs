//! Specialised kernel vs generic tensor-op implementation vs naive tensor-op baseline, per
//! backend, at the shapes of the seed: expert counts of 8 ids into 64 experts, 1,024 into 128,
//! 944 into 256 and 65,536 into 256; inverses of 32 heads x 10 chunks and 32 x 64 chunks of
//! 64x64 systems built like the delta rule's (entries near 1); the Q8_0 matmul at a 2B model's
//! widest projection (2048 -> 6144) for 64 and 512 tokens, against burn's f32 matmul of the same
//! shape; the grouped matmuls of an MoE layer (64 experts of 35B-A3B's gate/up projection, 2048
//! -> 1024, in f32 and Q8_0) with the 4 and 16 rows an expert gets from 128 and 512 prompt
//! tokens, against their generic form (the backend's dense product per expert). On x86-64, the
//! CPU forms of the Q8_0 matmul side by side (`q8_matmul/cpu.rs`, `cpu/integer_dot/`): the dequantized sgemm and each integer dot
//! the CPU runs.
//!
//! Run: `cargo bench -p decider-ops --bench ops --features candle,wgpu` (or `cargo xtask bench`). Each group measures the
//! three implementations in the same run, so the ratios are what to read.

use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Int, Tensor, TensorData};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use decider_ops::{
    ActivationBits, DenseMatmul, ExpertCount, Q8_BLOCK, Q8Matmul, UnitLowerInverse, block_scales, dense_matmul,
    expert_count, generic, grouped_matmul, grouped_q8_matmul, q8_matmul, q8_values, quantize_q8, reference,
    unit_lower_inverse,
};

/// `(beta k) k^T * decay` for unit keys that share a strong common direction, strictly lower.
fn delta_rule_systems<B: Backend>(batch: usize, device: &B::Device) -> Tensor<B, 3> {
    let (n, d) = (64, 128);
    let noise = Tensor::<B, 3>::random([batch, n, d], Distribution::Normal(0.0, 0.1), device);
    let keys = noise.add_scalar(0.3);
    let keys = keys.clone() / keys.powi_scalar(2).sum_dim(2).sqrt();
    let beta = Tensor::<B, 3>::random([batch, n, 1], Distribution::Uniform(0.5, 1.0), device);
    (keys.clone() * beta).matmul(keys.swap_dims(1, 2)).tril(-1)
}

fn bench_backend<B: ExpertCount + UnitLowerInverse + Q8Matmul + DenseMatmul>(c: &mut Criterion, backend: &str) {
    let device = B::Device::default();
    let sync = || B::sync(&device).expect("device sync");

    let mut group = c.benchmark_group(format!("{backend}/expert_count"));
    for (ids, experts) in [(8, 64), (1024, 128), (944, 256), (65_536, 256)] {
        let input = Tensor::<B, 1, Int>::random([ids], Distribution::Uniform(0.0, experts as f64), &device);
        let shape = format!("{ids}_into_{experts}");
        group.bench_with_input(BenchmarkId::new("specialised", &shape), &input, |b, x| {
            b.iter(|| {
                let _ = expert_count(x.clone(), experts);
                sync()
            })
        });
        group.bench_with_input(BenchmarkId::new("generic", &shape), &input, |b, x| {
            b.iter(|| {
                let _ = generic::expert_count(x.clone(), experts);
                sync()
            })
        });
        group.bench_with_input(BenchmarkId::new("naive_per_bin", &shape), &input, |b, x| {
            b.iter(|| {
                let _ = reference::expert_count_per_bin(x.clone(), experts);
                sync()
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group(format!("{backend}/unit_lower_inverse_64x64"));
    group.sample_size(10);
    for chunks in [10, 64] {
        let input = delta_rule_systems::<B>(32 * chunks, &device);
        sync();
        let shape = format!("32x{chunks}");
        group.bench_with_input(BenchmarkId::new("specialised", &shape), &input, |b, x| {
            b.iter(|| {
                let _ = unit_lower_inverse(x.clone());
                sync()
            })
        });
        group.bench_with_input(BenchmarkId::new("generic", &shape), &input, |b, x| {
            b.iter(|| {
                let _ = generic::unit_lower_inverse(x.clone());
                sync()
            })
        });
        group.bench_with_input(BenchmarkId::new("naive_by_rows", &shape), &input, |b, x| {
            b.iter(|| {
                let _ = reference::unit_lower_inverse_by_rows(x.clone());
                sync()
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group(format!("{backend}/q8_matmul_2048_to_6144"));
    group.sample_size(10);
    let (d_in, d_out) = (2048, 6144);
    // [in, out] in memory, as burn's Linear holds it; its rows `[out, in]` quantized.
    let weight_t = Tensor::<B, 2>::random([d_in, d_out], Distribution::Uniform(-0.05, 0.05), &device);
    let (values, scales) = quantize_q8(&weight_t.clone().transpose().into_data().to_vec::<f32>().unwrap(), d_in);
    let values = q8_values::<B, 2>(values, [d_out, d_in], &device);
    let scales = block_scales::<B, 2>(scales, [d_out, d_in / Q8_BLOCK], &device);
    for tokens in [64, 512, 2048] {
        let x = Tensor::<B, 2>::random([tokens, d_in], Distribution::Normal(0.0, 1.0), &device);
        sync();
        group.bench_with_input(BenchmarkId::new("f32_matmul", tokens), &x, |b, x| {
            b.iter(|| {
                let _ = x.clone().matmul(weight_t.clone());
                sync()
            })
        });
        // What an f32 projection runs (on ndarray: sgemm on the weight read in place).
        group.bench_with_input(BenchmarkId::new("f32_dense_matmul", tokens), &x, |b, x| {
            b.iter(|| {
                let _ = dense_matmul(x.clone(), weight_t.clone());
                sync()
            })
        });
        for (name, bits) in [
            ("q8_specialised_8_bit_activations", ActivationBits::Eight),
            ("q8_specialised_16_bit_activations", ActivationBits::Sixteen),
        ] {
            group.bench_with_input(BenchmarkId::new(name, tokens), &x, |b, x| {
                b.iter(|| {
                    let _ = q8_matmul(x.clone(), values.clone(), scales.clone(), bits);
                    sync()
                })
            });
        }
        group.bench_with_input(BenchmarkId::new("q8_generic_one_plane", tokens), &x, |b, x| {
            b.iter(|| {
                let _ = generic::q8_matmul(x.clone(), values.clone(), scales.clone(), ActivationBits::Eight);
                sync()
            })
        });
    }
    group.finish();

    let mut group = c.benchmark_group(format!("{backend}/grouped_matmul_64_experts_2048_to_1024"));
    group.sample_size(10);
    let (experts, d_in, d_out) = (64, 2048, 1024);
    let weights = Tensor::<B, 3>::random([experts, d_in, d_out], Distribution::Uniform(-0.05, 0.05), &device);
    let rows_of_experts: Vec<f32> = weights.clone().swap_dims(1, 2).into_data().to_vec().unwrap(); // [E, out, in]
    let (values, scales) = quantize_q8(&rows_of_experts, d_in);
    let values = q8_values::<B, 3>(values, [experts, d_out, d_in], &device);
    let scales = block_scales::<B, 3>(scales, [experts, d_out, d_in / Q8_BLOCK], &device);
    for rows_each in [4, 16] {
        let x = Tensor::<B, 2>::random([experts * rows_each, d_in], Distribution::Normal(0.0, 1.0), &device);
        let counts =
            Tensor::<B, 1, Int>::from_data(TensorData::new(vec![rows_each as i64; experts], [experts]), &device);
        sync();
        let shape = format!("{rows_each}_rows_each");
        group.bench_with_input(BenchmarkId::new("f32_specialised", &shape), &x, |b, x| {
            b.iter(|| {
                let _ = grouped_matmul(x.clone(), weights.clone(), counts.clone());
                sync()
            })
        });
        group.bench_with_input(BenchmarkId::new("f32_generic", &shape), &x, |b, x| {
            b.iter(|| {
                let _ = generic::grouped_matmul::<B>(
                    x.clone().into_primitive().tensor(),
                    weights.clone().into_primitive().tensor(),
                    counts.clone().into_primitive(),
                );
                sync()
            })
        });
        group.bench_with_input(BenchmarkId::new("q8_specialised", &shape), &x, |b, x| {
            b.iter(|| {
                let _ =
                    grouped_q8_matmul(x.clone(), values.clone(), scales.clone(), counts.clone(), ActivationBits::Eight);
                sync()
            })
        });
        group.bench_with_input(BenchmarkId::new("q8_generic", &shape), &x, |b, x| {
            b.iter(|| {
                let _ = generic::grouped_q8_matmul::<B>(
                    x.clone().into_primitive().tensor(),
                    values.clone().into_primitive(),
                    scales.clone().into_primitive(),
                    counts.clone().into_primitive(),
                    ActivationBits::Eight,
                );
                sync()
            })
        });
    }
    group.finish();
}

/// The CPU forms of the Q8_0 matmul on host slices, at the 2B model's widest projection: the
/// dequantized sgemm (what a CPU without an integer dot runs) against each integer dot this CPU
/// runs, 8- and 16-bit activations.
#[cfg(all(feature = "cpu-kernels", target_arch = "x86_64"))]
fn bench_cpu_forms(c: &mut Criterion) {
    use decider_ops::cpu::integer_dot::{self as dot, DotIsa};
    use decider_ops::q8_matmul::cpu::dequantized_q8_matmul;
    use decider_ops::round_activations;
    let mut seed = 1u32;
    let mut next = move || {
        seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        (seed >> 8) as f32 / (1 << 24) as f32 - 0.5
    };
    // decider-2b's MLP widths: up (2048 -> 6144) and down (6144 -> 2048); 2048 tokens is 16
    // batched 128-token decisions, whose activations outgrow the caches.
    for (d_in, d_out) in [(2048, 6144), (6144, 2048)] {
        let mut group = c.benchmark_group(format!("cpu/q8_matmul_{d_in}_to_{d_out}"));
        group.sample_size(10);
        let weights: Vec<f32> = (0..d_out * d_in).map(|_| next()).collect();
        let (values, scales) = quantize_q8(&weights, d_in);
        for tokens in [16, 128, 512, 2048] {
            let x: Vec<f32> = (0..tokens * d_in).map(|_| next()).collect();
            for bits in [ActivationBits::Eight, ActivationBits::Sixteen] {
                // The generic form is the baseline; at 2048 tokens it only makes the run long.
                if tokens <= 512 {
                    group.bench_function(BenchmarkId::new(format!("dequantized_{bits:?}"), tokens), |b| {
                        b.iter(|| {
                            dequantized_q8_matmul(
                                &round_activations(&x, d_in, bits),
                                tokens,
                                &values,
                                &scales,
                                d_out,
                                d_in,
                            )
                        })
                    });
                }
                for isa in DotIsa::ALL.into_iter().filter(|isa| isa.available()) {
                    let laid_out = dot::q8_layout(isa, &values, d_out, d_in);
                    group.bench_function(BenchmarkId::new(format!("{isa:?}_{bits:?}"), tokens), |b| {
                        b.iter(|| dot::q8_matmul(isa, &x, tokens, &laid_out, &scales, d_out, d_in, bits))
                    });
                }
            }
        }
        group.finish();
    }
}

/// The CPU forms of the bf16 matmul on host slices, at the 2B model's MLP widths: the widened
/// sgemm (what a CPU without a bf16 dot runs) against each bf16 dot this CPU runs.
#[cfg(all(feature = "cpu-kernels", target_arch = "x86_64"))]
fn bench_bf16_forms(c: &mut Criterion) {
    use decider_ops::cpu::bf16_dot::{Bf16Isa, bf16_matmul};
    use decider_ops::half_matmul::cpu::widened_half_matmul;
    use decider_ops::{Half, round_to_bf16};
    let mut seed = 7u32;
    let mut next = move || {
        seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        (seed >> 8) as f32 / (1 << 24) as f32 - 0.5
    };
    for (d_in, d_out) in [(2048, 6144), (6144, 2048)] {
        let mut group = c.benchmark_group(format!("cpu/bf16_matmul_{d_in}_to_{d_out}"));
        group.sample_size(10);
        let bits: Vec<u16> = (0..d_out * d_in).map(|_| Half::Bf16.from_f32(next()).unwrap()).collect();
        for tokens in [16, 128, 512] {
            let x: Vec<f32> = (0..tokens * d_in).map(|_| next()).collect();
            group.bench_function(BenchmarkId::new("widened", tokens), |b| {
                b.iter(|| widened_half_matmul(&round_to_bf16(&x), tokens, &bits, Half::Bf16, d_out, d_in))
            });
            for isa in Bf16Isa::ALL.into_iter().filter(|isa| isa.available()) {
                group.bench_function(BenchmarkId::new(format!("{isa:?}"), tokens), |b| {
                    b.iter(|| bf16_matmul(isa, &x, tokens, &bits, d_out, d_in))
                });
            }
        }
        group.finish();
    }
}

fn benches(c: &mut Criterion) {
    #[cfg(all(feature = "cpu-kernels", target_arch = "x86_64"))]
    bench_bf16_forms(c);
    #[cfg(all(feature = "cpu-kernels", target_arch = "x86_64"))]
    bench_cpu_forms(c);
    macro_rules! bench {
        ($name:ident, $backend:ty, $about:literal) => {
            bench_backend::<$backend>(c, stringify!($name));
        };
    }
    decider_ops::for_each_backend!(bench);
}

criterion_group!(ops, benches);
criterion_main!(ops);
