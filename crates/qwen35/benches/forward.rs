//! One forward of a Qwen3.5-2B-shaped stack on ndarray: the real widths of §2 (hidden 2048,
//! DeltaNet 16/16 heads of 128, attention 8/2 heads of 256, MLP 6144), one [3 DeltaNet +
//! 1 attention] group, random weights made here. The output is the final-norm hidden states:
//! a decision projects only its label rows, never the 248,320-column head, so the head is not
//! part of the measured work (the vocabulary is cut to 1,024 to keep the embedding small).
//!
//! Run: `cargo bench -p qwen35 --bench forward` (or `cargo xtask bench`); criterion reports the
//! time per forward and the throughput in tokens/s (elements/s).

use burn::backend::NdArray;
use burn::tensor::{Distribution, Int, Tensor};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use qwen35::Qwen35Config;

type B = NdArray;

fn config_2b_shaped() -> Qwen35Config {
    Qwen35Config::from_json(
        r#"{
            "model_type": "qwen3_5_text", "hidden_size": 2048, "intermediate_size": 6144,
            "num_hidden_layers": 4, "full_attention_interval": 4,
            "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 256,
            "linear_num_key_heads": 16, "linear_num_value_heads": 16,
            "linear_key_head_dim": 128, "linear_value_head_dim": 128,
            "vocab_size": 1024, "tie_word_embeddings": true,
            "rope_parameters": {"rope_theta": 10000000, "partial_rotary_factor": 0.25}
        }"#,
    )
    .expect("valid config")
}

fn forward(c: &mut Criterion) {
    let device = Default::default();
    let model = config_2b_shaped().init::<B>(&device);
    let mut group = c.benchmark_group("qwen35_2b_shaped_4_layers_ndarray");
    group.sample_size(10);
    for len in [64usize, 512] {
        let ids = Tensor::<B, 2, Int>::random([1, len], Distribution::Uniform(0.0, 1024.0), &device);
        group.throughput(Throughput::Elements(len as u64));
        group.bench_function(format!("{len}_tokens"), |b| {
            b.iter(|| {
                let mut cache = model.new_cache();
                model.hidden_states(ids.clone(), &mut cache).into_data()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, forward);
criterion_main!(benches);
