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
    let fixture: Value = serde_json::from_str(&std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/prompts/prompts.json")).unwrap()).unwrap();
    // A case without Score questions: the demo config's isolated levels do not change it.
    let case = fixture["cases"].as_array().unwrap().iter().find(|c| c["name"] == "options_255_packed_with_noul").cloned().expect("fixture case");
    let body = json!({"state": case["state"], "questions": case["questions"], "independent": case["independent"]}).to_string();
    let dir = tempfile::tempdir().unwrap();
    let request = dir.path().join("request.json");
    std::fs::write(&request, &body).unwrap();
    let expected: Vec<Value> = case["rows"].as_array().unwrap().iter().map(|r| json!({"ids": r["ids"], "slots": r["slots"]})).collect();
    // The request from a file (@FILE) or inline, as `decide` takes its state.
    for argument in [format!("@{}", request.display()), body] {
        let (ok, stdout, stderr) = decider(&["prompt", "--model", "demo", "--request", &argument]);
        assert!(ok, "{stderr}");
        let printed: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(printed["rows"], Value::Array(expected.clone()), "case {}", case["name"]);
    }
}

#[test]
fn decide_prints_answers_and_labels_random_weights() {
    let (ok, stdout, stderr) = decider(&[
        "decide", "--model", "demo", "--state", "My card was charged twice.",
        "--question", r#"team={"type": "choice", "instructions": "Which team?", "criteria": ["billing", "technical"]}"#,
        "--question", r#"{"type": "noul", "instructions": "Urgent?"}"#,
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
    let (ok, _, stderr) = decider(&["decide", "--model", "demo", "--state", "s", "--question", r#"{"type": "choice", "instructions": "x", "criteria": ["a"]}"#]);
    assert!(!ok && stderr.contains("choice criteria: a map of 2..255 options"), "{stderr}");
    let (ok, _, stderr) = decider(&["info", "--model", "demo", "--weights", "q8"]);
    assert!(!ok && stderr.contains("the demo model is built in f32 in memory; --weights q8 applies to model folders"), "{stderr}");
    let (ok, _, stderr) = decider(&["info", "--model", "/no/such/folder"]);
    assert!(!ok && stderr.contains("/no/such/folder is not a model folder"), "{stderr}");
    // A Hub id that cannot be fetched (no network here, or no such repository) says which.
    let (ok, _, stderr) = decider(&["info", "--model", "nobody-here/no-such-decider"]);
    assert!(!ok && stderr.contains("downloading nobody-here/no-such-decider from the Hugging Face Hub"), "{stderr}");
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
