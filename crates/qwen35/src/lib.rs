//! Qwen3.5 dense and Qwen3.5-MoE (hybrid Gated DeltaNet + gated attention) in burn, generic over
//! the backend.
//!
//! Each layer is a burn [`Module`](burn::module::Module) with a `Config`, so it can be reused in
//! other burn models; [`Qwen35Model`] stacks them and [`load_model`] fills it from a Hugging Face
//! checkpoint folder (memory-mapped safetensors, both the released and the `save_pretrained`
//! layouts). The two special ops (expert count, triangular inverse) come from `decider-ops`:
//! the backend must implement [`decider_ops::Qwen35Ops`].

pub mod attention;
pub mod cache;
pub mod checkpoint;
pub mod config;
pub mod decoder;
pub mod delta_net;
pub mod delta_rule;
mod error;
pub mod gguf;
pub mod loader;
mod memory;
pub mod mlp;
pub mod model;
pub mod model_file;
pub mod moe;
pub mod norm;
pub mod projection;
pub mod quantize;
pub mod rope;
pub mod seeded;
mod shards;
pub mod token_table;
pub mod value_heads;
pub mod weight;
pub mod weight_choice;
pub mod weight_format;
pub mod weights;

pub use cache::ModelCache;
pub use config::{FeedForwardType, MoeConfig, Qwen35Config, TokenMixerKind};
pub use error::{ConfigError, LoadError};
pub use memory::CallMemory;
pub use model::{ForwardTrace, LayerTrace, PrefillBlocks, Qwen35Model};
pub use weight_choice::WeightChoice;
pub use weight_format::WeightFormat;
pub use weights::{load_model, load_model_with_weights};

/// The backend bound of the Qwen3.5 layers: burn's `Backend` plus the special ops of
/// `decider-ops` that they call (the MoE's tokens-per-expert count, the delta rule's scan, the
/// causal conv, the matmuls with f32, Q8_0 and Q4_0 weights, the sigmoid and SiLU gates, reshapes
/// in place). Every backend with those extensions has it.
pub trait Qwen35Ops:
    decider_ops::ExpertCount
    + decider_ops::GatedDeltaRule
    + decider_ops::CausalConv1d
    + weight_format::FormatOps
    + decider_ops::DenseMatmul
    + decider_ops::Gating
    + decider_ops::Reshape
{
}

impl<B> Qwen35Ops for B where
    B: decider_ops::ExpertCount
        + decider_ops::GatedDeltaRule
        + decider_ops::CausalConv1d
        + weight_format::FormatOps
        + decider_ops::DenseMatmul
        + decider_ops::Gating
        + decider_ops::Reshape
{
}
