//! Qwen3.5 dense and Qwen3.5-MoE (hybrid Gated DeltaNet + gated attention) in burn, generic over
//! the backend.
//!
//! Each layer is a burn [`Module`](burn::module::Module) with a `Config`, so it can be reused in
//! other burn models; [`Qwen35Model`] stacks them and [`load_model`] fills it from a Hugging Face
//! checkpoint folder (memory-mapped safetensors, both the released and the `save_pretrained`
//! layouts). The two special ops (expert count, triangular inverse) come from `decider-ops`:
//! the backend must implement [`decider_ops::DeciderOps`].

pub mod attention;
pub mod cache;
pub mod checkpoint;
pub mod config;
pub mod decoder;
pub mod delta_net;
pub mod delta_rule;
mod error;
pub mod mlp;
pub mod model;
pub mod moe;
pub mod norm;
pub mod rope;
pub mod weights;

pub use cache::ModelCache;
pub use config::{LayerType, MoeConfig, Qwen35Config};
pub use error::{ConfigError, LoadError};
pub use model::{ForwardTrace, LayerTrace, Qwen35Model};
pub use weights::load_model;
