//! The requests and responses of the library's API, in the reference's shapes (decider-ai
//! 1.10.0's `/v1/systemone` body and response, `Decider.decide`'s questions and answers).

use indexmap::IndexMap;
use serde::Serialize;

use crate::answer::Answer;
use crate::python_json::{Json, JsonMap};

/// A `/v1/systemone` request (decider-ai 1.10.0's `/v1/systemone` body).
#[derive(Clone, Debug, PartialEq)]
pub struct SystemOneRequest {
    /// Any JSON: a string is used as it is, anything else as Python's `json.dumps` of it.
    pub state: Json,
    /// `{id: question}`, answered in this order.
    pub questions: JsonMap,
    /// One row per question (default) or all questions in one row.
    pub independent: bool,
    /// Cap on the state segment's tokens (32,768).
    pub max_state_tokens: usize,
}

impl SystemOneRequest {
    /// A request with the defaults; `state` and `questions` as [`Json`] or as `serde_json` values.
    pub fn new<V: Into<Json>>(state: impl Into<Json>, questions: impl IntoIterator<Item = (String, V)>) -> Self {
        let questions = questions.into_iter().map(|(id, q)| (id, q.into())).collect();
        Self { state: state.into(), questions, independent: true, max_state_tokens: crate::prompt::MAX_STATE_TOKENS }
    }
}

/// The `/v1/systemone` response; keys in the reference's order.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SystemOneResponse {
    pub model: String,
    /// Each question's answer, by id in request order.
    pub answers: IndexMap<String, Answer>,
    pub usage: Usage,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Tokens of all rows, their shared prefix counted once.
    pub input_tokens: usize,
    pub output_tokens: usize,
}

/// A question of the plain [`Decider::decide`] form: a text and its options (a choice).
#[derive(Clone, Debug, PartialEq)]
pub struct DecideQuestion {
    pub question: String,
    pub options: Vec<String>,
}

/// The answer to a [`DecideQuestion`] (`Decider.decide`'s dict).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DecideAnswer {
    /// The most probable option (first on ties).
    pub choice: Option<String>,
    /// Its probability (p_max, not TypeSafe's confidence).
    pub confidence: f64,
    /// Each option's probability, by option.
    pub probs: IndexMap<String, f64>,
    pub probs_list: Vec<f64>,
}
