//! One decoder layer (transformers `models/qwen3_5/modeling_qwen3_5.py`): pre-norm residual blocks around a token mixer (Gated DeltaNet or
//! gated attention) and a feed-forward (dense SwiGLU or sparse MoE).

use crate::Qwen35Ops;
use crate::loader::{Load, Loader};
use crate::weight_format::{FormatOps, WeightFormat};
use burn::config::Config;
use burn::module::Module;
use burn::tensor::{Tensor, backend::Backend};

use crate::TokenMixerKind;
use crate::attention::{GatedAttention, GatedAttentionConfig};
use crate::cache::TokenMixerState;
use crate::delta_net::{GatedDeltaNet, GatedDeltaNetConfig};
use crate::mlp::{Mlp, MlpConfig};
use crate::moe::{SparseMoe, SparseMoeConfig};
use crate::norm::{RmsNorm, RmsNormConfig};
use crate::rope::RotaryEmbedding;

/// Which mixer a layer has ([`TokenMixerKind`]), with its widths.
#[derive(Config, Debug)]
pub enum TokenMixerConfig {
    LinearAttn(GatedDeltaNetConfig),
    SelfAttn(GatedAttentionConfig),
}

/// Which feed-forward a layer has, with its configuration.
#[derive(Config, Debug)]
pub enum FeedForwardConfig {
    Dense(MlpConfig),
    Sparse(SparseMoeConfig),
}

#[derive(Config, Debug)]
pub struct DecoderLayerConfig {
    pub hidden_size: usize,
    pub mixer: TokenMixerConfig,
    pub mlp: FeedForwardConfig,
    #[config(default = 1e-6)]
    pub rms_norm_eps: f64,
}

impl DecoderLayerConfig {
    /// A lazily initialised f32 layer.
    pub fn init<B: FormatOps>(&self, device: &B::Device) -> DecoderLayer<B> {
        self.load(&Load::lazy(device, WeightFormat::F32).root())
    }

    /// The layer `{at}.*`, its blocks named as the checkpoint names them.
    pub fn load<B: FormatOps>(&self, at: &Loader<B>) -> DecoderLayer<B> {
        let norm = RmsNormConfig::new(self.hidden_size).with_eps(self.rms_norm_eps);
        DecoderLayer {
            input_layernorm: norm.load(&at.at("input_layernorm")),
            mixer: match &self.mixer {
                TokenMixerConfig::LinearAttn(config) => TokenMixer::LinearAttn(config.load(&at.at("linear_attn"))),
                TokenMixerConfig::SelfAttn(config) => TokenMixer::SelfAttn(config.load(&at.at("self_attn"))),
            },
            post_attention_layernorm: norm.load(&at.at("post_attention_layernorm")),
            mlp: match &self.mlp {
                FeedForwardConfig::Dense(config) => FeedForward::Dense(config.load(&at.at("mlp"))),
                FeedForwardConfig::Sparse(config) => FeedForward::Sparse(config.load(&at.at("mlp"))),
            },
        }
    }
}

/// The mixer of a layer, named like the checkpoint's module.
#[derive(Module, Debug)]
#[allow(clippy::large_enum_variant, reason = "one a layer, built once; a box would add a hop to every call")]
pub enum TokenMixer<B: Backend> {
    /// `linear_attn`.
    LinearAttn(GatedDeltaNet<B>),
    /// `self_attn`.
    SelfAttn(GatedAttention<B>),
}

impl<B: Backend> TokenMixer<B> {
    /// Its kind.
    pub fn kind(&self) -> TokenMixerKind {
        match self {
            TokenMixer::LinearAttn(_) => TokenMixerKind::LinearAttn,
            TokenMixer::SelfAttn(_) => TokenMixerKind::SelfAttn,
        }
    }
}

impl<B: Qwen35Ops> TokenMixer<B> {
    /// `x`: the normed residual stream `[batch, len, hidden]`; `past`: this layer's state from
    /// earlier tokens (a state of the other kind is never passed: each layer keeps its own).
    /// Returns the mixer's output and its state after these tokens.
    pub fn forward(
        &self,
        x: Tensor<B, 3>,
        past: Option<&TokenMixerState<B>>,
        call: &CallInputs<B>,
    ) -> (Tensor<B, 3>, TokenMixerState<B>) {
        match self {
            TokenMixer::LinearAttn(delta_net) => {
                let past = match past {
                    Some(TokenMixerState::LinearAttn(state)) => Some(state),
                    _ => None,
                };
                let (out, state) = delta_net.forward(x, past);
                (out, TokenMixerState::LinearAttn(state))
            }
            TokenMixer::SelfAttn(attention) => {
                let past = match past {
                    Some(TokenMixerState::SelfAttn(cache)) => Some(cache),
                    _ => None,
                };
                let (out, cache) = attention.forward(x, past, call.rope, &call.cos, &call.sin, call.key_block);
                (out, TokenMixerState::SelfAttn(cache))
            }
        }
    }
}

/// The feed-forward of a layer (`mlp` in the checkpoint).
#[derive(Module, Debug)]
#[allow(clippy::large_enum_variant, reason = "one a layer, built once; a box would add a hop to every call")]
pub enum FeedForward<B: Backend> {
    Dense(Mlp<B>),
    Sparse(SparseMoe<B>),
}

#[derive(Module, Debug)]
pub struct DecoderLayer<B: Backend> {
    pub input_layernorm: RmsNorm<B>,
    pub mixer: TokenMixer<B>,
    pub post_attention_layernorm: RmsNorm<B>,
    pub mlp: FeedForward<B>,
}

/// What one layer produced: the residual stream after it, the outputs of its two blocks (for
/// layer-by-layer comparison with a reference) and its state for the next call.
pub struct LayerOutput<B: Backend> {
    pub hidden: Tensor<B, 3>,
    pub mixer: Tensor<B, 3>,
    pub mlp: Tensor<B, 3>,
    pub state: TokenMixerState<B>,
}

/// What every layer of one call shares: the RoPE tables for the call's positions and the
/// attention's key block.
pub struct CallInputs<'a, B: Backend> {
    pub rope: &'a RotaryEmbedding,
    pub cos: Tensor<B, 2>,
    pub sin: Tensor<B, 2>,
    pub key_block: usize,
}

impl<B: Qwen35Ops> DecoderLayer<B> {
    /// The f32 values [`DecoderLayer::forward`] keeps alive at once per token row: the residual
    /// stream, the normed input, both blocks' outputs and their sums (6 rows of the hidden
    /// width), beside the larger of its two blocks' own.
    pub fn working_values(&self) -> usize {
        let [hidden] = self.input_layernorm.weight.dims();
        let mixer = match &self.mixer {
            TokenMixer::SelfAttn(attention) => attention.working_values(),
            TokenMixer::LinearAttn(delta_net) => delta_net.working_values(),
        };
        let feed_forward = match &self.mlp {
            FeedForward::Dense(mlp) => mlp.working_values(),
            FeedForward::Sparse(moe) => moe.working_values(),
        };
        6 * hidden + mixer.max(feed_forward)
    }

    /// `hidden`: `[batch, len, hidden]`; `past`: this layer's state from earlier tokens.
    pub fn forward(
        &self,
        hidden: Tensor<B, 3>,
        past: Option<&TokenMixerState<B>>,
        call: &CallInputs<B>,
    ) -> LayerOutput<B> {
        let x = self.input_layernorm.forward(hidden.clone());
        let (mixer, state) = self.mixer.forward(x, past, call);
        let hidden = hidden + mixer.clone();
        let x = self.post_attention_layernorm.forward(hidden.clone());
        let mlp = match &self.mlp {
            FeedForward::Dense(mlp) => mlp.forward(x),
            FeedForward::Sparse(moe) => moe.forward(x),
        };
        LayerOutput { hidden: hidden + mlp.clone(), mixer, mlp, state }
    }
}
