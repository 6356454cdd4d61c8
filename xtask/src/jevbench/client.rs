//! Where the requests go: the model in this process, or any `/v1/systemone` server over HTTP
//! exactly as JevBench's `typesafe` adapter talks to it.

use std::time::Duration;

use decider::Qwen35Ops;
use decider::{Decider, DeciderError, SystemOneRequest};
use serde_json::{Map, Value, json};

use super::items::Item;

/// Why a request produced no response body.
#[derive(Clone, Debug, PartialEq)]
pub enum Failure {
    /// An HTTP status other than 200, with the body's text.
    Status(u16, String),
    /// No HTTP answer at all (refused, timed out, malformed).
    Transport(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Status(code, body) => write!(f, "HTTP {code}: {body}"),
            Self::Transport(e) => write!(f, "{e}"),
        }
    }
}

/// Something that answers `/v1/systemone` request bodies.
pub trait Endpoint {
    fn post(&mut self, body: &Value) -> Result<Value, Failure>;
}

/// The request JevBench's adapter builds for an item: the state as is, the model name, and one
/// question `decision` with `type`, `instructions` and (when the item has them) `criteria`,
/// every object in the file's key order.
pub fn request_body(item: &Item, model: &str) -> Value {
    let mut question = Map::new();
    for key in ["type", "instructions", "criteria"] {
        if let Some(value) = item.question.get(key).filter(|v| !v.is_null()) {
            question.insert(key.into(), value.clone());
        }
    }
    json!({"state": item.state, "model": model, "questions": {"decision": question}})
}

/// The model in this process.
pub struct InProcess<'a, B: Qwen35Ops>(pub &'a Decider<B>);

impl<B: Qwen35Ops> Endpoint for InProcess<'_, B> {
    fn post(&mut self, body: &Value) -> Result<Value, Failure> {
        let questions = body["questions"].as_object().cloned().unwrap_or_default();
        let request = SystemOneRequest::new(body["state"].clone(), questions);
        match self.0.answer(&request) {
            Ok(response) => Ok(serde_json::to_value(response).expect("a response serialises")),
            Err(DeciderError::InvalidQuestion(m)) => Err(Failure::Status(422, json!({"detail": m}).to_string())),
            Err(e) => Err(Failure::Status(500, e.to_string())),
        }
    }
}

/// A `/v1/systemone` server, 120 s timeout, no retries.
pub struct Http {
    agent: ureq::Agent,
    url: String,
}

/// The route's URL from what a user gives: the server's address (`http://host:8000`) or, as
/// other JevBench clients take it, the route's full URL (`http://host:8000/v1/systemone`).
pub fn systemone_url(endpoint: &str) -> String {
    let endpoint = endpoint.trim_end_matches('/');
    if endpoint.ends_with("/v1/systemone") { endpoint.to_string() } else { format!("{endpoint}/v1/systemone") }
}

impl Http {
    pub fn new(endpoint: &str) -> Self {
        let agent = ureq::AgentBuilder::new().timeout(Duration::from_secs(120)).build();
        Self { agent, url: systemone_url(endpoint) }
    }
}

impl Endpoint for Http {
    fn post(&mut self, body: &Value) -> Result<Value, Failure> {
        match self.agent.post(&self.url).set("Content-Type", "application/json").send_json(body) {
            Ok(response) => response.into_json().map_err(|e| Failure::Transport(format!("unreadable response: {e}"))),
            Err(ureq::Error::Status(code, response)) => {
                Err(Failure::Status(code, response.into_string().unwrap_or_default()))
            }
            Err(e) => Err(Failure::Transport(e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::systemone_url;

    #[test]
    fn an_endpoint_is_a_base_url_or_the_routes_full_url() {
        for endpoint in [
            "http://127.0.0.1:8000",
            "http://127.0.0.1:8000/",
            "http://127.0.0.1:8000/v1/systemone",
            "http://127.0.0.1:8000/v1/systemone/",
        ] {
            assert_eq!(systemone_url(endpoint), "http://127.0.0.1:8000/v1/systemone", "{endpoint}");
        }
        assert_eq!(systemone_url("https://host/prefix"), "https://host/prefix/v1/systemone");
    }
}
