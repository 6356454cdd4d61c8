//! Errors of configuration parsing and weight loading: each names the file, field or tensor.

use std::path::PathBuf;

/// A `config.json` that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {cause}")]
    Io { path: PathBuf, cause: std::io::Error },
    #[error("config is not valid JSON for a Qwen3.5 text config: {0}")]
    Json(serde_json::Error),
    #[error("config field `{field_path}`: {message}")]
    Field { field_path: String, message: String },
    #[error("{0}")]
    Invalid(String),
}

/// A checkpoint that cannot be loaded into the model.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot read {path}: {cause}")]
    Io { path: PathBuf, cause: std::io::Error },
    #[error("cannot write {path}: {cause}")]
    Write { path: PathBuf, cause: std::io::Error },
    #[error("{path} is not a valid safetensors file (truncated or corrupt?): {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("{path} is not a GGUF file this build reads: {reason}")]
    Gguf { path: PathBuf, reason: String },
    #[error("invalid shard index {path}: {reason}")]
    Index { path: PathBuf, reason: String },
    #[error("no safetensors weights in {0} (expected model.safetensors or model.safetensors.index.json)")]
    NoWeights(PathBuf),
    #[error("missing tensor `{name}` in the checkpoint")]
    MissingTensor { name: String },
    #[error("tensor `{name}` has shape {found:?}, expected {expected:?}")]
    ShapeMismatch { name: String, expected: Vec<usize>, found: Vec<usize> },
    #[error("tensor `{name}` has dtype {dtype}, which is not supported (use F32, BF16 or F16)")]
    UnsupportedDtype { name: String, dtype: String },
    #[error(
        "tensor `{name}` has {count} NaN or infinite values (the first at flat index {first}): the checkpoint is broken"
    )]
    NonFinite { name: String, count: usize, first: usize },
    #[error(
        "tensor `{name}` has {count} values beyond the range of {format} (the first at flat index {first}): load it as bf16 or f32"
    )]
    OutOfRange { name: String, count: usize, first: usize, format: crate::weight_format::WeightFormat },
    /// A weight of a quantized folder whose blocks are not what their format says, or that is
    /// stored in a form this build does not read.
    #[error("tensor `{name}`: {reason}")]
    Blocks { name: String, reason: String },
    #[error("{path} holds weights in a format this build does not read: {reason}")]
    UnknownFormat { path: PathBuf, reason: String },
    /// `places`: "in FILE" or "in FILE and in FILE".
    #[error("tensor `{name}` is stored twice: {places}")]
    DuplicateTensor { name: String, places: String },
}
