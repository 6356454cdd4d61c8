//! `--model FILE.gguf` end to end, on files made by llama.cpp's tools
//! (`tests/fixtures/gguf/models.py`): the binary reads the model, its settings and its tokenizer
//! from the file, and `decider_config.json` from beside it.

use std::process::Command;

use integration_tests::{Reference, fixture_path, relative_check};

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

/// `decider prompt` builds the same rows from a GGUF file's vocabulary (the converter's
/// `--vocab-only` file of the committed tokenizer) as from that `tokenizer.json`; without a
/// `decider_config.json` beside the file it says what is missing.
#[test]
fn prompt_reads_the_tokenizer_of_a_gguf_file_and_the_settings_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join("vocab.gguf");
    let mut file = std::fs::File::create(&gguf).unwrap();
    let gz = std::fs::File::open(fixture_path("gguf/vocab.gguf.gz")).unwrap();
    std::io::copy(&mut flate2::read::GzDecoder::new(gz), &mut file).unwrap();
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
