//! The whole chunked gated delta rule on each backend at 512 tokens and Qwen3.5-2B widths
//! (16 key and 16 value heads of 128): eight 64-token chunks, each with its unit-lower-triangular
//! inverse, then the sequential scan.
//!
//! Run: `cargo bench -p integration-tests --bench delta_rule --features candle,wgpu`.
#![allow(deprecated)] // burn-candle is deprecated upstream from 0.21; still a supported backend here.

use burn::tensor::{Distribution, Tensor};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use qwen35::Qwen35Ops;
use qwen35::delta_rule::chunked_gated_delta_rule;

fn bench_backend<B: Qwen35Ops>(c: &mut Criterion, backend: &str) {
    let device = B::Device::default();
    let (len, heads, d) = (512, 16, 128);
    let normal = Distribution::Normal(0.0, 1.0);
    let q = Tensor::<B, 4>::random([1, len, heads, d], normal, &device);
    let k = Tensor::<B, 4>::random([1, len, heads, d], normal, &device);
    let v = Tensor::<B, 4>::random([1, len, heads, d], normal, &device);
    let g = Tensor::<B, 3>::random([1, len, heads], Distribution::Uniform(-0.2, 0.0), &device);
    let beta = Tensor::<B, 3>::random([1, len, heads], Distribution::Uniform(0.0, 1.0), &device);
    let mut group = c.benchmark_group("chunked_gated_delta_rule_512_tokens_2b_widths");
    group.sample_size(10);
    group.throughput(Throughput::Elements(len as u64));
    group.bench_function(backend, |b| {
        b.iter(|| {
            let (out, _state) =
                chunked_gated_delta_rule(q.clone(), k.clone(), v.clone(), g.clone(), beta.clone(), None);
            B::sync(&device).expect("sync");
            out
        })
    });
    group.finish();
}

fn benches(c: &mut Criterion) {
    #[cfg(feature = "ndarray")]
    bench_backend::<burn::backend::NdArray>(c, "ndarray");
    #[cfg(feature = "candle")]
    bench_backend::<burn::backend::Candle>(c, "candle");
    #[cfg(feature = "wgpu")]
    bench_backend::<burn::backend::Wgpu>(c, "wgpu");
}

criterion_group!(delta_rule, benches);
criterion_main!(delta_rule);
