//! JSON read and written as CPython does: tests/fixtures/json/generate.py records, for a corpus
//! of spellings and raw bodies, what `json.loads` makes of each (its `json.dumps`, `repr`, `str`,
//! type and truth) or the exception it raises; every case must come out the same here.

use decider::python_json::{Json, LoadError, MAX_DEPTH, dumps, loads, py_repr, py_str, py_truthy, py_type_name};
use serde_json::Value;

fn cases() -> Vec<Value> {
    let path = format!("{}/../../tests/fixtures/json/loads.json", env!("CARGO_MANIFEST_DIR"));
    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("the JSON fixture")).expect("fixture JSON");
    record["cases"].as_array().expect("cases").clone()
}

fn source(case: &Value) -> Vec<u8> {
    match (case["text"].as_str(), case["hex"].as_str()) {
        (Some(text), _) => text.as_bytes().to_vec(),
        (None, Some(hex)) => {
            (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect()
        }
        _ => panic!("a case has text or hex: {case}"),
    }
}

#[test]
fn every_spelling_reads_and_writes_as_python() {
    let cases = cases();
    assert!(cases.len() > 100, "the corpus has {} cases", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let bytes = source(case);
        let shown = String::from_utf8_lossy(&bytes).chars().take(60).collect::<String>();
        let ours = loads(&bytes);
        let matches = match (case["error"].as_str(), &ours) {
            (None, Ok(value)) => {
                let ours = [dumps(value), py_repr(value), py_str(value), py_type_name(value).to_string()];
                let python = ["dumps", "repr", "str", "type"].map(|k| case[k].as_str().unwrap().to_string());
                ours == python && Some(py_truthy(value)) == case["truthy"].as_bool()
            }
            (Some("JSONDecodeError"), Err(e @ LoadError::Decode { msg, pos, .. })) => {
                *msg == case["msg"] && Some(*pos as u64) == case["pos"].as_u64() && e.to_string() == case["message"]
            }
            (Some(_), Err(LoadError::Other(_))) => case["error"] != "JSONDecodeError",
            _ => false,
        };
        if !matches {
            failures.push(format!("{shown:?}: Python {case}, ours {ours:?}"));
        }
    }
    assert!(failures.is_empty(), "{} of {} cases differ:\n{}", failures.len(), cases.len(), failures.join("\n"));
}

/// Python reads `"\ud800"` into a string no Unicode text holds (its server fails later, with a
/// 500); it is refused here where it stands, and a pair of escapes still joins.
#[test]
fn half_a_surrogate_pair_is_refused_at_its_escape() {
    for (text, pos) in [(r#""\ud800""#, 1), (r#"["ok", "a\udc00"]"#, 9), (r#""\ud83d\u0041""#, 1)] {
        match loads(text.as_bytes()) {
            Err(LoadError::Decode { msg, pos: at, .. }) => {
                assert!(msg.contains("surrogate"), "{text}: {msg}");
                assert_eq!(at, pos, "{text}");
            }
            other => panic!("{text}: {other:?}"),
        }
    }
    assert_eq!(loads(r#""\ud83d\ude00""#.as_bytes()), Ok(Json::Str("😀".into())));
}

/// Nesting is read up to `MAX_DEPTH` and refused past it as Python refuses nesting past its
/// recursion limit (a `RecursionError`, FastAPI's 400), however deep the body goes.
#[test]
fn nesting_is_read_to_the_limit_and_refused_past_it() {
    let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let read = loads(nested(MAX_DEPTH).as_bytes()).expect("nesting at the limit");
    assert_eq!(dumps(&read), nested(MAX_DEPTH).replace("][", "], ["));
    for depth in [MAX_DEPTH + 1, 1_000_000] {
        match loads(nested(depth).as_bytes()) {
            Err(LoadError::Other(message)) => assert!(message.contains("recursion"), "{message}"),
            other => panic!("depth {depth}: {other:?}"),
        }
    }
    let objects = format!("{}1{}", r#"{"a": "#.repeat(MAX_DEPTH + 1), "}".repeat(MAX_DEPTH + 1));
    assert!(matches!(loads(objects.as_bytes()), Err(LoadError::Other(_))));
}
