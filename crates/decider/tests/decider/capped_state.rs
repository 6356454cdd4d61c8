//! A state is rendered and tokenized only up to a prefix proportional to its token cap, and the
//! tokens equal those of the whole state cut at the cap (`encode("Context:\n" + state)[:cap]`,
//! what decider-ai 1.10.0 computes), over texts that stress where the prefix may be cut:
//! prose, JSON with annotated lists, CJK without spaces, combining marks, Hangul jamo, emoji,
//! digit runs, whitespace runs, punctuation runs and one unbroken run of letters.

use decider::Tokenizer;
use decider::prompt::{PlanOptions, context_ids, plan};
use decider::python_json::Json;
use decider::state::render_state;
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
    ]
}

fn whole(tokenizer: &Tokenizer, rendered: &str, cap: usize) -> Vec<u32> {
    let mut ids = tokenizer.encode(&format!("Context:\n{rendered}"));
    ids.truncate(cap);
    ids
}

#[test]
fn a_text_state_cut_at_its_cap_equals_the_whole_text_cut() {
    let tokenizer = Tokenizer::test_tokenizer();
    for (name, text) in texts() {
        for cap in [1, 7, 150, 333, 1000] {
            let capped = context_ids(&tokenizer, &text, cap);
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
            let planned = plan(&tokenizer, state, question.as_dict().unwrap(), options).unwrap();
            let expected = whole(&tokenizer, &rendered, cap);
            assert_eq!(planned.context_len, expected.len(), "state {n} cap {cap}");
            assert_eq!(planned.rows[0].ids[..planned.context_len], expected[..], "state {n} cap {cap}");
        }
    }
}
