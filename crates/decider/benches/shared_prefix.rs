//! The cost of a 5-question request with the state run once and forked (the engine's default)
//! against the same 5 rows each run from scratch, on the demo model (ndarray) with a JevBench-like
//! state of about 600 tokens. The ratio is what prefix sharing saves; both are measured in the
//! same run.
//!
//! `cargo bench -p decider --bench shared_prefix`

use burn::backend::NdArray;
use criterion::{Criterion, criterion_group, criterion_main};
use decider::{Decider, SystemOneRequest};
use serde_json::json;

fn request() -> SystemOneRequest {
    let messages: Vec<_> = (0..12)
        .map(|i| json!({"from": if i % 2 == 0 { "customer" } else { "agent" }, "text": format!("Message {i}: the order #44{i} arrived damaged and the replacement was charged twice to my card.")}))
        .collect();
    let state = json!({"ticket": {"id": 4471, "channel": "email", "messages": messages}});
    let questions = json!({
        "team": {"type": "choice", "instructions": "Which team handles this?", "criteria": {"billing": "charges", "logistics": "shipping", "support": null}},
        "urgent": {"type": "noul", "instructions": "Does it need an answer today?"},
        "refund": {"type": "noul", "instructions": "Is a refund requested?"},
        "sentiment": {"type": "choice", "instructions": "Customer sentiment?", "criteria": ["negative", "neutral", "positive"]},
        "priority": {"type": "choice", "instructions": "Priority?", "criteria": ["low", "medium", "high", "critical"]}
    });
    SystemOneRequest::new(state, questions.as_object().unwrap().clone())
}

fn bench(c: &mut Criterion) {
    let device = Default::default();
    let shared = Decider::<NdArray>::demo(&device);
    let separate = Decider::<NdArray>::demo(&device).with_shared_prefix(false);
    let request = request();
    let plan = shared.prompter().plan(&request).unwrap();
    eprintln!(
        "5 rows of {:?} tokens, state segment {} tokens",
        plan.rows.iter().map(|r| r.ids.len()).collect::<Vec<_>>(),
        plan.context_len
    );
    let mut group = c.benchmark_group("5 questions, demo model, ndarray");
    group.sample_size(10);
    group.bench_function("shared state prefix", |b| b.iter(|| shared.answer_plan(&plan).unwrap()));
    group.bench_function("5 separate rows", |b| b.iter(|| separate.answer_plan(&plan).unwrap()));
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
