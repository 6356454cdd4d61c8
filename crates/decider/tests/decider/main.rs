//! The decision runtime's suites in one test binary: against decider-ai's own prompts and
//! answers, the tokenizer, Python's JSON, capped states and the engine.

mod capped_state;
mod decide_form_errors;
mod engine;
mod python_json;
mod reference_fixtures;
mod tokenizer;
