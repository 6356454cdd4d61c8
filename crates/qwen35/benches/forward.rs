//! One forward of a Qwen3.5-2B-shaped stack on ndarray: the real widths of tests/fixtures/configs/qwen3.5-2b.json (hidden 2048,
//! DeltaNet 16/16 heads of 128, attention 8/2 heads of 256, MLP 6144), one [3 DeltaNet +
//! 1 attention] group, random weights made here. The output is the final-norm hidden states:
//! a decision projects only its label rows, never the 248,320-column head, so the head is not
//! part of the measured work (the vocabulary is cut to 1,024 to keep the embedding small).
//!
//! Each weight format is measured in the same run (f32, then q8), so their ratio is the figure to
//! read; the process's resident memory after each model is built is printed beside it (the
//! previous model is dropped first).
//!
//! Run: `cargo bench -p qwen35 --bench forward` (or `cargo xtask bench`); criterion reports the
//! time per forward and the throughput in tokens/s (elements/s).

use burn::backend::NdArray;
use burn::module::{Module, ModuleMapper, Param};
use burn::tensor::{Distribution, Int, Tensor, TensorData};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use qwen35::{Qwen35Config, Qwen35Model, WeightFormat};

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

/// Fills every parameter with values drawn here: floats uniform in ±1/√fan_in, Q8_0 values as
/// i8 in ±127 (the dtype the CPU kernel reads) with scales that keep the weights in the same
/// range. The values do not change the work, only keep it away from zeros and overflow.
struct RandomWeights(u64);

impl RandomWeights {
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    }
}

impl ModuleMapper<B> for RandomWeights {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let shape = param.lazy_shape();
        let bound = if D >= 2 { 2.0 / (shape.dims::<D>()[D - 2] as f32).sqrt() } else { 1.0 };
        let values: Vec<f32> = (0..shape.num_elements()).map(|_| self.next() * bound).collect();
        let id = param.id;
        param.transform_for_load(Tensor::from_data(TensorData::new(values, shape), &Default::default()), id)
    }

    fn map_int<const D: usize>(&mut self, param: Param<Tensor<B, D, Int>>) -> Param<Tensor<B, D, Int>> {
        let shape = param.lazy_shape();
        let values: Vec<i8> = (0..shape.num_elements()).map(|_| (self.next() * 254.0) as i8).collect();
        let id = param.id;
        param.transform_for_load(decider_ops::q8_values(values, shape, &Default::default()), id)
    }
}

/// Resident and peak resident memory of this process, in MiB (Linux; `None` elsewhere).
fn memory_mib() -> Option<(u64, u64)> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|line| line.starts_with(name))?;
        Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? / 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

fn forward(c: &mut Criterion) {
    let device = Default::default();
    let mut group = c.benchmark_group("qwen35_2b_shaped_4_layers_ndarray");
    group.sample_size(10);
    for weights in [WeightFormat::F32, WeightFormat::Q8] {
        let model: Qwen35Model<B> = config_2b_shaped().init_with_weights(weights, &device).map(&mut RandomWeights(7));
        if let Some((resident, peak)) = memory_mib() {
            println!("{weights}: resident {resident} MiB after building the model (peak so far {peak} MiB)");
        }
        for len in [64usize, 512] {
            let ids = Tensor::<B, 2, Int>::random([1, len], Distribution::Uniform(0.0, 1024.0), &device);
            group.throughput(Throughput::Elements(len as u64));
            group.bench_function(format!("{weights}_{len}_tokens"), |b| {
                b.iter(|| {
                    let mut cache = model.new_cache();
                    model.hidden_states(ids.clone(), &mut cache).into_data()
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, forward);
criterion_main!(benches);
