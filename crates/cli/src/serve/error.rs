//! Error answers: the reference's `{"detail": ...}` body with its status.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use decider::DeciderError;
use serde_json::{Value, json};

/// An HTTP error with the reference's `{"detail": ...}` body.
#[derive(Debug)]
pub(super) struct ApiError(pub StatusCode, pub Value);

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self(status, Value::String(message.into()))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.0, axum::Json(json!({ "detail": self.1 }))).into_response();
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
        other => internal(other),
    }
}
