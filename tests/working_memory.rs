//! `WorkingMemory::bytes`, the bound a server checks against its memory budget before it runs
//! a request, against the bytes a run really allocates: this test binary's global allocator
//! counts every live byte (`integration_tests::counting`), and each run's peak beyond what was
//! live before it is the measure.
//!
//! Planning is measured the same way: what tokenizing texts and building rows allocates against
//! what [`decider::Meter`] asks of a budget for it (`decider::plan_budget`).
//!
//! Shapes: the demo model (f32), and 4-layer slices of decider-2b's widths and of
//! decider-35b-a3b's (32 experts instead of 256: only the router's width depends on the count)
//! in q8, the CPU's format (at these widths f32 has q8's bound to the byte and allocated within
//! 6 % of q8's peak when both were measured, so the demo covers its path), with small segments
//! and key blocks so that prefixes span several of each. Requests: one row
//! alone, a long state shared by several question rows, and eight one-row requests of
//! unequal lengths scored together.

use burn::backend::NdArray;
use decider::demo::random_model;
use decider::plan_budget::{PeakAsked, TOKENIZER_BYTES_PER_BYTE};
use decider::{Decider, Plan, Prompter, Row, SystemOneRequest, Tokenizer};
use integration_tests::counting::{Counting, peak_of};
use integration_tests::fixture_path;
use qwen35::{PrefillBlocks, Qwen35Config, WeightFormat};
use serde_json::{Map, Value, json};

type B = NdArray<f32>;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The allocator counts every thread: one measure at a time.
static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

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
/// by 3 question rows, and eight one-row requests of unequal lengths scored together.
fn requests(prompter: &Prompter, words: usize) -> Vec<(&'static str, Vec<Plan>)> {
    vec![
        ("one row", vec![rows(prompter, words / 4, 1)]),
        ("a state shared by 3 rows", vec![rows(prompter, words, 3)]),
        ("8 requests together", (0..8).map(|i| rows(prompter, 8 + 8 * i, 1)).collect()),
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
    let _one_at_a_time = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let device = Default::default();
    let demo = Decider::<B>::demo(&device);
    for (kind, plans) in requests(demo.prompter(), 6000) {
        check(&demo, &format!("demo, {kind}"), &plans.iter().map(|p| p.rows.as_slice()).collect::<Vec<_>>());
    }
    drop(demo);
    // Real widths, with segments and key blocks of 128 so that a 300-word state spans several.
    let blocks = PrefillBlocks { segment: 128, key_block: 128 };
    for (name, config, weights) in
        [("2B widths q8", "qwen3.5-2b", WeightFormat::Q8), ("35B-A3B widths q8", "qwen3.5-35b-a3b", WeightFormat::Q8)]
    {
        let model = random_model::<B>(&real_widths(config, 32), weights, &device).with_blocks(blocks);
        let decider = Decider::new(model, Prompter::demo(), &device, name.into()).expect("the tokenizer fits");
        for (kind, plans) in requests(decider.prompter(), 300) {
            check(&decider, &format!("{name}, {kind}"), &plans.iter().map(|p| p.rows.as_slice()).collect::<Vec<_>>());
        }
    }
}

/// Texts that cost the tokenizer most per byte (runs its pre-split cannot break) and ordinary
/// ones, `bytes` long each.
fn tokenizer_texts(bytes: usize) -> Vec<(&'static str, String)> {
    let fill = |unit: &str| unit.repeat(bytes / unit.len());
    vec![
        ("one letter", fill("x")),
        ("two letters", fill("ab")),
        ("one symbol", fill("=")),
        ("unassigned U+10FFFF", fill("\u{10FFFF}")),
        ("CJK", fill("我们今天讨论的是一个很长的句子")),
        ("digits", fill("3141592653")),
        ("whitespace", fill(" \n\t ")),
        ("prose", fill("The quick brown fox, it's said, jumps over 12 lazy dogs. ")),
        ("emoji", fill("👍🏽🎉")),
    ]
}

/// The bound a server reserves before it tokenizes, `TOKENIZER_BYTES_PER_BYTE` per byte of
/// text, holds for every text shape (the figures are printed: the ratio is the measure).
#[test]
fn tokenizing_stays_within_its_bound() {
    let _one_at_a_time = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let tokenizer = Tokenizer::test_tokenizer();
    for (name, text) in tokenizer_texts((1 << 20) + 12_345) {
        let (ids, _, peak) = peak_of(|| tokenizer.encode(&text).expect("tokenized"));
        let per_byte = peak as f64 / text.len() as f64;
        eprintln!("tokenizing {name}: {per_byte:.1} bytes per byte of text ({} tokens)", ids.len());
        assert!(peak <= TOKENIZER_BYTES_PER_BYTE * text.len(), "{name}: {per_byte:.1} bytes per byte");
    }
}

/// What planning a request allocates stays within what it asked its budget for: requests whose
/// question texts, options or states are the costliest text shapes, and many questions.
#[test]
fn planning_stays_within_what_it_asks_of_its_budget() {
    let _one_at_a_time = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let prompter = Prompter::demo();
    let question = |text: &str| json!({"type": "choice", "instructions": text, "options": ["a", "b", "c"]});
    let wide = |option: &str| json!({"type": "choice", "instructions": "Which?", "options": (0..40).map(|i| format!("{option}{i}")).collect::<Vec<_>>()});
    let one = |spec: Value| Map::from_iter([("q".to_string(), spec)]);
    let mut requests: Vec<(String, Value, Map<String, Value>)> = Vec::new();
    for (name, text) in tokenizer_texts(256 << 10) {
        let option: String = text.chars().take(2048).collect();
        requests.push((format!("question of {name}"), json!("a state"), one(question(&text))));
        requests.push((format!("options of {name}"), json!("a state"), one(wide(&option))));
        requests.push((format!("state of {name}"), json!(text.repeat(16)), one(question("Is it?"))));
    }
    let many: Map<String, Value> = (0..500).map(|i| (format!("q{i}"), question(&format!("Question {i}?")))).collect();
    requests.push(("500 questions on a long state".into(), json!("word ".repeat(40_000)), many));
    for (name, state, questions) in requests {
        let request = SystemOneRequest::new(state, questions);
        let mut asked = PeakAsked::default();
        let (plan, _, peak) = peak_of(|| prompter.plan_within(&request, &mut asked).expect("planned"));
        drop(plan);
        eprintln!("planning, {name}: allocated {peak} bytes, asked {} ({:.1}x)", asked.0, asked.0 as f64 / peak as f64);
        assert!(peak <= asked.0, "{name}: allocated {peak} bytes, more than the {} asked", asked.0);
    }
}
