//! Generators of the fuzz suites (proptest strategies): JSON of every shape with numbers and
//! strings at their edges, and `/v1/systemone` questions as clients write them, right, nearly
//! right and wrong.

use decider::python_json::{Int, Json};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Numbers at and past the edges: 0, -0, extremes of i64/u64 and f64, tiny and huge floats.
pub fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        prop_oneof![
            Just(0.0),
            Just(-0.0),
            Just(f64::MAX),
            Just(f64::MIN_POSITIVE),
            Just(5e-324),
            Just(1e16),
            Just(0.1)
        ]
        .prop_map(Value::from),
        any::<f64>().prop_filter("JSON numbers are finite", |x| x.is_finite()).prop_map(Value::from),
        (0u8..12).prop_map(Value::from),
    ]
}

/// Numbers only Python's `json` reads: integers past 64 bits, NaN and the infinities.
pub fn python_number() -> impl Strategy<Value = Json> {
    prop_oneof![
        "-?[1-9][0-9]{19,80}".prop_map(|digits| Json::Int(Int::from_literal(&digits))),
        prop_oneof![Just(f64::NAN), Just(f64::INFINITY), Just(f64::NEG_INFINITY)].prop_map(Json::Float),
    ]
}

/// Any JSON value as Python's `json` reads it, nested a few levels: [`json_value`]'s, with
/// [`python_number`]s among the leaves.
pub fn python_json_value() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![4 => json_value().prop_map(Json::from), 1 => python_number()];
    leaf.prop_recursive(3, 48, 8, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..10).prop_map(Json::List),
            proptest::collection::vec((text(), inner), 0..6)
                .prop_map(|entries| Json::Dict(entries.into_iter().collect())),
        ]
    })
}

/// Strings: any Unicode, and short words that are labels, numbers or keywords the prompt uses.
pub fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        proptest::sample::select(vec![
            "",
            " ",
            "true",
            "false",
            "none",
            "None of the above",
            "0",
            "10",
            "-1",
            "1.5",
            "A",
            "\n",
            "\u{0}",
            "é",
            "日本",
            "🙂"
        ])
        .prop_map(str::to_owned),
        ("[a-z ]{0,3}", 0usize..4).prop_map(|(s, n)| s.repeat(n)),
    ]
}

/// Any JSON value, nested a few levels.
pub fn json_value() -> impl Strategy<Value = Value> {
    let leaf =
        prop_oneof![Just(Value::Null), any::<bool>().prop_map(Value::from), number(), text().prop_map(Value::from)];
    leaf.prop_recursive(4, 64, 12, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..12).prop_map(Value::from),
            proptest::collection::vec((text(), inner), 0..8)
                .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    })
}

/// Questions as clients write them, right or nearly right, and anything at all.
pub fn question() -> impl Strategy<Value = Value> {
    let kind = prop_oneof![
        proptest::sample::select(vec!["choice", "noul", "score", "bool", "boolean", "yesno", "multi", "Choice", ""])
            .prop_map(Value::from),
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
pub fn valid_question() -> impl Strategy<Value = Value> {
    let instructions = || text().prop_filter("instructions are not blank", |t| !t.trim().is_empty());
    prop_oneof![
        (instructions(), 2usize..=255).prop_map(|(i, n)| json!({"type": "choice", "instructions": i, "criteria": (0..n).map(|k| format!("option {k}")).collect::<Vec<_>>()})),
        instructions().prop_map(|i| json!({"type": "noul", "instructions": i})),
        (instructions(), 2usize..=10).prop_map(|(i, n)| json!({"type": "score", "instructions": i, "criteria": (0..n).map(|k| format!("{k}: level {k}")).collect::<Vec<_>>()})),
    ]
}

pub fn questions() -> impl Strategy<Value = Map<String, Value>> {
    proptest::collection::vec((text(), question()), 0..6).prop_map(|entries| entries.into_iter().collect())
}

/// One to three questions the reference accepts, keyed `q0`, `q1`, ….
pub fn valid_questions() -> impl Strategy<Value = Map<String, Value>> {
    proptest::collection::vec(valid_question(), 1..4)
        .prop_map(|questions| questions.into_iter().enumerate().map(|(i, q)| (format!("q{i}"), q)).collect())
}
