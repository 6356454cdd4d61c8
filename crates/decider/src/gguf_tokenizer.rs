//! The tokenizer of a GGUF file, built from the file's own vocabulary: llama.cpp's converter
//! writes a `tokenizer.json`'s tokens (`tokenizer.ggml.tokens`, by id, with a type each), its
//! merges (`tokenizer.ggml.merges`, `"a b"`) and the name of its pre-tokenizer
//! (`tokenizer.ggml.pre`), not the pre-tokenizer itself. The pipeline around the vocabulary
//! (normalizer, pre-tokenizer, decoder, the BPE options) is written here for the one pre-tokenizer
//! decider's models use, Qwen3.5's (`qwen35`), as its `tokenizer.json` has it
//! (`assets/tokenizer/qwen3.5-tokenizer.json.gz`).

use ahash::AHashMap;
use qwen35::gguf::{Array, GgufFile, Value};
use tokenizers::AddedToken;
use tokenizers::models::bpe::BPE;

use crate::error::DeciderError;
use crate::tokenizer::Tokenizer;

/// The pre-tokenizers read, by their GGUF name: Qwen3.5's `tokenizer.json` without its model and
/// added tokens.
const PIPELINES: [(&str, &str); 1] = [(
    "qwen35",
    r#"{
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
             "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
        "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
        "model": {"type": "BPE", "vocab": {}, "merges": []}
    }"#,
)];

/// The pipeline of pre-tokenizer `pre` (a `tokenizer.json` without its model's vocabulary and
/// merges and without added tokens), if this build knows it.
pub fn pipeline(pre: &str) -> Option<&'static str> {
    PIPELINES.iter().find(|(name, _)| *name == pre).map(|(_, pipeline)| *pipeline)
}

/// llama.cpp's token types (`enum llama_token_type`) that are not the model's own tokens: the
/// added tokens (special ones are `CONTROL`) and the padding rows of the embedding.
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const UNUSED: i32 = 5;

impl Tokenizer {
    /// The tokenizer of GGUF file `file` (a byte-level BPE vocabulary, `tokenizer.ggml.model`
    /// `gpt2`, with a pre-tokenizer of [`PIPELINES`]).
    pub fn from_gguf(file: &GgufFile) -> Result<Self, DeciderError> {
        let refuse = |reason: String| {
            DeciderError::Tokenizer(format!("cannot build the tokenizer of {}: {reason}", file.path().display()))
        };
        let metadata = file.metadata();
        let get = |key: &str| metadata.get(key).ok_or_else(|| refuse(format!("it has no `{key}`")));
        let string = |key: &str| match get(key)? {
            Value::String(s) => Ok(s.as_str()),
            other => Err(refuse(format!("`{key}` is a {}, not a string", other.type_name()))),
        };
        let strings = |key: &str| match get(key)? {
            Value::Array(Array::String(s)) => Ok(s),
            other => Err(refuse(format!("`{key}` is a {}, not an array of strings", other.type_name()))),
        };
        let model = string("tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(refuse(format!("its tokenizer is `{model}`, not a byte-level BPE (`gpt2`)")));
        }
        let pre = string("tokenizer.ggml.pre")?;
        let Some(pipeline) = pipeline(pre) else {
            let known: Vec<&str> = PIPELINES.iter().map(|(name, _)| *name).collect();
            return Err(refuse(format!("its pre-tokenizer is `{pre}`; this build knows {}", known.join(", "))));
        };
        let tokens = strings("tokenizer.ggml.tokens")?;
        let types = match get("tokenizer.ggml.token_type")? {
            Value::Array(Array::I32(types)) if types.len() == tokens.len() => types,
            Value::Array(Array::I32(types)) => {
                return Err(refuse(format!(
                    "`tokenizer.ggml.token_type` has {} entries for {} tokens",
                    types.len(),
                    tokens.len()
                )));
            }
            other => {
                return Err(refuse(format!(
                    "`tokenizer.ggml.token_type` is a {}, not an i32 array",
                    other.type_name()
                )));
            }
        };
        let mut merges = Vec::new();
        for (i, merge) in strings("tokenizer.ggml.merges")?.iter().enumerate() {
            let (a, b) = merge.split_once(' ').ok_or_else(|| refuse(format!("merge {i} ({merge:?}) has no space")))?;
            merges.push((a.to_owned(), b.to_owned()));
        }
        let mut vocab = AHashMap::new();
        let mut added = Vec::new();
        for (id, (token, &kind)) in tokens.iter().zip(types).enumerate() {
            match kind {
                UNUSED => {}
                CONTROL | USER_DEFINED => added.push((id, AddedToken::from(token.clone(), kind == CONTROL))),
                _ => {
                    vocab.insert(token.clone(), id as u32);
                }
            }
        }
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .ignore_merges(true)
            .build()
            .map_err(|e| refuse(format!("its vocabulary and merges do not make a BPE model: {e}")))?;
        let mut inner: tokenizers::Tokenizer = serde_json::from_str(pipeline).expect("the pipelines are valid");
        inner.with_model(bpe);
        let tokens_added: Vec<AddedToken> = added.iter().map(|(_, token)| token.clone()).collect();
        inner.add_tokens(&tokens_added);
        for (id, token) in &added {
            if inner.token_to_id(&token.content) != Some(*id as u32) {
                return Err(refuse(format!(
                    "added token {:?} is id {id} in the file but {:?} in the tokenizer (it is also a normal token?)",
                    token.content,
                    inner.token_to_id(&token.content)
                )));
            }
        }
        Tokenizer::new(inner)
    }
}
