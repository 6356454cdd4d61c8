//! `WorkingMemory::bytes`, the bound a server checks against its memory budget before it runs
//! a request, against the bytes a run really allocates: this test binary's global allocator
//! counts every live byte (`integration_tests::counting`), and each run's peak beyond what was
//! live before it is the measure.
//!
//! Shapes: the demo model, and 4-layer slices of decider-2b's widths (f32 and q8) and of
//! decider-35b-a3b's (32 experts instead of 256: only the router's width depends on the count)
//! with small segments and key blocks so that prefixes span several of each. Requests: one row
//! alone, a long state shared by several question rows, and sixteen one-row requests of
//! unequal lengths scored together.

use burn::backend::NdArray;
use decider::demo::random_model;
use decider::{Decider, Plan, Prompter, Row, SystemOneRequest};
use integration_tests::counting::{Counting, peak_of};
use integration_tests::fixture_path;
use qwen35::{PrefillBlocks, Qwen35Config, WeightFormat};
use serde_json::{Map, Value, json};

type B = NdArray<f32>;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// A `/v1/systemone` request's rows: a state of about `words` words and `questions` questions.
fn rows(prompter: &Prompter, words: usize, questions: usize) -> Plan {
    let state: String = (0..words).map(|i| format!("w{} ", i % 97)).collect();
    let questions: Map<String, Value> = (0..questions)
        .map(|i| {
            (
                format!("q{i}"),
                json!({"type": "choice", "instructions": format!("Pick {i}?"), "options": ["a", "b", "c"]}),
            )
        })
        .collect();
    prompter.plan(&SystemOneRequest::new(Value::String(state), questions)).expect("a valid request")
}

/// Runs `requests` and checks that the bound holds, and is within 3x of the peak (the bound is
/// ndarray's: its conv and delta-rule kernels say what they keep, `qwen35::CallMemory`).
fn check(decider: &Decider<B>, name: &str, requests: &[&[Row]]) {
    let estimate = decider.working_memory().bytes(requests);
    let ((), _, measured) = peak_of(|| {
        let answers = decider.slot_probabilities_of(requests);
        assert!(answers.iter().all(Result::is_ok), "{name}: answered");
    });
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    eprintln!(
        "{name}: measured {:.1} MiB, bound {:.1} MiB ({:.2}x)",
        mib(measured),
        mib(estimate),
        estimate as f64 / measured as f64
    );
    assert!(measured <= estimate, "{name}: {measured} bytes allocated, more than the bound of {estimate}");
    assert!(estimate <= 3 * measured, "{name}: the bound of {estimate} bytes is more than 3x the {measured} allocated");
}

/// A request of one row (a state of about `words / 4` words), one of a state of `words` shared
/// by 3 question rows, and sixteen one-row requests of unequal lengths scored together.
fn requests(prompter: &Prompter, words: usize) -> Vec<(&'static str, Vec<Plan>)> {
    vec![
        ("one row", vec![rows(prompter, words / 4, 1)]),
        ("a state shared by 3 rows", vec![rows(prompter, words, 3)]),
        ("16 requests together", (0..16).map(|i| rows(prompter, 8 + 4 * i, 1)).collect()),
    ]
}

/// The real config of `name` in `tests/fixtures/configs`, cut to its first 4 layers (three
/// DeltaNet, one attention) and `experts` experts if it has them, with tied embeddings (the
/// head's memory is the weights', not a call's).
fn real_widths(name: &str, experts: usize) -> Qwen35Config {
    let path = fixture_path(&format!("configs/{name}.json"));
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("config fixture")).expect("config JSON");
    let text = config["text_config"].as_object_mut().expect("a text_config");
    text.insert("num_hidden_layers".into(), json!(4));
    let layers: Vec<Value> = text["layer_types"].as_array().expect("layer types")[..4].to_vec();
    text.insert("layer_types".into(), Value::Array(layers));
    text.insert("tie_word_embeddings".into(), json!(true));
    if text.contains_key("num_experts") {
        text.insert("num_experts".into(), json!(experts));
    }
    Qwen35Config::from_json(&config.to_string()).expect("a valid config")
}

#[test]
fn the_working_memory_bound_holds_and_is_tight() {
    let device = Default::default();
    let demo = Decider::<B>::demo(&device);
    for (kind, plans) in requests(demo.prompter(), 6000) {
        check(&demo, &format!("demo, {kind}"), &plans.iter().map(|p| p.rows.as_slice()).collect::<Vec<_>>());
    }
    drop(demo);
    // Real widths, with segments and key blocks of 256 so that a 600-word state spans several.
    let blocks = PrefillBlocks { segment: 256, key_block: 256 };
    for (name, config, weights) in [
        ("2B widths f32", "qwen3.5-2b", WeightFormat::F32),
        ("2B widths q8", "qwen3.5-2b", WeightFormat::Q8),
        ("35B-A3B widths q8", "qwen3.5-35b-a3b", WeightFormat::Q8),
    ] {
        let model = random_model::<B>(&real_widths(config, 32), weights, &device).with_blocks(blocks);
        let decider = Decider::new(model, Prompter::demo(), &device, name.into()).expect("the tokenizer fits");
        for (kind, plans) in requests(decider.prompter(), 600) {
            check(&decider, &format!("{name}, {kind}"), &plans.iter().map(|p| p.rows.as_slice()).collect::<Vec<_>>());
        }
    }
}
