//! The `demo` model: a tiny Qwen3.5 (the dense decider-2b architecture at toy widths) with
//! random weights from a fixed seed, and the Qwen3.5 test tokenizer. It makes every command
//! and test run offline; its answers are those of random weights, not of a trained decider.

use qwen35::loader::Load;
use qwen35::seeded::SeededSource;
use qwen35::{Qwen35Config, Qwen35Model, Qwen35Ops, WeightFormat};

/// The seed of the demo weights.
pub const DEMO_SEED: u64 = 20_261_130;

/// The `decider_config.json` of the demo model.
pub const DEMO_DECIDER_CONFIG: &str = r#"{"version": "demo-random-weights", "release_date": "2026-11-30", "temperature": 1.0, "isolated_levels": true, "neutralize_none": false}"#;

/// Hybrid layout of the real models (three Gated DeltaNet layers, then gated attention) at
/// toy widths, with the full Qwen3.5 vocabulary so the real tokenizer's ids are valid.
const DEMO_CONFIG: &str = r#"{
  "model_type": "qwen3_5_text", "vocab_size": 248320, "hidden_size": 32, "intermediate_size": 64,
  "num_hidden_layers": 4, "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
  "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
  "linear_conv_kernel_dim": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 16,
  "linear_num_key_heads": 2, "linear_num_value_heads": 2,
  "rms_norm_eps": 1e-6, "tie_word_embeddings": true,
  "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25}
}"#;

/// The demo network's config.
pub fn demo_config() -> Qwen35Config {
    Qwen35Config::from_json(DEMO_CONFIG).expect("the demo config is valid")
}

/// The demo network on `device`: the same weights on every backend and platform, because they
/// are drawn on the host from a ChaCha8 stream per parameter.
pub fn demo_model<B: Qwen35Ops>(device: &B::Device) -> Qwen35Model<B> {
    random_model(&demo_config(), WeightFormat::F32, device)
}

/// A network of any config with the demo's seeded random weights ([`SeededSource`] of
/// [`DEMO_SEED`]): the real widths for speed and memory measurements without a checkpoint
/// (`--model random:CONFIG`). In another format than f32 each weight is the rounding of the f32
/// network's (Q8_0, Q4_0, Q4_K or the nearest 16-bit floats), as [`qwen35::weight_format::held_format`]
/// holds it.
pub fn random_model<B: Qwen35Ops>(config: &Qwen35Config, weights: WeightFormat, device: &B::Device) -> Qwen35Model<B> {
    let source = SeededSource::new(DEMO_SEED);
    let load = Load::from(&source, device, weights);
    let model = config.load(&load.root());
    load.finish(model).expect("seeded weights are never missing")
}
