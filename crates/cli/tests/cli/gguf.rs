//! `--model FILE.gguf` end to end, on files made by llama.cpp's tools
//! (`tests/fixtures/gguf/models.py`): the binary reads the model, its settings and its tokenizer
//! from the file, and `decider_config.json` from beside it.

use std::process::Command;

use decider_ops::GgmlType;
use integration_tests::gguf_values::{values_in_checkpoint, write_values};
use integration_tests::gguf_writer::{Part, parts, write_gguf};
use integration_tests::server::Server;
use integration_tests::{Reference, dense_with_vocab, fixture_copy, fixture_path, relative_check};
use qwen35::Qwen35Config;
use qwen35::gguf::GgufFile;
use qwen35::gguf::Value;
use serde_json::{Value as Json, json};

use crate::serve::assert_close;

fn decider() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_decider"));
    command.env("RUST_BACKTRACE", "0");
    command
}

/// Runs `decider forward` on `model` with `weights` and returns the logits it wrote.
fn forward(model: &std::path::Path, ids: &str, weights: &str, out: &std::path::Path) -> Vec<f32> {
    let output = decider()
        .args(["forward", "--model"])
        .arg(model)
        .args(["--ids", ids, "--backend", "ndarray", "--weights", weights, "--out"])
        .arg(out)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}: {}", model.display(), String::from_utf8_lossy(&output.stderr));
    let bytes = std::fs::read(out).unwrap();
    npyz::NpyFile::new(&bytes[..]).unwrap().into_vec().unwrap()
}

/// `decider forward` on the MoE fixture's BF16 file (its weights exactly) writes transformers'
/// logits in f32, and held as stored (`auto`: bf16, whose CPU products round the activations)
/// the logits of its checkpoint loaded in bf16.
#[test]
fn forward_reads_a_gguf_file() {
    let reference = Reference::open("moe");
    let ids = reference.input_ids::<burn::backend::NdArray>("len7", &Default::default());
    let ids: Vec<String> = ids.into_data().iter::<i64>().map(|id| id.to_string()).collect();
    let ids = ids.join(",");
    let (expected, _) = reference.f32("len7.logits");
    let dir = tempfile::tempdir().unwrap();
    let gguf = fixture_path("gguf/moe-bf16.gguf");
    let logits = forward(&gguf, &ids, "f32", &dir.path().join("f32.npy"));
    let error = relative_check("moe-bf16.gguf --weights f32", &logits, &expected, 1e-4);
    println!("moe-bf16.gguf --weights f32: logits within {error:.1e} of transformers'");
    let folder = forward(&fixture_path("moe/save_pretrained"), &ids, "bf16", &dir.path().join("folder.npy"));
    let logits = forward(&gguf, &ids, "auto", &dir.path().join("auto.npy"));
    let error = relative_check("moe-bf16.gguf --weights auto", &logits, &folder, 1e-4);
    println!("moe-bf16.gguf --weights auto: logits within {error:.1e} of the checkpoint's in bf16");
}

/// A file's `metadata` with its tokenizer keys replaced by those of `vocab`.
fn with_tokenizer(metadata: Vec<(String, Value)>, vocab: &GgufFile) -> Vec<(String, Value)> {
    let tokenizer = vocab.metadata().iter().filter(|(key, _)| key.starts_with("tokenizer."));
    metadata
        .into_iter()
        .filter(|(key, _)| !key.starts_with("tokenizer."))
        .chain(tokenizer.map(|(key, value)| (key.clone(), value.clone())))
        .collect()
}

/// The committed vocabulary file, unpacked into `dir`.
fn vocab_file(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("vocab.gguf");
    let mut file = std::fs::File::create(&path).unwrap();
    let gz = std::fs::File::open(fixture_path("gguf/vocab.gguf.gz")).unwrap();
    std::io::copy(&mut flate2::read::GzDecoder::new(gz), &mut file).unwrap();
    path
}

/// `decider decide` answers from a GGUF file as from the checkpoint it holds: a file composed of
/// parts llama.cpp's tools made (the dense BF16 file's settings and tensors, the vocabulary file's
/// tokenizer) and an embedding of the tokenizer's 248,320 rows (that of the folder), beside a
/// `decider_config.json`, gives the answers of the folder with the same weights, tokenizer and
/// config, both held as stored (bf16).
#[test]
fn decide_answers_from_a_gguf_file_as_from_its_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let vocab = GgufFile::open(vocab_file(dir.path())).unwrap();
    let rows = 248_320;
    let folder = dense_with_vocab(rows, None);
    std::fs::write(folder.path().join("tokenizer.json"), decider::Tokenizer::test_tokenizer_json()).unwrap();
    let config = r#"{"temperature": 1.3, "isolated_levels": true}"#;
    std::fs::write(folder.path().join("decider_config.json"), config).unwrap();
    std::fs::write(dir.path().join("decider_config.json"), config).unwrap();

    let checkpoint = std::fs::read(folder.path().join("model.safetensors")).unwrap();
    let checkpoint = safetensors::SafeTensors::deserialize(&checkpoint).unwrap();
    let embeddings = checkpoint.tensor("model.embed_tokens.weight").unwrap();
    assert_eq!(embeddings.dtype(), safetensors::Dtype::BF16);
    let dense = GgufFile::open(fixture_path("gguf/dense-bf16.gguf")).unwrap();
    let (metadata, _) = parts(&dense);
    let metadata = with_tokenizer(metadata, &vocab);
    let tensors: Vec<Part> = dense
        .tensors()
        .iter()
        .map(|(name, tensor)| match name.as_str() {
            "token_embd.weight" => Part {
                name: name.clone(),
                dims: embeddings.shape().to_vec(),
                ggml_type: GgmlType::Bf16,
                bytes: embeddings.data().to_vec(),
            },
            _ => Part {
                name: name.clone(),
                dims: tensor.dims.clone(),
                ggml_type: tensor.ggml_type,
                bytes: dense.tensor(name).unwrap().1.to_vec(),
            },
        })
        .collect();
    let gguf = dir.path().join("dense.gguf");
    write_gguf(&gguf, &metadata, &tensors);

    let decide = |model: &std::path::Path| {
        let output = decider()
            .args(["decide", "--backend", "ndarray", "--model"])
            .arg(model)
            .args(["--state", "My card was charged twice this month and nobody answers my emails."])
            .args([
                "--question",
                r#"{"type": "choice", "instructions": "Which team?", "options": ["billing", "technical", "sales"]}"#,
            ])
            .args(["--question", r#"{"type": "noul", "instructions": "Is the customer angry?"}"#])
            .output()
            .unwrap();
        assert!(output.status.success(), "{}: {}", model.display(), String::from_utf8_lossy(&output.stderr));
        String::from_utf8(output.stdout).unwrap()
    };
    let (from_file, from_folder) = (decide(&gguf), decide(folder.path()));
    assert!(from_file.contains(r#""choice""#) && from_file.contains(r#""noul""#), "{from_file}");
    assert_eq!(from_file, from_folder);
}

/// The rows of the token tables the served models read: the 248,320 of the committed tokenizer
/// (the fixtures' own tables have a few hundred), `hidden` wide, values of a fixed pattern
/// (`offset` tells the embeddings from the output head) rounded to bf16.
fn vocab_table(hidden: usize, offset: usize) -> Vec<f32> {
    let value = |i: usize| ((i * 7919 + offset) % 1999) as f32 / 1999.0 - 0.5;
    (0..248_320 * hidden).map(|i| half::bf16::from_f32(value(i)).to_f32()).collect()
}

/// `decider serve --model FILE.gguf` answers from each file llama.cpp's tools made of the fixture
/// models (F16, BF16, Q8_0, Q4_0, Q4_K_M, Q5_K_M; dense and MoE) as from the checkpoint folder
/// holding the file's values (llama.cpp's dequantization; `out_proj`'s value heads put back in
/// the checkpoint's order where the file keeps them tiled), both read in f32: the same
/// probabilities within 1e-4. To be served, each file takes the committed vocabulary file's
/// tokenizer and token tables of its 248,320 tokens (the same in the folder).
#[test]
fn serve_answers_from_every_gguf_file_as_from_its_values_in_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let vocab = GgufFile::open(vocab_file(dir.path())).unwrap();
    let config_json = r#"{"temperature": 1.3}"#;
    std::fs::write(dir.path().join("decider_config.json"), config_json).unwrap();
    let request = json!({
        "model": "decider",
        "state": {"ticket": "My card was charged twice this month and nobody answers my emails."},
        "questions": {
            "team": {"type": "choice", "instructions": "Which team?", "options": ["billing", "technical", "sales"]},
            "angry": {"type": "noul", "instructions": "Is the customer angry?"},
            "severity": {"type": "score", "instructions": "How severe?", "criteria": {"0": "none", "1": "minor", "2": "major"}}
        }
    })
    .to_string();
    let answers = |model: &std::path::Path| {
        let mut command = decider();
        command
            .args(["serve", "--backend", "ndarray", "--weights", "f32", "--addr", "127.0.0.1:0", "--model"])
            .arg(model);
        let server = Server::spawn(command);
        let (status, response) = server.post("/v1/systemone", &request);
        assert_eq!(status, 200, "{}: {response}", model.display());
        response["answers"].clone()
    };
    let files: [(&str, &[&str]); 2] = [
        ("dense", &["f16", "bf16", "q8_0", "q4_0", "q4_k_m", "q5_k_m"]),
        ("moe", &["bf16", "f16", "q8_0", "q4_0", "q4_k_m", "q5_k_m"]),
    ];
    for (model, types) in files {
        let config = Qwen35Config::from_file(fixture_path(&format!("{model}/save_pretrained/config.json"))).unwrap();
        let hidden = config.hidden_size;
        let tables = [("model.embed_tokens.weight", "token_embd.weight", 0), ("lm_head.weight", "output.weight", 1)];
        for ggml_type in types {
            let name = format!("{model}-{ggml_type}");
            let file = GgufFile::open(fixture_path(&format!("gguf/{name}.gguf"))).unwrap();
            let (mut values, _) = values_in_checkpoint(&file, &config);
            let (metadata, mut tensors) = parts(&file);
            for (checkpoint, in_file, offset) in tables {
                let Some(part) = tensors.iter_mut().find(|part| part.name == in_file) else { continue };
                let table = vocab_table(hidden, offset);
                let bytes = table.iter().flat_map(|v| half::bf16::from_f32(*v).to_le_bytes()).collect();
                *part = Part { name: in_file.into(), dims: vec![248_320, hidden], ggml_type: GgmlType::Bf16, bytes };
                values.insert(checkpoint.into(), (vec![248_320, hidden], table));
            }
            let gguf = dir.path().join(format!("{name}.gguf"));
            write_gguf(&gguf, &with_tokenizer(metadata, &vocab), &tensors);

            let folder = fixture_copy(&format!("{model}/save_pretrained"));
            write_values(&folder.path().join("model.safetensors"), &values);
            let config_path = folder.path().join("config.json");
            let mut folder_config: Json =
                serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
            folder_config["vocab_size"] = 248_320.into();
            std::fs::write(&config_path, folder_config.to_string()).unwrap();
            std::fs::write(folder.path().join("tokenizer.json"), decider::Tokenizer::test_tokenizer_json()).unwrap();
            std::fs::write(folder.path().join("decider_config.json"), config_json).unwrap();

            let (from_file, from_folder) = (answers(&gguf), answers(folder.path()));
            assert_eq!(from_file["team"]["probabilities"].as_object().map(|p| p.len()), Some(3), "{name}: {from_file}");
            assert_close(&from_file, &from_folder, 1e-4, &name);
            std::fs::remove_file(&gguf).unwrap();
        }
    }
}

/// `decider prompt` builds the same rows from a GGUF file's vocabulary (the converter's
/// `--vocab-only` file of the committed tokenizer) as from that `tokenizer.json`; without a
/// `decider_config.json` beside the file it says what is missing.
#[test]
fn prompt_reads_the_tokenizer_of_a_gguf_file_and_the_settings_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = vocab_file(dir.path());
    let request = r#"{"state": {"ticket": "Charged twice, nobody answers"}, "questions": {"team": {"type": "choice", "instructions": "Which team?", "options": ["billing", "technical", "sales"]}, "angry": {"type": "noul", "instructions": "Is the customer angry?"}}}"#;
    let prompt = |model: &std::path::Path| {
        decider().args(["prompt", "--model"]).arg(model).args(["--request", request]).output().unwrap()
    };
    let missing = prompt(&gguf);
    assert!(!missing.status.success());
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(stderr.contains("has no decider_config.json beside it"), "{stderr}");

    let config = r#"{"temperature": 1.3, "isolated_levels": true}"#;
    std::fs::write(dir.path().join("decider_config.json"), config).unwrap();
    let folder = tempfile::tempdir().unwrap();
    std::fs::write(folder.path().join("tokenizer.json"), decider::Tokenizer::test_tokenizer_json()).unwrap();
    std::fs::write(folder.path().join("decider_config.json"), config).unwrap();
    let (from_file, from_folder) = (prompt(&gguf), prompt(folder.path()));
    assert!(from_file.status.success(), "{}", String::from_utf8_lossy(&from_file.stderr));
    assert!(from_folder.status.success(), "{}", String::from_utf8_lossy(&from_folder.stderr));
    let rows = String::from_utf8(from_file.stdout).unwrap();
    assert!(rows.len() > 100, "{rows}");
    assert_eq!(rows, String::from_utf8(from_folder.stdout).unwrap());
}
