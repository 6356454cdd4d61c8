//! `decider prompt`, `decide` and `info` on the demo model, as a user runs them.

use std::process::Command;

use serde_json::{Value, json};

fn decider(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_decider")).args(args).output().expect("run decider");
    (out.status.success(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

#[test]
fn prompt_prints_the_reference_rows() {
    // The first reference case of tests/fixtures/prompts (decider-ai 1.10.0's own rows).
    let fixture: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/prompts/prompts.json"))
            .unwrap(),
    )
    .unwrap();
    // A case without Score questions: the demo config's isolated levels do not change it.
    let case = fixture["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "options_255_packed_with_noul")
        .cloned()
        .expect("fixture case");
    let body =
        json!({"state": case["state"], "questions": case["questions"], "independent": case["independent"]}).to_string();
    let dir = tempfile::tempdir().unwrap();
    let request = dir.path().join("request.json");
    std::fs::write(&request, &body).unwrap();
    let expected: Vec<Value> =
        case["rows"].as_array().unwrap().iter().map(|r| json!({"ids": r["ids"], "slots": r["slots"]})).collect();
    // The request from a file (@FILE, as `decide` takes its state, or FILE) or inline.
    for argument in [format!("@{}", request.display()), request.display().to_string(), body] {
        let (ok, stdout, stderr) = decider(&["prompt", "--model", "demo", "--request", &argument]);
        assert!(ok, "{stderr}");
        let printed: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(printed["rows"], Value::Array(expected.clone()), "case {}", case["name"]);
    }
    let missing = dir.path().join("missing.json");
    let (ok, _, stderr) = decider(&["prompt", "--model", "demo", "--request", &missing.display().to_string()]);
    assert!(!ok && stderr.contains("missing.json"), "a missing request file is named: {stderr}");
}

/// `decider prompt` prints the library's rows (`Decider.system_one`, which neutralises "none of
/// the above" options for a model whose config says so) and, with `--server`, the server's
/// (`/v1/systemone`, which never does): decider-ai's own rows for both, from the fixtures.
#[test]
fn prompt_prints_the_library_path_and_with_server_the_servers() {
    let fixture: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/prompts/prompts.json"))
            .unwrap(),
    )
    .unwrap();
    let case = fixture["paths"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "paths_independent" && c["neutralize_none"] == true)
        .cloned()
        .expect("fixture case");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tokenizer.json"), decider::Tokenizer::test_tokenizer_json()).unwrap();
    std::fs::write(
        dir.path().join("decider_config.json"),
        json!({"version": "t", "neutralize_none": true}).to_string(),
    )
    .unwrap();
    let body =
        json!({"state": case["state"], "questions": case["questions"], "independent": case["independent"]}).to_string();
    let rows = |path: &str| -> Value {
        case[path]["rows"].as_array().unwrap().iter().map(|r| json!({"ids": r["ids"], "slots": r["slots"]})).collect()
    };
    assert_ne!(rows("library"), rows("server"), "the case tells the paths apart");
    let model = dir.path().to_str().unwrap();
    for (flags, path) in [(&[][..], "library"), (&["--server"][..], "server")] {
        let (ok, stdout, stderr) = decider(&[&["prompt", "--model", model, "--request", &body][..], flags].concat());
        assert!(ok, "{stderr}");
        let printed: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(printed["rows"], rows(path), "the {path} path");
    }
}

#[test]
fn decide_prints_answers_and_labels_random_weights() {
    let (ok, stdout, stderr) = decider(&[
        "decide",
        "--model",
        "demo",
        "--state",
        "My card was charged twice.",
        "--question",
        r#"team={"type": "choice", "instructions": "Which team?", "criteria": ["billing", "technical"]}"#,
        "--question",
        r#"{"type": "noul", "instructions": "Urgent?"}"#,
    ]);
    assert!(ok, "{stderr}");
    let response: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(response["answers"].as_object().unwrap().keys().collect::<Vec<_>>(), ["team", "q2"]);
    assert!(stderr.contains("random weights"), "{stderr}");
}

#[test]
fn bad_arguments_say_what_is_wrong() {
    let (ok, _, stderr) = decider(&["decide", "--model", "demo", "--state", "s", "--question", "{not json"]);
    assert!(!ok && stderr.contains("--question q1: not valid JSON"), "{stderr}");
    let (ok, _, stderr) = decider(&[
        "decide",
        "--model",
        "demo",
        "--state",
        "s",
        "--question",
        r#"{"type": "choice", "instructions": "x", "criteria": ["a"]}"#,
    ]);
    assert!(!ok && stderr.contains("choice criteria: a map of 2..255 options"), "{stderr}");
    let (ok, _, stderr) = decider(&["info", "--model", "random:/no/such/config.json"]);
    assert!(
        !ok && stderr.contains("random: takes a config.json file, and /no/such/config.json is not one"),
        "{stderr}"
    );
    let (ok, _, stderr) = decider(&["info", "--model", "/no/such/folder"]);
    assert!(!ok && stderr.contains("/no/such/folder is not a model folder"), "{stderr}");
    // A folder that is not a model: every file the command needs and misses, named once.
    let empty = tempfile::tempdir().unwrap();
    let folder = empty.path().display().to_string();
    let (ok, _, stderr) = decider(&["info", "--model", &folder]);
    let all = "it has no config.json, weights (model.safetensors or model.safetensors.index.json) nor tokenizer.json";
    assert!(!ok && stderr.contains(&format!("{folder} is not a model folder: {all}")), "{stderr}");
    assert_eq!(stderr.matches("tokenizer.json").count(), 1, "{stderr}");
    let (ok, _, stderr) = decider(&["prompt", "--model", &folder, "--request", r#"{"state": "s", "questions": {}}"#]);
    assert!(
        !ok && stderr.contains(&format!("{folder} is not a model folder: it has no tokenizer.json")),
        "the prompt needs the tokenizer only: {stderr}"
    );
    std::fs::write(empty.path().join("config.json"), "{}").unwrap();
    std::fs::write(empty.path().join("tokenizer.json"), "{}").unwrap();
    let (ok, _, stderr) = decider(&["info", "--model", &folder]);
    assert!(
        !ok && stderr.contains(&format!(
            "{folder} is not a model folder: it has no weights (model.safetensors or model.safetensors.index.json)"
        )),
        "{stderr}"
    );
    std::fs::remove_file(empty.path().join("config.json")).unwrap();
    std::fs::write(empty.path().join("tokenizer.json"), "{").unwrap();
    let (ok, _, stderr) = decider(&["prompt", "--model", &folder, "--request", r#"{"state": "s", "questions": {}}"#]);
    assert!(
        !ok && !stderr.contains("not a model folder") && stderr.contains("tokenizer.json"),
        "a file that is there but broken is named as such: {stderr}"
    );
    // A Hub id that cannot be fetched (no network here, or no such repository) says which.
    let (ok, _, stderr) = decider(&["info", "--model", "nobody-here/no-such-decider"]);
    assert!(!ok && stderr.contains("downloading nobody-here/no-such-decider from the Hugging Face Hub"), "{stderr}");
    // So does a Hub repository's GGUF file; a GGUF path that is neither a file nor one says so.
    let (ok, _, stderr) = decider(&["info", "--model", "nobody-here/no-such-decider/model-Q8_0.gguf"]);
    assert!(
        !ok && stderr.contains("downloading model-Q8_0.gguf of nobody-here/no-such-decider from the Hugging Face Hub"),
        "{stderr}"
    );
    let (ok, _, stderr) = decider(&["info", "--model", "/no/such/model.gguf"]);
    assert!(!ok && stderr.contains("/no/such/model.gguf: no such GGUF file"), "{stderr}");
}

/// `random:CONFIG`: the demo's random weights and tokenizer at a config's widths (here the MoE
/// test model's, its vocabulary widened to the tokenizer's).
#[test]
fn a_random_model_takes_the_widths_of_a_config() {
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/moe/hf_layout/config.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
    let (layers, hidden) =
        (config["text_config"]["num_hidden_layers"].clone(), config["text_config"]["hidden_size"].clone());
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    // Its own 256-token vocabulary cannot hold the tokenizer's ids: refused, saying so.
    std::fs::write(&path, config.to_string()).unwrap();
    let source = format!("random:{}", path.display());
    let (ok, _, stderr) = decider(&["info", "--model", &source]);
    assert!(!ok && stderr.contains("but the model's embedding has 256 rows"), "{stderr}");

    config["text_config"]["vocab_size"] = json!(248_320);
    std::fs::write(&path, config.to_string()).unwrap();
    let (ok, stdout, stderr) = decider(&["info", "--model", &source]);
    assert!(ok, "{stderr}");
    let info: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (&info["layers"], &info["hidden_size"], &info["random_weights"]),
        (&layers, &hidden, &json!(true)),
        "{info}"
    );
    assert_eq!(info["layer_types"][0], "linear_attention + moe");
    assert_eq!(info["source"], source);
    // In both formats (q8: the rounding of the same network, `tests/weight_formats.rs`).
    for weights in ["f32", "q8"] {
        let question = r#"{"type": "noul", "instructions": "Up?"}"#;
        let (ok, stdout, stderr) =
            decider(&["decide", "--model", &source, "--weights", weights, "--state", "s", "--question", question]);
        assert!(ok, "{weights}: {stderr}");
        let noul =
            serde_json::from_str::<Value>(&stdout).unwrap()["answers"]["q1"]["noul"].as_f64().expect("a noul answer");
        assert!((0.0..=1.0).contains(&noul), "{weights}: {noul}");
    }
    let (ok, stdout, stderr) = decider(&["info", "--model", &source, "--weights", "q8"]);
    assert!(ok, "{stderr}");
    assert_eq!(serde_json::from_str::<Value>(&stdout).unwrap()["weights"], "q8");
}

#[test]
fn info_describes_the_model() {
    let (ok, stdout, stderr) = decider(&["info", "--model", "demo"]);
    assert!(ok, "{stderr}");
    let info: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(info["layers"], 4);
    assert_eq!(info["layer_types"][3], "full_attention + mlp");
    assert_eq!(info["labels"]["count"], 255);
    assert_eq!(info["random_weights"], true);
    assert_eq!(info["weights"], "f32");
}

/// `DECIDER_WEIGHTS` and `DECIDER_BACKEND` choose what `--weights` and `--backend` would (every
/// command has them); the flags win.
#[test]
fn decider_variables_choose_the_weights_and_the_backend_and_flags_win() {
    let info = |args: &[&str], vars: &[(&str, &str)]| -> Value {
        let out = Command::new(env!("CARGO_BIN_EXE_decider"))
            .args(["info", "--model", "demo"])
            .args(args)
            .envs(vars.iter().copied())
            .output()
            .expect("run decider");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    // The last backend of the build: not the default where the build has more than one.
    let (backend, _) = *decider_ops::backend_list::compiled_backends().last().expect("a backend");
    let from_env = info(&[], &[("DECIDER_WEIGHTS", "f16"), ("DECIDER_BACKEND", backend)]);
    assert_eq!((&from_env["weights"], &from_env["backend"]), (&json!("f16"), &json!(backend)), "{from_env}");
    let flags = info(
        &["--weights", "f32", "--backend", "ndarray"],
        &[("DECIDER_WEIGHTS", "f16"), ("DECIDER_BACKEND", backend)],
    );
    assert_eq!((&flags["weights"], &flags["backend"]), (&json!("f32"), &json!("ndarray")), "{flags}");
}

/// `decider quantize --to` names only the formats it writes, in its error too.
#[test]
fn quantize_names_the_formats_it_writes() {
    for (to, expected) in [
        ("q3", "unknown format `q3` to store (expected one of: q8, q4, f16, bf16, q4_k)"),
        ("f32", "f32 keeps the checkpoint's own values (quantize writes q8, q4, f16, bf16, q4_k)"),
    ] {
        let (ok, _, stderr) = decider(&["quantize", "--model", "demo", "--to", to, "--out", "/nonexistent/out"]);
        assert!(!ok && stderr.contains(expected), "--to {to}: {stderr}");
    }
}

/// `--addr` without a host is refused before anything loads, with the forms that name one.
#[test]
fn serve_wants_a_host_and_a_port() {
    for addr in ["8000", ":8000"] {
        let (ok, _, stderr) = decider(&["serve", "--model", "demo", "--addr", addr]);
        assert!(!ok, "--addr {addr} is refused");
        assert!(
            stderr.contains("expected HOST:PORT, such as 127.0.0.1:8000 (this machine only) or 0.0.0.0:8000"),
            "{stderr}"
        );
    }
    let (ok, _, stderr) = decider(&["serve", "--model", "demo", "--addr", "localhost"]);
    assert!(!ok && stderr.contains("expected HOST:PORT"), "{stderr}");
}

/// `decider info` counts the parameters from their shapes, the same in every format, and the
/// bytes they take in the format loaded: 4 a parameter in f32, fewer in the others.
#[test]
fn info_counts_parameters_and_their_bytes_in_every_format() {
    let info = |weights: &str| {
        let (ok, stdout, stderr) = decider(&["info", "--model", "demo", "--weights", weights]);
        assert!(ok, "{weights}: {stderr}");
        let info: Value = serde_json::from_str(&stdout).unwrap();
        (info["parameters"].as_u64().unwrap(), info["weight_bytes"].as_u64().unwrap())
    };
    let (parameters, f32_bytes) = info("f32");
    assert_eq!(f32_bytes, 4 * parameters);
    let mut previous = f32_bytes;
    for weights in ["bf16", "q8", "q4"] {
        let (counted, bytes) = info(weights);
        assert_eq!(counted, parameters, "{weights} counts the same parameters");
        assert!(bytes < previous && bytes > parameters / 2, "{weights}: {bytes} bytes for {parameters} parameters");
        previous = bytes;
    }
    assert_eq!(info("f16"), info("bf16"));
}
