//! Errors of the decision runtime. Each names what is wrong: the file, the field, the question.

use std::path::{Path, PathBuf};

/// Everything the runtime can refuse or fail at.
#[derive(Debug, thiserror::Error)]
pub enum DeciderError {
    /// A question the reference refuses; the message is the reference's own (HTTP 422).
    #[error("{0}")]
    InvalidQuestion(String),
    /// A request that exceeds a size limit (HTTP 413); the message names the limit.
    #[error("{0}")]
    TooLarge(String),
    /// Reading a file failed; the I/O error is the `source`, so a chain of errors names it once.
    #[error("reading {path}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{0}")]
    Tokenizer(String),
    /// `decider_config.json` is malformed; the message names the key.
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Load(#[from] qwen35::LoadError),
    #[error("{0}")]
    Model(String),
    /// The model's logits at an answer slot are NaN or infinite (broken weights or backend):
    /// nothing is answered rather than probabilities of NaN.
    #[error("{0}")]
    NonFinite(String),
}

impl DeciderError {
    /// Prefixes a tokenizer or config error with the file it came from.
    pub(crate) fn in_file(self, path: &Path) -> Self {
        match self {
            Self::Tokenizer(m) => Self::Tokenizer(format!("{}: {m}", path.display())),
            Self::Config(m) => Self::Config(format!("{}: {m}", path.display())),
            other => other,
        }
    }
}
