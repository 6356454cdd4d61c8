//! Specialised kernel vs generic tensor-op implementation vs naive tensor-op baseline, per
//! backend, at the shapes of the seed: expert counts of 8 ids into 64 experts, 1,024 into 128,
//! 944 into 256 and 65,536 into 256; inverses of 32 heads x 10 chunks and 32 x 64 chunks of
//! 64x64 systems built like the delta rule's (entries near 1).
//!
//! Run: `cargo bench -p decider-ops --bench ops --features candle,wgpu` (or `cargo xtask bench`). Each group measures the
//! three implementations in the same run, so the ratios are what to read.

use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, Int, Tensor};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use decider_ops::{ExpertCount, UnitLowerInverse, expert_count, generic, reference, unit_lower_inverse};

/// `(beta k) k^T * decay` for unit keys that share a strong common direction, strictly lower.
fn delta_rule_systems<B: Backend>(batch: usize, device: &B::Device) -> Tensor<B, 3> {
    let (n, d) = (64, 128);
    let noise = Tensor::<B, 3>::random([batch, n, d], Distribution::Normal(0.0, 0.1), device);
    let keys = noise.add_scalar(0.3);
    let keys = keys.clone() / keys.powi_scalar(2).sum_dim(2).sqrt();
    let beta = Tensor::<B, 3>::random([batch, n, 1], Distribution::Uniform(0.5, 1.0), device);
    (keys.clone() * beta).matmul(keys.swap_dims(1, 2)).tril(-1)
}

fn bench_backend<B: ExpertCount + UnitLowerInverse>(c: &mut Criterion, backend: &str) {
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
}

#[allow(deprecated)] // burn-candle is deprecated upstream from 0.21; still a supported backend here.
fn benches(c: &mut Criterion) {
    #[cfg(feature = "ndarray")]
    bench_backend::<burn::backend::NdArray>(c, "ndarray");
    #[cfg(feature = "candle")]
    bench_backend::<burn::backend::Candle>(c, "candle");
    #[cfg(feature = "wgpu")]
    bench_backend::<burn::backend::Wgpu>(c, "wgpu");
}

criterion_group!(ops, benches);
criterion_main!(ops);
