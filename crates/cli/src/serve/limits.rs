//! What one request may cost: the 413 checks on its rows and tokens, in the reference's order.

use std::time::Duration;

use axum::http::StatusCode;

use super::error::ApiError;

#[derive(Clone, Copy)]
pub(super) struct Limits {
    pub max_rows: usize,
    pub max_state_tokens: usize,
    pub max_row_tokens: usize,
    pub max_request_tokens: usize,
    pub max_queue_rows: usize,
    pub max_body_bytes: usize,
    /// Time a request's body may take to arrive, from its headers on.
    pub body_timeout: Duration,
}

impl Limits {
    /// The 413 checks for a request of rows of `lengths` tokens: rows, then tokens per row, then
    /// per request (the reference's order), then rows the queue could never hold at once.
    pub fn check_size(&self, lengths: &[usize]) -> Result<(), ApiError> {
        let (n, total, longest) =
            (lengths.len(), lengths.iter().sum::<usize>(), lengths.iter().copied().max().unwrap_or(0));
        let message = if n > self.max_rows {
            format!(
                "too many questions: the request expands to {n} scoring rows, the limit is {} (DECIDER_MAX_ROWS)",
                self.max_rows
            )
        } else if longest > self.max_row_tokens {
            format!(
                "too many tokens: one row has {longest} tokens, the limit is {} per row (DECIDER_MAX_ROW_TOKENS)",
                self.max_row_tokens
            )
        } else if total > self.max_request_tokens {
            format!(
                "too many tokens: the request has {total} tokens over {n} rows, the limit is {} (DECIDER_MAX_REQUEST_TOKENS)",
                self.max_request_tokens
            )
        } else if n > self.max_queue_rows {
            format!(
                "too many questions: the request expands to {n} scoring rows, more than the queue holds ({}, DECIDER_MAX_QUEUE_ROWS)",
                self.max_queue_rows
            )
        } else {
            return Ok(());
        };
        Err(ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, message))
    }
}
