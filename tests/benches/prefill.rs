//! Prefill speed and memory, per backend compiled in and per weight format, on two stacks of the
//! real widths with seeded random weights (`decider::demo::random_model`; the values do not change
//! the work):
//! - `2b`: the first four layers (3 Gated DeltaNet + 1 gated attention) of Qwen3.5-2B, decider-2b's
//!   base (`tests/fixtures/configs/qwen3.5-2b.json`): hidden 2,048, MLP 6,144;
//! - `35b-a3b`: one Gated DeltaNet and one attention layer of Qwen3.5-35B-A3B, decider-35b-a3b's
//!   base (`tests/fixtures/configs/qwen3.5-35b-a3b.json`): 256 experts (top 8) of 512 and a shared
//!   expert of 512 per layer.
//!
//! The output measured is the final-norm hidden states: a decision projects only its label rows,
//! never the 248,320-column head, so the vocabulary is cut to 1,024 and the head is not part of
//! the work. Per token count: one untimed forward, then the best of `DECIDER_BENCH_RUNS` (default
//! 3) in tokens/s (past 4,096 tokens a single timed forward), and the peak resident memory of
//! those forwards over the resident memory of the built model (Linux: the peak is reset through
//! `/proc/self/clear_refs`). Every format of a backend is measured in the same run, so their
//! ratios are the figures to read. Each format also prints the weight bytes of the whole model
//! the stack is cut from (`Qwen35Model::weight_bytes` of the lazily built full config: nothing
//! is allocated), decider-2b's and decider-35b-a3b's in that format.
//!
//! Run: `cargo bench -p integration-tests --bench prefill [--features decider-ops/candle,decider-ops/wgpu]`
//! (or `cargo xtask bench`). `DECIDER_BENCH_TOKENS` (default `128,512,2048`; `32768` measures
//! the longest state), `DECIDER_BENCH_STACKS` (default `2b,35b-a3b`), `DECIDER_BENCH_WEIGHTS`
//! (default every format) narrow it.

use std::time::Instant;

use burn::tensor::{Int, Tensor, TensorData};
use decider::demo::random_model;
use integration_tests::{fixture_path, process_memory_bytes};
use qwen35::{Qwen35Config, Qwen35Ops, TokenMixerKind, WeightFormat};

/// Longer states are timed once.
const LONG: usize = 4096;

/// A stack of `name`: the layers of the config at `config` (under `tests/fixtures/configs`) at
/// `layers`.
struct Stack {
    name: &'static str,
    config: &'static str,
    layers: &'static [usize],
}

const STACKS: [Stack; 2] = [
    Stack { name: "2b", config: "qwen3.5-2b.json", layers: &[0, 1, 2, 3] },
    Stack { name: "35b-a3b", config: "qwen3.5-35b-a3b.json", layers: &[0, 3] },
];

impl Stack {
    /// The config of the whole model.
    fn full_config(&self) -> Qwen35Config {
        Qwen35Config::from_file(fixture_path(&format!("configs/{}", self.config))).expect("a committed config")
    }

    /// The config of the stack.
    fn config(&self) -> Qwen35Config {
        let mut config = self.full_config();
        config.layer_types = self.layers.iter().map(|&layer| config.layer_types[layer]).collect();
        config.num_hidden_layers = self.layers.len();
        config.vocab_size = 1024;
        let kinds = |kind: TokenMixerKind| config.layer_types.iter().filter(|&&t| t == kind).count();
        assert_eq!(
            (kinds(TokenMixerKind::LinearAttn), kinds(TokenMixerKind::SelfAttn)),
            (self.layers.len() - 1, 1),
            "{}",
            self.name
        );
        config
    }
}

/// The comma-separated values of the variable `name`, or `default`.
fn list(name: &str, default: &str) -> Vec<String> {
    std::env::var(name)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// Resident and peak resident memory of this process in MiB (Linux; zeros elsewhere).
fn memory_mib() -> (u64, u64) {
    let mib = |field| process_memory_bytes("self", field).unwrap_or(0) >> 20;
    (mib("VmRSS:"), mib("VmHWM:"))
}

fn bench_backend<B: Qwen35Ops>(backend: &str) {
    let device = B::Device::default();
    let tokens: Vec<usize> = list("DECIDER_BENCH_TOKENS", "128,512,2048")
        .iter()
        .map(|n| n.parse().expect("DECIDER_BENCH_TOKENS: numbers"))
        .collect();
    let runs: usize = std::env::var("DECIDER_BENCH_RUNS").ok().and_then(|n| n.parse().ok()).unwrap_or(3);
    let stacks = list("DECIDER_BENCH_STACKS", &STACKS.map(|s| s.name).join(","));
    let formats = list("DECIDER_BENCH_WEIGHTS", &WeightFormat::ALL.map(|(name, _)| name).join(","));
    for stack in STACKS.iter().filter(|s| stacks.iter().any(|name| name == s.name)) {
        let config = stack.config();
        for format in &formats {
            let weights: WeightFormat = format.parse().expect("DECIDER_BENCH_WEIGHTS: weight formats");
            let full = stack.full_config().init_with_weights::<B>(weights, &device).weight_bytes();
            println!(
                "prefill {backend} {} {weights}: the whole model's weights are {:.2} GB",
                stack.name,
                full as f64 / 1e9
            );
            let building = Instant::now();
            let model = random_model::<B>(&config, weights, &device);
            let (resident, _) = memory_mib();
            println!(
                "prefill {backend} {} {weights}: built in {:.1} s, resident {resident} MiB",
                stack.name,
                building.elapsed().as_secs_f64()
            );
            for &len in &tokens {
                let ids: Vec<i64> = (0..len as i64).map(|i| (i * 7919) % 1024).collect();
                let ids = Tensor::<B, 2, Int>::from_data(TensorData::new(ids, [1, len]), &device);
                let forward = || {
                    let start = Instant::now();
                    let _ = model.hidden_states(ids.clone(), &mut model.new_cache()).into_data();
                    start.elapsed().as_secs_f64()
                };
                let _ = std::fs::write("/proc/self/clear_refs", "5");
                let timed = if len > LONG {
                    1
                } else {
                    forward();
                    runs.max(1)
                };
                let best = (0..timed).map(|_| forward()).fold(f64::INFINITY, f64::min);
                let (_, peak) = memory_mib();
                println!(
                    "prefill {backend} {} {weights} {len:6} tokens: {:8.1} tok/s ({:.2} ms a token), best of {timed}; peak {} MiB over the resident",
                    stack.name,
                    len as f64 / best,
                    best * 1e3 / len as f64,
                    peak.saturating_sub(resident)
                );
            }
        }
    }
}

fn main() {
    macro_rules! bench {
        ($name:ident, $backend:ty, $about:literal) => {
            bench_backend::<$backend>(stringify!($name));
        };
    }
    decider_ops::for_each_backend!(bench);
}
