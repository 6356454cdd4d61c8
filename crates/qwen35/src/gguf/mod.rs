//! GGUF files, llama.cpp's model files (`docs/gguf.md`): the file itself ([`GgufFile`]), the
//! model's settings read from its metadata, and its tensors read under the checkpoint's names
//! with llama.cpp's converter's transforms undone ([`GgufSource`]), so a Qwen3.5 model loads from
//! a GGUF file through the same [`crate::loader`] as from a safetensors folder.

mod config;
mod file;
mod heads;
mod held;
mod names;
mod source;

pub use config::config_of;
pub use file::{Array, GgufFile, GgufTensor, MAX_ARRAY, MAX_ENTRIES, MAX_KEY, MAX_NAME, Metadata, Tensors, Value};
pub use source::{GgufSource, load_gguf, model_of};
