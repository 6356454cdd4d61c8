//! Error answers: the reference's `{"detail": ...}` body with its status.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use decider::DeciderError;
use serde_json::{Value, json};

/// An HTTP error with the reference's `{"detail": ...}` body.
#[derive(Debug)]
pub(super) struct ApiError(pub StatusCode, pub Value);

/// Bytes of a message an error answer carries at most. Messages quote the request (an unknown
/// question type, a question's id), and a request may be megabytes long: past this the message
/// is cut, and says so. FastAPI answers the whole message.
pub(super) const MESSAGE_LIMIT: usize = 64 << 10;

/// Bytes of an answer's `detail` a log line carries at most.
pub(super) const LOGGED_DETAIL_LIMIT: usize = 2 << 10;

/// The `detail` of an error answer cut for its log line: a response extension every error answer
/// carries to the access log.
#[derive(Clone)]
pub(super) struct Refusal(pub String);

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self(status, Value::String(cut(message.into(), MESSAGE_LIMIT)))
    }
}

/// `text` cut to at most `limit` bytes (on a character boundary), followed by how much was cut.
pub(super) fn cut(mut text: String, limit: usize) -> String {
    if text.len() > limit {
        let total = text.len();
        text.truncate(text.floor_char_boundary(limit));
        text.push_str(&format!("... ({} of {total} bytes cut)", total - text.len()));
    }
    text
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let logged = Refusal(cut(self.1.to_string(), LOGGED_DETAIL_LIMIT));
        let mut response = (self.0, axum::Json(json!({ "detail": self.1 }))).into_response();
        response.extensions_mut().insert(logged);
        if self.0 == StatusCode::SERVICE_UNAVAILABLE {
            // The queue drains at the model's pace; a second is the shortest wait worth retrying after.
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

pub(super) fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

/// The model thread dropped a reply: the backend panicked on this request.
pub(super) fn model_failed() -> ApiError {
    internal("the model failed on this request; the server log has the reason")
}

pub(super) fn unprocessable(e: DeciderError) -> ApiError {
    match e {
        DeciderError::InvalidQuestion(m) => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, m),
        DeciderError::TooLarge(m) => ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, m),
        other => internal(other),
    }
}
