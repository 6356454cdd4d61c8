//! Property-based fuzzing of what a request reaches before the model: the state renderer and
//! the prompt builders of `/v1/systemone` and `/decide`, on generated JSON (wrong types,
//! extreme numbers, odd Unicode, long lists, near-valid questions). Nothing may panic, every
//! refusal is a question error (422 on the wire), and every plan is one the model can run.
//!
//! `PROPTEST_CASES` sets the cases per property (256 by default in CI); a longer run:
//! `PROPTEST_CASES=100000 cargo test -p integration-tests --test integration --release -- fuzz_prompts::`.

use std::sync::LazyLock;

use decider::python_json::{Json, dumps, loads};
use decider::state::{render_state, render_state_prefix};
use decider::{DeciderError, Plan, Prompter, SystemOneRequest};
use integration_tests::fuzz::{python_json_value, questions, text, valid_questions};
use proptest::prelude::*;
use serde_json::Value;

static PROMPTER: LazyLock<Prompter> = LazyLock::new(Prompter::demo);

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
    fn python_json_text_reads_back_as_the_same_value(value in python_json_value()) {
        let text = dumps(&value);
        let read = loads(text.as_bytes()).map_err(|e| TestCaseError::fail(format!("{e}: {text}")))?;
        prop_assert_eq!(dumps(&read), text);
    }

    #[test]
    fn a_state_prefix_is_the_start_of_the_whole_rendering(state in python_json_value(), max_bytes in 0usize..400) {
        let whole = render_state(&state);
        let prefix = render_state_prefix(&state, max_bytes);
        prop_assert!(prefix.text.len() <= max_bytes);
        prop_assert!(whole.starts_with(&prefix.text));
        prop_assert_eq!(prefix.complete, prefix.text == whole);
    }

    #[test]
    fn systemone_requests_are_planned_or_refused_with_a_question_error(
        state in python_json_value(),
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
        state in python_json_value(),
        questions in valid_questions(),
        max_state_tokens in prop_oneof![Just(0usize), 1usize..64, Just(32768)],
    ) {
        let mut request = SystemOneRequest::new(state, questions.clone());
        request.max_state_tokens = max_state_tokens;
        let plan = PROMPTER.plan(&request).map_err(|e| TestCaseError::fail(format!("{e}: {questions:?}")))?;
        check_plan(&plan, max_state_tokens);
        prop_assert_eq!(plan.questions.len(), questions.len());
    }

    #[test]
    fn decide_forms_are_planned_or_refused_with_a_question_error(context in text(), schema in prop_oneof![
        questions().prop_map(|q| Json::from(Value::Object(q))),
        python_json_value(),
    ]) {
        match PROMPTER.plan_decide(&context, Some(&schema)) {
            Ok(plan) => if plan.row_tokens() > 0 { prop_assert!(plan.questions() > 0) },
            Err(DeciderError::InvalidQuestion(message)) => prop_assert!(!message.is_empty()),
            Err(other) => prop_assert!(false, "not a question error: {other}"),
        }
    }
}
