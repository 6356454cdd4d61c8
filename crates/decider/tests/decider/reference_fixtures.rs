//! The runtime against decider-ai 1.10.0 itself: tests/fixtures/prompts/generate.py runs the
//! package's prompt, answer and temperature code with the same tokenizer and commits what it
//! returns; every row id, slot, answer object, probability and config verdict must match.

use decider::answer::assemble;
use decider::prompt::plan;
use decider::python_json::Json;
use decider::readout::probabilities;
use decider::state::render_state;
use decider::{DeciderConfig, Meter, PlanOptions, Prompter, SystemOneRequest, Tokenizer};
use serde::Deserialize;
use serde_json::{Value, json};

fn fixture(name: &str) -> Value {
    let path = format!("{}/../../tests/fixtures/prompts/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).expect("prompt fixture")).expect("fixture JSON")
}

#[derive(Deserialize, Debug, PartialEq)]
struct ExpectedRow {
    ids: Vec<u32>,
    slots: Vec<usize>,
    types: Vec<String>,
    nopts: Vec<usize>,
}

fn options(case: &Value) -> PlanOptions {
    PlanOptions {
        independent: case["independent"].as_bool().unwrap(),
        isolated_levels: case["isolated_levels"].as_bool().unwrap(),
        max_state_tokens: case.get("max_state_tokens").and_then(Value::as_u64).unwrap_or(32768) as usize,
        neutralize_none: false,
    }
}

/// Rows as the fixtures write them.
fn expected_rows(rows: &[decider::Row]) -> Vec<ExpectedRow> {
    rows.iter()
        .map(|r| ExpectedRow {
            ids: r.ids.clone(),
            slots: r.slots.clone(),
            types: r.types.iter().map(|t| t.as_str().to_string()).collect(),
            nopts: r.nopts.clone(),
        })
        .collect()
}

/// Both prompt paths, for a model whose config sets `neutralize_none` either way: the library's
/// (`Prompter::plan_library`) equals decider-ai's `Decider.system_one` rows, the server's
/// (`Prompter::plan`) its `/v1/systemone` rows.
#[test]
fn both_prompt_paths_equal_the_reference() {
    let cases = fixture("prompts.json")["paths"].as_array().unwrap().clone();
    let mut differ = 0;
    for case in &cases {
        let name = format!("{} (neutralize_none {})", case["name"].as_str().unwrap(), case["neutralize_none"]);
        let config = json!({"version": "t", "neutralize_none": case["neutralize_none"], "isolated_levels": case["isolated_levels"]});
        let prompter = Prompter {
            tokenizer: Tokenizer::test_tokenizer(),
            config: DeciderConfig::from_json(&config.to_string()).unwrap(),
        };
        let mut request = SystemOneRequest::new(case["state"].clone(), case["questions"].as_object().unwrap().clone());
        request.independent = case["independent"].as_bool().unwrap();
        for (path, plan) in
            [("library", prompter.plan_library(&request).unwrap()), ("server", prompter.plan(&request).unwrap())]
        {
            let expected: Vec<ExpectedRow> = serde_json::from_value(case[path]["rows"].clone()).unwrap();
            assert_eq!(expected_rows(&plan.rows), expected, "{name}: the {path} path");
            assert_eq!(
                plan.input_tokens() as u64,
                case[path]["input_tokens"].as_u64().unwrap(),
                "{name}: the {path} path's input tokens"
            );
        }
        differ += usize::from(case["library"]["rows"] != case["server"]["rows"]);
    }
    assert!(cases.len() >= 6 && differ >= 3, "{} cases, {differ} where the paths differ", cases.len());
}

#[test]
fn label_table_equals_the_reference() {
    let labels = fixture("prompts.json")["labels"].clone();
    let ours = Tokenizer::test_tokenizer().labels().clone();
    assert_eq!(serde_json::to_value(&ours.names).unwrap(), labels["names"]);
    assert_eq!(serde_json::to_value(&ours.ids).unwrap(), labels["ids"]);
    assert_eq!(serde_json::to_value(&ours.open_ids).unwrap(), labels["open_ids"]);
}

#[test]
fn prompt_rows_equal_the_reference() {
    let tokenizer = Tokenizer::test_tokenizer();
    let cases = fixture("prompts.json")["cases"].as_array().unwrap().clone();
    let (mut matched, mut refused, mut failures) = (0, 0, Vec::new());
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        let (state, questions) = (Json::from(case["state"].clone()), Json::from(case["questions"].clone()));
        let result = plan(&mut Meter::unbounded(&tokenizer), &state, questions.as_dict().unwrap(), options(case));
        match (case.get("error"), result) {
            (Some(expected), Err(e)) if e.to_string() == expected.as_str().unwrap() => refused += 1,
            (Some(expected), other) => {
                failures.push(format!("{name}: expected error {expected}, got {:?}", other.map(|p| p.rows.len())))
            }
            (None, Err(e)) => failures.push(format!("{name}: unexpected error {e}")),
            (None, Ok(plan)) => {
                let expected: Vec<ExpectedRow> = serde_json::from_value(case["rows"].clone()).unwrap();
                let ours = expected_rows(&plan.rows);
                let rendered = render_state(&state);
                if ours != expected {
                    let first = ours.iter().zip(&expected).position(|(a, b)| a != b);
                    failures.push(format!(
                        "{name}: rows differ ({} vs {} rows, first differing row {first:?})",
                        ours.len(),
                        expected.len()
                    ));
                } else if plan.input_tokens() as u64 != case["input_tokens"].as_u64().unwrap() {
                    failures.push(format!("{name}: input_tokens {} vs {}", plan.input_tokens(), case["input_tokens"]));
                } else if rendered != case["rendered_state"].as_str().unwrap() {
                    failures
                        .push(format!("{name}: state renders as {rendered:?}, reference {}", case["rendered_state"]));
                } else {
                    matched += 1;
                }
            }
        }
    }
    println!("prompt fixtures: {matched} row cases and {refused} refusals match the reference");
    assert!(failures.is_empty(), "{} of {} cases differ:\n{}", failures.len(), cases.len(), failures.join("\n"));
    assert!(matched >= 40 && refused >= 10, "{matched} row cases, {refused} refusals");
}

#[test]
fn answers_equal_the_reference() {
    let tokenizer = Tokenizer::test_tokenizer();
    let cases = fixture("answers.json")["cases"].as_array().unwrap().clone();
    let mut failures = Vec::new();
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        let questions = Json::from(case["questions"].clone());
        let plan = plan(
            &mut Meter::unbounded(&tokenizer),
            &Json::from(""),
            questions.as_dict().unwrap(),
            PlanOptions { max_state_tokens: 32768, ..options(case) },
        )
        .unwrap();
        let probs: Vec<Vec<f64>> = serde_json::from_value(case["probs"].clone()).unwrap();
        // As text, so the keys' order is compared too (the fixture keeps the reference's).
        let ours = serde_json::to_string(&assemble(&plan.questions, &probs)).unwrap();
        let reference = case["answers"].to_string();
        if ours != reference {
            failures.push(format!("{name}:\n  ours      {ours}\n  reference {reference}"));
        }
    }
    assert!(failures.is_empty(), "{} of {} answer cases differ:\n{}", failures.len(), cases.len(), failures.join("\n"));
    assert!(cases.len() >= 40);
}

#[test]
fn readout_probabilities_equal_torch_softmax() {
    let cases = fixture("answers.json")["readout"].as_array().unwrap().clone();
    for case in &cases {
        let logits: Vec<f32> = serde_json::from_value(case["logits"].clone()).unwrap();
        let expected: Vec<f32> = serde_json::from_value(case["probs"].clone()).unwrap();
        let n = case["n_options"].as_u64().unwrap() as usize;
        let ours = probabilities(&logits, n, case["temperature"].as_f64().unwrap());
        assert_eq!(ours.len(), expected.len());
        for (a, b) in ours.iter().zip(&expected) {
            // f32 softmax: the exp kernels and summation order differ by a few ulp.
            assert!((a - b).abs() <= 4.0 * f32::EPSILON * b.abs() + 1e-9, "{}: {a} vs {b}", case["name"]);
        }
    }
    assert!(cases.len() >= 20);
}

#[test]
fn temperature_configs_are_validated_as_the_reference() {
    let cases = fixture("answers.json")["temperature_configs"].as_array().unwrap().clone();
    let kinds = [
        ("choice", decider::AnswerType::Choice),
        ("noul", decider::AnswerType::Noul),
        ("score", decider::AnswerType::Score),
    ];
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        let result = DeciderConfig::from_value(&Json::from(case["config"].clone()));
        match (case.get("error"), result) {
            (Some(expected), Err(e)) => assert_eq!(e.to_string(), expected.as_str().unwrap(), "{name}"),
            (Some(expected), Ok(_)) => panic!("{name}: accepted, reference refuses: {expected}"),
            (None, Err(e)) => panic!("{name}: refused ({e}), reference accepts"),
            (None, Ok(config)) => {
                let ok = &case["ok"];
                assert_eq!(config.temperature, ok["temperature"].as_f64().unwrap(), "{name}");
                for (key, kind) in kinds {
                    for n in [2usize, 5, 40] {
                        let expected = match ok.get("by_options") {
                            Some(abm) => {
                                let [a, b, min]: [f64; 3] = serde_json::from_value(abm.clone()).unwrap();
                                min.max(a + b * (n.max(2) as f64).ln())
                            }
                            None => ok["by_type"]
                                .get(key)
                                .and_then(Value::as_f64)
                                .unwrap_or(ok["temperature"].as_f64().unwrap()),
                        };
                        assert_eq!(config.temperatures.of(kind, n), expected, "{name}: {key} with {n} options");
                    }
                }
            }
        }
    }
}
