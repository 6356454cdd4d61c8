//! Property-based fuzzing of what a request reaches before the model: the state renderer and
//! the prompt builders of `/v1/systemone` and `/decide`, on generated JSON (wrong types,
//! extreme numbers, odd Unicode, long lists, near-valid questions). Nothing may panic, every
//! refusal is a question error (422 on the wire), and every plan is one the model can run.
//!
//! `PROPTEST_CASES` sets the cases per property (256 by default in CI); a longer run:
//! `PROPTEST_CASES=100000 cargo test -p decider --test fuzz --release`.

use std::sync::LazyLock;

use decider::state::{render_state, render_state_prefix};
use decider::{DeciderError, Plan, Prompter, SystemOneRequest};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

static PROMPTER: LazyLock<Prompter> = LazyLock::new(Prompter::demo);

/// Numbers at and past the edges: 0, -0, extremes of i64/u64 and f64, tiny and huge floats.
fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        prop_oneof![Just(0.0), Just(-0.0), Just(f64::MAX), Just(f64::MIN_POSITIVE), Just(5e-324), Just(1e16), Just(0.1)].prop_map(Value::from),
        any::<f64>().prop_filter("JSON numbers are finite", |x| x.is_finite()).prop_map(Value::from),
        (0u8..12).prop_map(Value::from),
    ]
}

/// Strings: any Unicode, and short words that are labels, numbers or keywords the prompt uses.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        proptest::sample::select(vec!["", " ", "true", "false", "none", "None of the above", "0", "10", "-1", "1.5", "A", "\n", "\u{0}", "é", "日本", "🙂"]).prop_map(str::to_owned),
        ("[a-z ]{0,3}", 0usize..4).prop_map(|(s, n)| s.repeat(n)),
    ]
}

/// Any JSON value, nested a few levels.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![Just(Value::Null), any::<bool>().prop_map(Value::from), number(), text().prop_map(Value::from)];
    leaf.prop_recursive(4, 64, 12, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..12).prop_map(Value::from),
            proptest::collection::vec((text(), inner), 0..8).prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    })
}

/// Questions as clients write them, right or nearly right, and anything at all.
fn question() -> impl Strategy<Value = Value> {
    let kind = prop_oneof![
        proptest::sample::select(vec!["choice", "noul", "score", "bool", "boolean", "yesno", "multi", "Choice", ""]).prop_map(Value::from),
        json_value(),
    ];
    let options = prop_oneof![
        proptest::collection::vec(text().prop_map(Value::from), 0..300).prop_map(Value::from),
        proptest::collection::vec((text(), prop_oneof![Just(Value::Null), text().prop_map(Value::from)]), 0..20)
            .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        json_value(),
    ];
    prop_oneof![
        3 => (kind, text(), options, any::<bool>()).prop_map(|(kind, instructions, options, as_criteria)| {
            let key = if as_criteria { "criteria" } else { "options" };
            json!({"type": kind, "instructions": instructions, key: options})
        }),
        1 => json_value(),
    ]
}

/// Questions the reference accepts, at the limits too: 2 to 255 options, 2 to 10 levels.
fn valid_question() -> impl Strategy<Value = Value> {
    let instructions = || text().prop_filter("instructions are not blank", |t| !t.trim().is_empty());
    prop_oneof![
        (instructions(), 2usize..=255).prop_map(|(i, n)| json!({"type": "choice", "instructions": i, "criteria": (0..n).map(|k| format!("option {k}")).collect::<Vec<_>>()})),
        instructions().prop_map(|i| json!({"type": "noul", "instructions": i})),
        (instructions(), 2usize..=10).prop_map(|(i, n)| json!({"type": "score", "instructions": i, "criteria": (0..n).map(|k| format!("{k}: level {k}")).collect::<Vec<_>>()})),
    ]
}

fn questions() -> impl Strategy<Value = Map<String, Value>> {
    proptest::collection::vec((text(), question()), 0..6).prop_map(|entries| entries.into_iter().collect())
}

/// A plan the model can run: token ids in the vocabulary, one slot per answer, 2..=255 options.
fn check_plan(plan: &Plan, max_state_tokens: usize) {
    let vocab = PROMPTER.tokenizer.vocab_size() as u32;
    assert!(plan.context_len <= max_state_tokens + 8, "state segment of {} tokens", plan.context_len);
    for row in &plan.rows {
        assert!(row.ids.iter().all(|&id| id < vocab));
        assert_eq!((row.slots.len(), row.types.len()), (row.nopts.len(), row.nopts.len()));
        assert!(row.slots.iter().all(|&slot| slot < row.ids.len()));
        assert!(row.nopts.iter().all(|&n| (2..=255).contains(&n)), "{:?}", row.nopts);
    }
}

proptest! {
    #[test]
    fn a_state_prefix_is_the_start_of_the_whole_rendering(state in json_value(), max_bytes in 0usize..400) {
        let whole = render_state(&state);
        let prefix = render_state_prefix(&state, max_bytes);
        prop_assert!(prefix.text.len() <= max_bytes);
        prop_assert!(whole.starts_with(&prefix.text));
        prop_assert_eq!(prefix.complete, prefix.text == whole);
    }

    #[test]
    fn systemone_requests_are_planned_or_refused_with_a_question_error(
        state in json_value(),
        questions in questions(),
        independent in any::<bool>(),
        max_state_tokens in prop_oneof![Just(0usize), 1usize..64, Just(32768)],
    ) {
        let mut request = SystemOneRequest::new(state, questions);
        request.independent = independent;
        request.max_state_tokens = max_state_tokens;
        match PROMPTER.plan(&request) {
            Ok(plan) => check_plan(&plan, max_state_tokens),
            Err(DeciderError::InvalidQuestion(message)) => prop_assert!(!message.is_empty()),
            Err(other) => prop_assert!(false, "not a question error: {other}"),
        }
    }

    #[test]
    fn valid_questions_are_planned_about_any_state(
        state in json_value(),
        questions in proptest::collection::vec(valid_question(), 1..4),
        max_state_tokens in prop_oneof![Just(0usize), 1usize..64, Just(32768)],
    ) {
        let questions: Map<String, Value> = questions.into_iter().enumerate().map(|(i, q)| (format!("q{i}"), q)).collect();
        let mut request = SystemOneRequest::new(state, questions.clone());
        request.max_state_tokens = max_state_tokens;
        let plan = PROMPTER.plan(&request).map_err(|e| TestCaseError::fail(format!("{e}: {questions:?}")))?;
        check_plan(&plan, max_state_tokens);
        prop_assert_eq!(plan.questions.len(), questions.len());
    }

    #[test]
    fn decide_forms_are_planned_or_refused_with_a_question_error(context in text(), schema in prop_oneof![
        questions().prop_map(Value::Object),
        json_value(),
    ]) {
        match PROMPTER.plan_decide(&context, Some(&schema)) {
            Ok(plan) => if plan.row_tokens() > 0 { prop_assert!(plan.questions() > 0) },
            Err(DeciderError::InvalidQuestion(message)) => prop_assert!(!message.is_empty()),
            Err(other) => prop_assert!(false, "not a question error: {other}"),
        }
    }
}
