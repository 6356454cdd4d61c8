//! The `/decide` schema's 422 messages against decider-ai 1.10.0's own check
//! (tests/fixtures/http/schema_errors.py runs `Decider._check_schema` on each schema and commits
//! its message, or null where the schema is accepted): the same schemas are refused with the same
//! text, and the others are planned.

use decider::python_json::loads;
use decider::{DeciderError, Prompter};
use serde::Deserialize;

#[derive(Deserialize)]
struct Case {
    /// The schema as the request's JSON text (NaN and Infinity included, as Python reads them).
    schema: String,
    message: Option<String>,
}

#[test]
fn schemas_are_refused_with_the_references_messages() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/http/schema_errors.json");
    let cases: Vec<Case> = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(cases.len() >= 40, "{} cases", cases.len());
    let prompter = Prompter::demo();
    for case in cases {
        let schema = loads(case.schema.as_bytes()).unwrap_or_else(|e| panic!("{}: {e:?}", case.schema));
        let got = match prompter.plan_decide("a context", Some(&schema)) {
            Ok(_) => None,
            Err(DeciderError::InvalidQuestion(message)) => Some(message),
            Err(other) => panic!("{}: {other}", case.schema),
        };
        assert_eq!(got, case.message, "schema {}", case.schema);
    }
}
