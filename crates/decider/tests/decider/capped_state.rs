//! A state is rendered and tokenized only up to a prefix proportional to its token cap, and the
//! tokens equal those of the whole state cut at the cap (`encode("Context:\n" + state)[:cap]`,
//! what decider-ai 1.10.0 computes), over texts that stress where the prefix may be cut:
//! prose, JSON with annotated lists, CJK without spaces, combining marks, Hangul jamo, emoji,
//! digit runs, whitespace runs, punctuation runs and unbroken runs (of letters, of one letter, of
//! one symbol, of an unassigned character) that the tokenizer's pre-split cannot break.

use decider::plan_budget::{MAX_TOKEN_BYTES, PeakAsked, PlanBudget, TOKENIZER_BYTES_PER_BYTE};
use decider::prompt::{PlanOptions, context_ids, plan};
use decider::python_json::Json;
use decider::state::render_state;
use decider::{DeciderError, Meter, Tokenizer};
use serde_json::{Value, json};

fn texts() -> Vec<(&'static str, String)> {
    vec![
        ("prose", "The quick brown fox, it's said, jumps over 12 lazy dogs; then naps.\n".repeat(400)),
        ("cjk", "我们今天讨论的是一个很长的句子没有空格也没有数字只有汉字和标点。".repeat(300)),
        ("marks", "cafe\u{301} na\u{308}ive e\u{301}le\u{300}ve ".repeat(800)),
        ("jamo", "\u{1100}\u{1161}\u{11a8}\u{1102}\u{1165}".repeat(1500)),
        ("emoji", "👍🏽 ok👌 🎉🎉🎉 fine... ".repeat(600)),
        ("digits", "31415926535897932384626433832795028841971693993751".repeat(300)),
        ("whitespace", "a  \n\n   \t b\r\n  \n ".repeat(900)),
        ("punctuation", "--==!!??;;::,,..//**".repeat(700)),
        ("letters", "abcdefghij".repeat(3000)),
        ("one letter", "x".repeat(40_000)),
        ("one symbol", "=".repeat(60_000)),
        ("unassigned", "\u{10FFFF}".repeat(20_000)),
    ]
}

fn whole(tokenizer: &Tokenizer, rendered: &str, cap: usize) -> Vec<u32> {
    let mut ids = tokenizer.encode(&format!("Context:\n{rendered}")).unwrap();
    ids.truncate(cap);
    ids
}

#[test]
fn a_text_state_cut_at_its_cap_equals_the_whole_text_cut() {
    let tokenizer = Tokenizer::test_tokenizer();
    for (name, text) in texts() {
        for cap in [1, 7, 150, 333, 1000] {
            let capped = context_ids(&mut Meter::unbounded(&tokenizer), &text, cap).unwrap();
            assert_eq!(capped.len(), cap.min(whole(&tokenizer, &text, usize::MAX).len()), "{name} cap {cap}");
            assert_eq!(capped, whole(&tokenizer, &text, cap), "{name} cap {cap}");
        }
    }
}

#[test]
fn a_json_state_cut_at_its_cap_equals_the_whole_rendering_cut() {
    let tokenizer = Tokenizer::test_tokenizer();
    let states: [Json; 4] = [
        json!((0..2000).map(|i| json!([i])).collect::<Vec<_>>()),
        json!({"records": (0..500).map(|i| json!({"id": i, "name": format!("item {i}"), "_index": "own"})).collect::<Vec<_>>(),
               "note": "tail"}),
        json!((0..3000).map(|i| json!(i as f64 / 7.0)).collect::<Vec<_>>()),
        Value::String("plain ".repeat(3000)),
    ]
    .map(Json::from);
    let question = Json::from(json!({"q": {"type": "noul", "instructions": "Is it?"}}));
    for (n, state) in states.iter().enumerate() {
        let rendered = render_state(state);
        for cap in [3, 200, 777] {
            let options = PlanOptions { max_state_tokens: cap, ..PlanOptions::default() };
            let planned = plan(&mut Meter::unbounded(&tokenizer), state, question.as_dict().unwrap(), options).unwrap();
            let expected = whole(&tokenizer, &rendered, cap);
            assert_eq!(planned.context_len, expected.len(), "state {n} cap {cap}");
            assert_eq!(planned.rows[0].ids[..planned.context_len], expected[..], "state {n} cap {cap}");
        }
    }
}

/// A huge state that the pre-split cannot break is tokenized only as far as its cap needs: what
/// is tokenized at once stays within the bytes `cap + 256` tokens can span, however long it is.
#[test]
fn an_unbreakable_state_is_tokenized_within_its_cap() {
    let tokenizer = Tokenizer::test_tokenizer();
    for (name, text) in [("one letter", "x".repeat(24 << 20)), ("unassigned", "\u{10FFFF}".repeat(6 << 20))] {
        for cap in [100, 2000] {
            let mut peak = PeakAsked::default();
            let ids = context_ids(&mut Meter::new(&tokenizer, &mut peak), &text, cap).unwrap();
            assert_eq!(ids.len(), cap, "{name} cap {cap}");
            let bound = ((cap + 256) * MAX_TOKEN_BYTES + 1024) * TOKENIZER_BYTES_PER_BYTE;
            assert!(peak.0 <= bound, "{name} cap {cap}: {} bytes at once, bound {bound}", peak.0);
        }
    }
}

/// A budget's refusal stops planning and is its result.
#[test]
fn a_budget_refusal_is_the_plans_error() {
    struct Refuse;
    impl PlanBudget for Refuse {
        fn reserve(&mut self, peak_bytes: usize, _: usize) -> Result<(), DeciderError> {
            Err(DeciderError::TooLarge(format!("{peak_bytes} bytes")))
        }
    }
    let tokenizer = Tokenizer::test_tokenizer();
    let error = context_ids(&mut Meter::new(&tokenizer, &mut Refuse), "a state", 10).unwrap_err();
    let expected = format!("{} bytes", 16 * TOKENIZER_BYTES_PER_BYTE);
    assert!(matches!(&error, DeciderError::TooLarge(m) if *m == expected), "{error}");
}
