//! The text configuration of a Qwen3.5 checkpoint, read from Hugging Face `config.json`.
//!
//! Real checkpoints ship a composite config (`model_type` `qwen3_5` / `qwen3_5_moe`) with the
//! text fields under `text_config`; transformers' text-only `save_pretrained` writes them flat
//! (`qwen3_5_text` / `qwen3_5_moe_text`). Both are accepted. Defaults are those of transformers
//! 5.23.0's `Qwen3_5TextConfig` / `Qwen3_5MoeTextConfig`.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use crate::error::ConfigError;
use crate::model_file::{CONFIG_BYTES, read_bounded_text};

/// The kind of a decoder layer's token mixer: `config.json`'s `layer_types` entry. One kind has
/// one name, the checkpoint's module's, in every type that depends on it: its widths
/// ([`crate::decoder::TokenMixerConfig`]), its weights ([`crate::decoder::TokenMixer`]) and its
/// state between calls ([`crate::cache::TokenMixerState`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum TokenMixerKind {
    /// Gated DeltaNet (`linear_attn`).
    #[serde(rename = "linear_attention")]
    LinearAttn,
    /// Gated full attention (`self_attn`).
    #[serde(rename = "full_attention")]
    SelfAttn,
}

impl TokenMixerKind {
    /// The kind as `config.json` spells it.
    pub fn name(self) -> &'static str {
        match self {
            TokenMixerKind::LinearAttn => "linear_attention",
            TokenMixerKind::SelfAttn => "full_attention",
        }
    }
}

/// The feed-forward of every layer: the one thing that tells Qwen3.5 from Qwen3.5-MoE.
#[derive(Debug, Clone, PartialEq)]
pub enum FeedForwardType {
    /// `qwen3_5`: a SwiGLU MLP of width `intermediate_size`.
    Dense { intermediate_size: usize },
    /// `qwen3_5_moe`: routed experts plus a shared expert.
    Moe(MoeConfig),
}

/// The sparse MoE feed-forward of Qwen3.5-MoE (every layer is sparse).
#[derive(Debug, Clone, PartialEq)]
pub struct MoeConfig {
    /// E: routed experts.
    pub num_experts: usize,
    /// k: experts per token.
    pub num_experts_per_tok: usize,
    /// Width of each routed expert's SwiGLU.
    pub moe_intermediate_size: usize,
    /// Width of the always-on shared expert.
    pub shared_expert_intermediate_size: usize,
}

/// A validated Qwen3.5 text configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Qwen35Config {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f64,
    pub tie_word_embeddings: bool,
    pub rope_theta: f64,
    pub partial_rotary_factor: f64,
    pub linear_conv_kernel_dim: usize,
    pub linear_key_head_dim: usize,
    pub linear_value_head_dim: usize,
    pub linear_num_key_heads: usize,
    pub linear_num_value_heads: usize,
    pub layer_types: Vec<TokenMixerKind>,
    pub feed_forward: FeedForwardType,
}

/// The text fields as they appear in `config.json`; absent fields take the class defaults.
#[derive(Deserialize)]
struct RawTextConfig {
    model_type: Option<String>,
    vocab_size: Option<usize>,
    hidden_size: Option<usize>,
    intermediate_size: Option<usize>,
    num_hidden_layers: Option<usize>,
    num_attention_heads: Option<usize>,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    rms_norm_eps: Option<f64>,
    tie_word_embeddings: Option<bool>,
    rope_parameters: Option<RawRope>,
    rope_theta: Option<f64>,
    partial_rotary_factor: Option<f64>,
    linear_conv_kernel_dim: Option<usize>,
    linear_key_head_dim: Option<usize>,
    linear_value_head_dim: Option<usize>,
    linear_num_key_heads: Option<usize>,
    linear_num_value_heads: Option<usize>,
    layer_types: Option<Vec<TokenMixerKind>>,
    full_attention_interval: Option<usize>,
    num_experts: Option<usize>,
    num_experts_per_tok: Option<usize>,
    moe_intermediate_size: Option<usize>,
    shared_expert_intermediate_size: Option<usize>,
}

#[derive(Deserialize)]
struct RawRope {
    rope_theta: Option<f64>,
    partial_rotary_factor: Option<f64>,
    rope_type: Option<String>,
}

impl Qwen35Config {
    /// Reads and validates `config.json` (flat or composite).
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = read_bounded_text(path, CONFIG_BYTES)
            .map_err(|cause| ConfigError::Io { path: path.to_path_buf(), cause })?;
        Self::from_json(&text)
    }

    /// Parses and validates the text of a `config.json` (flat or composite).
    pub fn from_json(text: &str) -> Result<Self, ConfigError> {
        let root: Value = serde_json::from_str(text).map_err(ConfigError::Json)?;
        let Value::Object(top) = &root else {
            return Err(ConfigError::Invalid("config.json must be a JSON object".into()));
        };
        // Composite configs nest the text model; the tying flag of the composite model is the
        // top-level one (transformers reads `self.config.tie_word_embeddings`).
        let (text_value, composite_tie) = match top.get("text_config") {
            Some(text) => {
                (text.clone(), Some(top.get("tie_word_embeddings").and_then(Value::as_bool).unwrap_or(false)))
            }
            None => (root.clone(), None),
        };
        let raw: RawTextConfig = serde_path_to_error::deserialize(text_value).map_err(|e| ConfigError::Field {
            field_path: e.path().to_string(),
            message: e.into_inner().to_string(),
        })?;
        let model_type =
            raw.model_type.clone().or_else(|| top.get("model_type").and_then(Value::as_str).map(str::to_owned));
        let is_moe = match model_type.as_deref() {
            Some("qwen3_5" | "qwen3_5_text") => false,
            Some("qwen3_5_moe" | "qwen3_5_moe_text") => true,
            Some(other) => {
                return Err(ConfigError::Invalid(format!(
                    "model_type `{other}` is not a Qwen3.5 model (expected qwen3_5, qwen3_5_text, qwen3_5_moe or qwen3_5_moe_text)"
                )));
            }
            None => raw.num_experts.is_some(),
        };
        let config = raw.resolve(is_moe, composite_tie)?;
        config.validate()?;
        Ok(config)
    }

    /// Whether the feed-forward of every layer is the sparse MoE block.
    pub fn is_moe(&self) -> bool {
        matches!(self.feed_forward, FeedForwardType::Moe(_))
    }

    /// Channels of each attention head that get the rotary embedding (64 for the real models).
    pub fn rotary_dim(&self) -> usize {
        (self.head_dim as f64 * self.partial_rotary_factor) as usize
    }

    /// DeltaNet: `Hk * Dk`.
    pub fn linear_key_dim(&self) -> usize {
        self.linear_num_key_heads * self.linear_key_head_dim
    }

    /// DeltaNet: `Hv * Dv`.
    pub fn linear_value_dim(&self) -> usize {
        self.linear_num_value_heads * self.linear_value_head_dim
    }

    /// DeltaNet: channels of the causal conv, `[q | k | v]`.
    pub fn linear_conv_dim(&self) -> usize {
        2 * self.linear_key_dim() + self.linear_value_dim()
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let sizes = [
            ("vocab_size", self.vocab_size, MAX_VOCAB),
            ("hidden_size", self.hidden_size, MAX_WIDTH),
            ("num_hidden_layers", self.num_hidden_layers, MAX_LAYERS),
            ("num_attention_heads", self.num_attention_heads, MAX_HEADS),
            ("num_key_value_heads", self.num_key_value_heads, MAX_HEADS),
            ("head_dim", self.head_dim, MAX_HEAD_DIM),
            ("linear_conv_kernel_dim", self.linear_conv_kernel_dim, MAX_CONV_KERNEL),
            ("linear_key_head_dim", self.linear_key_head_dim, MAX_HEAD_DIM),
            ("linear_value_head_dim", self.linear_value_head_dim, MAX_HEAD_DIM),
            ("linear_num_key_heads", self.linear_num_key_heads, MAX_HEADS),
            ("linear_num_value_heads", self.linear_num_value_heads, MAX_HEADS),
        ];
        for (field, value, max) in sizes {
            check_size(field, value, max)?;
        }
        if !self.num_attention_heads.is_multiple_of(self.num_key_value_heads) {
            return Err(ConfigError::Field {
                field_path: "num_attention_heads".into(),
                message: format!(
                    "{} is not a multiple of num_key_value_heads {}",
                    self.num_attention_heads, self.num_key_value_heads
                ),
            });
        }
        if !self.linear_num_value_heads.is_multiple_of(self.linear_num_key_heads) {
            return Err(ConfigError::Field {
                field_path: "linear_num_value_heads".into(),
                message: format!(
                    "{} is not a multiple of linear_num_key_heads {}",
                    self.linear_num_value_heads, self.linear_num_key_heads
                ),
            });
        }
        let rotary = self.rotary_dim();
        if rotary == 0 || !rotary.is_multiple_of(2) || rotary > self.head_dim {
            return Err(ConfigError::Field {
                field_path: "partial_rotary_factor".into(),
                message: format!(
                    "{} of head_dim {} gives rotary dim {rotary}, which must be even, positive and at most head_dim",
                    self.partial_rotary_factor, self.head_dim
                ),
            });
        }
        #[allow(clippy::neg_cmp_op_on_partial_ord, reason = "a NaN must fail the check too")]
        if !(self.rope_theta > 0.0) {
            return Err(ConfigError::Field {
                field_path: "rope_theta".into(),
                message: format!("{} must be positive", self.rope_theta),
            });
        }
        #[allow(clippy::neg_cmp_op_on_partial_ord, reason = "a NaN must fail the check too")]
        if !(self.rms_norm_eps >= 0.0) {
            return Err(ConfigError::Field {
                field_path: "rms_norm_eps".into(),
                message: format!("{} must not be negative", self.rms_norm_eps),
            });
        }
        if self.layer_types.len() != self.num_hidden_layers {
            return Err(ConfigError::Field {
                field_path: "layer_types".into(),
                message: format!(
                    "has {} entries but num_hidden_layers is {}",
                    self.layer_types.len(),
                    self.num_hidden_layers
                ),
            });
        }
        match &self.feed_forward {
            FeedForwardType::Moe(moe) => {
                for (field, value, max) in [
                    ("num_experts", moe.num_experts, MAX_EXPERTS),
                    ("num_experts_per_tok", moe.num_experts_per_tok, MAX_EXPERTS),
                    ("moe_intermediate_size", moe.moe_intermediate_size, MAX_FFN_WIDTH),
                    ("shared_expert_intermediate_size", moe.shared_expert_intermediate_size, MAX_FFN_WIDTH),
                ] {
                    check_size(field, value, max)?;
                }
                if moe.num_experts_per_tok > moe.num_experts {
                    return Err(ConfigError::Field {
                        field_path: "num_experts_per_tok".into(),
                        message: format!("{} exceeds num_experts {}", moe.num_experts_per_tok, moe.num_experts),
                    });
                }
            }
            FeedForwardType::Dense { intermediate_size } => {
                check_size("intermediate_size", *intermediate_size, MAX_FFN_WIDTH)?
            }
        }
        Ok(())
    }
}

// Upper bounds of the size fields: 16x or more the Qwen3.5 defaults (hidden width 4,096, 40
// layers, 256 experts, a 248,320-token vocabulary; docs/architecture.md), low enough that a
// typo or a hostile `config.json` fails here, naming the field, not in a terabyte allocation.
const MAX_VOCAB: usize = 1 << 22;
const MAX_WIDTH: usize = 1 << 16;
const MAX_LAYERS: usize = 1 << 10;
const MAX_HEADS: usize = 1 << 10;
const MAX_HEAD_DIM: usize = 1 << 12;
const MAX_CONV_KERNEL: usize = 1 << 6;
const MAX_FFN_WIDTH: usize = 1 << 20;
const MAX_EXPERTS: usize = 1 << 14;

/// `value` of `field` is in `1..=max`.
fn check_size(field: &str, value: usize, max: usize) -> Result<(), ConfigError> {
    let message = if value == 0 {
        "must be positive".to_string()
    } else if value > max {
        format!("{value} is larger than this loader allows ({max})")
    } else {
        return Ok(());
    };
    Err(ConfigError::Field { field_path: field.into(), message })
}

/// The value a field of `config.json` takes when absent: transformers 5.23.0's class defaults
/// (`Qwen3_5TextConfig`, `Qwen3_5MoeTextConfig`), one row per field, in one place.
struct ClassDefaults {
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    full_attention_interval: usize,
    num_attention_heads: usize,
    num_key_value_heads: usize,
    head_dim: usize,
    rms_norm_eps: f64,
    tie_word_embeddings: bool,
    rope_theta: f64,
    partial_rotary_factor: f64,
    linear_conv_kernel_dim: usize,
    linear_key_head_dim: usize,
    linear_value_head_dim: usize,
    linear_num_key_heads: usize,
    linear_num_value_heads: usize,
    /// Read for a dense model only.
    intermediate_size: usize,
    /// This field and the three below are read for an MoE model only.
    num_experts: usize,
    num_experts_per_tok: usize,
    moe_intermediate_size: usize,
    shared_expert_intermediate_size: usize,
}

/// `Qwen3_5TextConfig`'s defaults.
const DENSE_DEFAULTS: ClassDefaults = ClassDefaults {
    vocab_size: 248_320,
    hidden_size: 4096,
    num_hidden_layers: 32,
    full_attention_interval: 4,
    num_attention_heads: 16,
    num_key_value_heads: 4,
    head_dim: 256,
    rms_norm_eps: 1e-6,
    tie_word_embeddings: false,
    rope_theta: 10_000.0,
    partial_rotary_factor: 0.25,
    linear_conv_kernel_dim: 4,
    linear_key_head_dim: 128,
    linear_value_head_dim: 128,
    linear_num_key_heads: 16,
    linear_num_value_heads: 32,
    intermediate_size: 12_288,
    num_experts: 256,
    num_experts_per_tok: 8,
    moe_intermediate_size: 512,
    shared_expert_intermediate_size: 512,
};

/// `Qwen3_5MoeTextConfig`'s defaults: the dense ones but for these three.
const MOE_DEFAULTS: ClassDefaults =
    ClassDefaults { hidden_size: 2048, num_hidden_layers: 40, num_key_value_heads: 2, ..DENSE_DEFAULTS };

impl RawTextConfig {
    fn resolve(self, is_moe: bool, composite_tie: Option<bool>) -> Result<Qwen35Config, ConfigError> {
        let defaults = if is_moe { &MOE_DEFAULTS } else { &DENSE_DEFAULTS };
        let num_hidden_layers = self.num_hidden_layers.unwrap_or(defaults.num_hidden_layers);
        // Bounded before `layer_types` is built from it.
        check_size("num_hidden_layers", num_hidden_layers, MAX_LAYERS)?;
        let layer_types = match self.layer_types {
            Some(types) => types,
            None => {
                let interval = self.full_attention_interval.unwrap_or(defaults.full_attention_interval);
                if interval == 0 {
                    return Err(ConfigError::Field {
                        field_path: "full_attention_interval".into(),
                        message: "must be positive".into(),
                    });
                }
                (0..num_hidden_layers)
                    .map(
                        |i| if (i + 1) % interval == 0 { TokenMixerKind::SelfAttn } else { TokenMixerKind::LinearAttn },
                    )
                    .collect()
            }
        };
        let rope = self.rope_parameters;
        if let Some(kind) = rope.as_ref().and_then(|r| r.rope_type.as_deref()) {
            // Text-only input makes M-RoPE plain RoPE; scaled variants are not implemented.
            if kind != "default" && kind != "mrope" {
                return Err(ConfigError::Field {
                    field_path: "rope_parameters.rope_type".into(),
                    message: format!("`{kind}` is not supported (only the default RoPE of Qwen3.5)"),
                });
            }
        }
        let rope_theta = rope.as_ref().and_then(|r| r.rope_theta).or(self.rope_theta).unwrap_or(defaults.rope_theta);
        let partial_rotary_factor = rope
            .as_ref()
            .and_then(|r| r.partial_rotary_factor)
            .or(self.partial_rotary_factor)
            .unwrap_or(defaults.partial_rotary_factor);
        let feed_forward = match is_moe {
            true => FeedForwardType::Moe(MoeConfig {
                num_experts: self.num_experts.unwrap_or(defaults.num_experts),
                num_experts_per_tok: self.num_experts_per_tok.unwrap_or(defaults.num_experts_per_tok),
                moe_intermediate_size: self.moe_intermediate_size.unwrap_or(defaults.moe_intermediate_size),
                shared_expert_intermediate_size: self
                    .shared_expert_intermediate_size
                    .unwrap_or(defaults.shared_expert_intermediate_size),
            }),
            false => FeedForwardType::Dense {
                intermediate_size: self.intermediate_size.unwrap_or(defaults.intermediate_size),
            },
        };
        Ok(Qwen35Config {
            vocab_size: self.vocab_size.unwrap_or(defaults.vocab_size),
            hidden_size: self.hidden_size.unwrap_or(defaults.hidden_size),
            num_hidden_layers,
            num_attention_heads: self.num_attention_heads.unwrap_or(defaults.num_attention_heads),
            num_key_value_heads: self.num_key_value_heads.unwrap_or(defaults.num_key_value_heads),
            head_dim: self.head_dim.unwrap_or(defaults.head_dim),
            rms_norm_eps: self.rms_norm_eps.unwrap_or(defaults.rms_norm_eps),
            tie_word_embeddings: composite_tie
                .unwrap_or(self.tie_word_embeddings.unwrap_or(defaults.tie_word_embeddings)),
            rope_theta,
            partial_rotary_factor,
            linear_conv_kernel_dim: self.linear_conv_kernel_dim.unwrap_or(defaults.linear_conv_kernel_dim),
            linear_key_head_dim: self.linear_key_head_dim.unwrap_or(defaults.linear_key_head_dim),
            linear_value_head_dim: self.linear_value_head_dim.unwrap_or(defaults.linear_value_head_dim),
            linear_num_key_heads: self.linear_num_key_heads.unwrap_or(defaults.linear_num_key_heads),
            linear_num_value_heads: self.linear_num_value_heads.unwrap_or(defaults.linear_num_value_heads),
            layer_types,
            feed_forward,
        })
    }
}
