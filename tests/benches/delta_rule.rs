//! The whole gated delta rule on each backend at 512 tokens and Qwen3.5-2B widths (16 key and 16
//! value heads of 128): the backend's scan (`decider_ops::GatedDeltaRule`: token by token on the
//! CPU backends), and on ndarray also the generic chunked form (eight 64-token chunks, each with
//! its unit-lower-triangular inverse, then the scan over chunks) for comparison.
//!
//! Run: `cargo bench -p integration-tests --bench delta_rule --features decider-ops/candle,decider-ops/wgpu`.

use burn::tensor::{Distribution, Tensor};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use qwen35::Qwen35Ops;
use qwen35::delta_rule::gated_delta_rule;

fn bench_backend<B: Qwen35Ops>(c: &mut Criterion, backend: &str, with_generic: bool) {
    let device = B::Device::default();
    let (len, heads, d) = (512, 16, 128);
    let normal = Distribution::Normal(0.0, 1.0);
    let q = Tensor::<B, 4>::random([1, len, heads, d], normal, &device);
    let k = Tensor::<B, 4>::random([1, len, heads, d], normal, &device);
    let v = Tensor::<B, 4>::random([1, len, heads, d], normal, &device);
    let g = Tensor::<B, 3>::random([1, len, heads], Distribution::Uniform(-0.2, 0.0), &device);
    let beta = Tensor::<B, 3>::random([1, len, heads], Distribution::Uniform(0.0, 1.0), &device);
    let mut group = c.benchmark_group("gated_delta_rule_512_tokens_2b_widths");
    group.sample_size(10);
    group.throughput(Throughput::Elements(len as u64));
    group.bench_function(backend, |b| {
        b.iter(|| {
            let (out, _state) = gated_delta_rule(q.clone(), k.clone(), v.clone(), g.clone(), beta.clone(), None);
            B::sync(&device).expect("sync");
            out
        })
    });
    if with_generic {
        let state = Tensor::<B, 4>::zeros([1, heads, d, d], &device);
        group.bench_function(format!("{backend}_generic_chunked"), |b| {
            b.iter(|| {
                let (out, _state) = decider_ops::generic::chunked_gated_delta_rule(
                    q.clone(),
                    k.clone(),
                    v.clone(),
                    g.clone(),
                    beta.clone(),
                    state.clone(),
                );
                B::sync(&device).expect("sync");
                out
            })
        });
    }
    group.finish();
}

fn benches(c: &mut Criterion) {
    macro_rules! bench {
        ($name:ident, $backend:ty, $about:literal) => {
            bench_backend::<$backend>(c, stringify!($name), stringify!($name) == "ndarray");
        };
    }
    decider_ops::for_each_backend!(bench);
}

criterion_group!(delta_rule, benches);
criterion_main!(delta_rule);
