//! The released configs parse, validate, and give the layer pattern and tensor shapes of the
//! real checkpoints; the config rules (flat or nested, `layer_types` or
//! `full_attention_interval`, RoPE theta fallbacks) hold.

use burn::backend::NdArray;
use integration_tests::fixture_path;
use qwen35::decoder::{FeedForward, TokenMixer};
use qwen35::weight::Held;
use qwen35::{FeedForwardType, Qwen35Config, TokenMixerKind};

type B = NdArray;

fn full_attention_layers(config: &Qwen35Config) -> Vec<usize> {
    (0..config.num_hidden_layers).filter(|&i| config.layer_types[i] == TokenMixerKind::SelfAttn).collect()
}

#[test]
fn qwen35_2b_parses_with_the_real_shapes() {
    let config = Qwen35Config::from_file(fixture_path("configs/qwen3.5-2b.json")).unwrap();
    assert!(!config.is_moe());
    assert_eq!(config.num_hidden_layers, 24);
    assert_eq!(full_attention_layers(&config), vec![3, 7, 11, 15, 19, 23]);
    assert!(config.tie_word_embeddings);
    assert_eq!((config.rope_theta, config.rotary_dim()), (1e7, 64));

    // Build the model lazily (no weights are allocated) and read its parameter shapes; a
    // projection's dims are [in, out], the checkpoint's [out, in] transposed.
    let model = config.init::<B>(&Default::default());
    let TokenMixer::LinearAttn(delta) = &model.layers[0].mixer else { panic!("layer 0 must be DeltaNet") };
    assert_eq!(delta.in_proj_qkv.dims(), [2048, 6144]);
    assert_eq!(delta.in_proj_z.dims(), [2048, 2048]);
    assert_eq!(delta.in_proj_b.dims(), [2048, 16]);
    assert_eq!(delta.conv1d.lazy_shape().dims::<2>(), [6144, 4]);
    assert_eq!(delta.a_log.lazy_shape().dims::<1>(), [16]);
    assert_eq!(delta.out_proj.dims(), [2048, 2048]);
    let TokenMixer::SelfAttn(attention) = &model.layers[3].mixer else { panic!("layer 3 must be attention") };
    assert_eq!(attention.q_proj.dims(), [2048, 4096]);
    assert_eq!(attention.k_proj.dims(), [2048, 512]);
    assert_eq!(attention.o_proj.dims(), [2048, 2048]);
    assert_eq!(attention.q_norm.weight.lazy_shape().dims::<1>(), [256]);
    let FeedForward::Dense(mlp) = &model.layers[0].mlp else { panic!("2B is dense") };
    assert_eq!(mlp.gate_proj.dims(), [2048, 6144]);
    assert_eq!(mlp.down_proj.dims(), [6144, 2048]);
    assert_eq!(model.embed_tokens.dims(), [248_320, 2048]);
    assert!(model.lm_head.is_none());
}

#[test]
fn qwen35_35b_a3b_parses_with_the_real_shapes() {
    let config = Qwen35Config::from_file(fixture_path("configs/qwen3.5-35b-a3b.json")).unwrap();
    let FeedForwardType::Moe(moe) = config.feed_forward.clone() else { panic!("35B-A3B is MoE") };
    assert_eq!(
        (moe.num_experts, moe.num_experts_per_tok, moe.moe_intermediate_size, moe.shared_expert_intermediate_size),
        (256, 8, 512, 512)
    );
    assert_eq!(config.num_hidden_layers, 40);
    assert_eq!(full_attention_layers(&config), (0..10).map(|g| 4 * g + 3).collect::<Vec<_>>());
    assert!(!config.tie_word_embeddings);

    let model = config.init::<B>(&Default::default());
    let TokenMixer::LinearAttn(delta) = &model.layers[0].mixer else { panic!("layer 0 must be DeltaNet") };
    assert_eq!(delta.in_proj_qkv.dims(), [2048, 8192]);
    assert_eq!(delta.in_proj_z.dims(), [2048, 4096]);
    assert_eq!(delta.in_proj_a.dims(), [2048, 32]);
    assert_eq!(delta.conv1d.lazy_shape().dims::<2>(), [8192, 4]);
    assert_eq!(delta.out_proj.dims(), [4096, 2048]);
    let TokenMixer::SelfAttn(attention) = &model.layers[39].mixer else { panic!("layer 39 must be attention") };
    assert_eq!(attention.q_proj.dims(), [2048, 8192]);
    assert_eq!(attention.o_proj.dims(), [4096, 2048]);
    let FeedForward::Sparse(sparse) = &model.layers[0].mlp else { panic!("35B-A3B is MoE") };
    assert_eq!(sparse.gate.dims(), [2048, 256]);
    let (Held::F32(gate_up), Held::F32(down)) = (&sparse.experts.gate_up_proj.held, &sparse.experts.down_proj.held)
    else {
        panic!("f32 experts by default")
    };
    assert_eq!(gate_up.lazy_shape().dims::<3>(), [256, 2048, 1024]);
    assert_eq!(down.lazy_shape().dims::<3>(), [256, 512, 2048]);
    assert_eq!(sparse.shared_expert.up_proj.dims(), [2048, 512]);
    assert_eq!(sparse.shared_expert_gate.dims(), [2048, 1]);
    assert_eq!(model.lm_head.as_ref().unwrap().dims(), [248_320, 2048]);
}

#[test]
fn flat_config_uses_the_interval_and_the_theta_fallback() {
    // No layer_types: layer i is full attention iff (i + 1) % interval == 0. No rope fields: 1e4.
    let config = Qwen35Config::from_json(
        r#"{"model_type": "qwen3_5_text", "num_hidden_layers": 6, "full_attention_interval": 3}"#,
    )
    .unwrap();
    assert_eq!(full_attention_layers(&config), vec![2, 5]);
    assert_eq!(config.rope_theta, 10_000.0);
    assert_eq!(config.partial_rotary_factor, 0.25);
    assert_eq!(config.hidden_size, 4096); // transformers' dense default
    assert_eq!(config.feed_forward, FeedForwardType::Dense { intermediate_size: 12_288 });
}

#[test]
fn theta_comes_from_rope_parameters_then_the_legacy_field() {
    let legacy = Qwen35Config::from_json(r#"{"model_type": "qwen3_5_text", "rope_theta": 5e6}"#).unwrap();
    assert_eq!(legacy.rope_theta, 5e6);
    let both = Qwen35Config::from_json(
        r#"{"model_type": "qwen3_5_text", "rope_theta": 5e6, "rope_parameters": {"rope_theta": 1e7}}"#,
    )
    .unwrap();
    assert_eq!(both.rope_theta, 1e7);
}

#[test]
fn composite_config_ties_by_its_top_level_flag() {
    let untied =
        Qwen35Config::from_json(r#"{"model_type": "qwen3_5", "text_config": {"tie_word_embeddings": true}}"#).unwrap();
    assert!(!untied.tie_word_embeddings);
}

#[test]
fn invalid_configs_name_the_field() {
    let cases = [
        (r#"{"model_type": "llama"}"#, "model_type `llama`"),
        (
            r#"{"model_type": "qwen3_5_text", "num_attention_heads": 6, "num_key_value_heads": 4}"#,
            "num_attention_heads",
        ),
        (r#"{"model_type": "qwen3_5_text", "num_hidden_layers": 2, "layer_types": ["full_attention"]}"#, "layer_types"),
        (r#"{"model_type": "qwen3_5_moe_text", "num_experts": 4, "num_experts_per_tok": 8}"#, "num_experts_per_tok"),
        (r#"{"model_type": "qwen3_5_text", "rope_parameters": {"rope_type": "yarn"}}"#, "rope_type"),
        (r#"{"model_type": "qwen3_5_text", "layer_types": ["sliding_attention"]}"#, "sliding_attention"),
        (r#"{"model_type": "qwen3_5_text", "hidden_size": "wide"}"#, "hidden_size"),
    ];
    for (json, needle) in cases {
        let message = Qwen35Config::from_json(json).unwrap_err().to_string();
        assert!(message.contains(needle), "error for {json} should mention {needle}: {message}");
    }
}
