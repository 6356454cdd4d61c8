//! The request body: its size limit, and its parsing as JSON as the reference reads it
//! (Python's `json.loads`), with FastAPI's 422 and 400.
//!
//! A body over the limit is a 413, but the 413 must reach the client. Most clients (curl for
//! small bodies, ureq, requests) write the whole body before they read the response; a server
//! that answers and closes while the body is still arriving makes the client's write fail with
//! a broken pipe, and the 413 is never read. So the rest of an oversized body is read and
//! dropped (bounded in bytes and time, as nginx's lingering close) before the 413 goes out.
//! A client that asked `Expect: 100-continue` has not sent the body yet: it gets the 413 at once.
//! A body that has not all arrived within `--body-timeout` is a 408, so a slow client holds a
//! connection (and the shutdown) for a bounded time.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, StatusCode, header};
use http_body_util::BodyExt;
use std::borrow::Cow;

use decider::python_json::{Json, LoadError, decode, loads_text};
use serde_json::json;

use super::error::ApiError;
use super::memory::{Reservation, parse_bytes};
use super::request::{invalid_fields, not_an_object};
use super::state::AppState;

/// Bytes of an oversized body read and dropped at most, after the limit.
const DRAIN_BYTES: usize = 64 << 20;
/// Time spent reading and dropping an oversized body at most.
const DRAIN_TIME: Duration = Duration::from_secs(10);

/// A request body parsed as JSON, at most `--max-body-bytes` long, with the memory its bytes
/// and its parse hold reserved in the server's budget (`memory.rs`) until the handler drops it.
pub(super) struct JsonBody(pub Json, pub Reservation);

impl FromRequest<Arc<AppState>> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &Arc<AppState>) -> Result<Self, ApiError> {
        let (parts, body) = request.into_parts();
        let limits = &state.limits;
        let mut reservation = state.memory.reservation();
        let bytes = tokio::time::timeout(limits.body_timeout, read_limited(&parts.headers, body, limits.max_body_bytes, &mut reservation))
            .await
            .map_err(|_| {
                let seconds = limits.body_timeout.as_secs();
                let message = format!("request body timeout: the body did not arrive within {seconds} s (--body-timeout, DECIDER_BODY_TIMEOUT)");
                state.refused(&state.stats.timed_out, ApiError::new(StatusCode::REQUEST_TIMEOUT, message))
            })?
            .map_err(|e| state.refused_by_status(e))?;
        // Scanning and parsing a large body takes long: not on the async workers.
        let (state, json) = (state.clone(), is_json(&parts.headers));
        tokio::task::spawn_blocking(move || {
            reservation
                .grow(parse_bytes(&bytes), "its body and parsed JSON")
                .map_err(|e| state.refused_by_status(e))?;
            // As FastAPI reads a pydantic-model body: an empty one is missing; one of another
            // content type than JSON is validated as raw text, which is never an object.
            if bytes.is_empty() {
                return Err(invalid_fields(vec![
                    json!({"type": "missing", "loc": ["body"], "msg": "Field required", "input": null}),
                ]));
            }
            if !json {
                return Err(not_an_object(&Json::Str(String::from_utf8_lossy(&bytes).into_owned())));
            }
            // A UTF-16/32 body is decoded into a string of its own, and scanned for its parse
            // as that text (its bytes are not UTF-8).
            let text = decode(&bytes).map_err(refusal)?;
            if let Cow::Owned(decoded) = &text {
                reservation
                    .grow(decoded.len() + parse_bytes(decoded.as_bytes()), "its body and parsed JSON")
                    .map_err(|e| state.refused_by_status(e))?;
            }
            Ok(JsonBody(loads_text(&text).map_err(refusal)?, reservation))
        })
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("parsing the request body: {e}")))?
    }
}

/// The whole body, or a 413 once it is known to be longer than `limit` or than the memory
/// budget allows; its bytes are reserved in `reservation` as they arrive.
async fn read_limited(
    headers: &HeaderMap,
    mut body: Body,
    limit: usize,
    reservation: &mut Reservation,
) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body too large: the limit is {limit} bytes (--max-body-bytes, DECIDER_MAX_BODY_BYTES)"),
        )
    };
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let waits_for_continue =
        headers.get(header::EXPECT).is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
    let refuse = |body: Body, error: ApiError| async move {
        if !waits_for_continue {
            drain(body).await;
        }
        Err(error)
    };
    if declared.is_some_and(|n| n > limit as u64) {
        return refuse(body, too_large()).await;
    }
    // Kept as the frames hyper read, and reserved as they arrive: a client that declares a length
    // and sends nothing holds nothing. The frames are joined once at the end (twice the body's
    // bytes for that moment, so twice each frame is reserved).
    let (mut frames, mut length) = (Vec::new(), 0);
    while let Some(frame) = body.frame().await {
        let frame =
            frame.map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, format!("reading the request body: {e}")))?;
        if let Ok(data) = frame.into_data() {
            if length + data.len() > limit {
                return refuse(body, too_large()).await;
            }
            if let Err(error) = reservation.grow(2 * data.len(), "its body") {
                return refuse(body, error).await;
            }
            length += data.len();
            frames.push(data);
        }
    }
    Ok(match <[Bytes; 1]>::try_from(frames) {
        Ok([one]) => one,
        Err(frames) => Bytes::from(frames.concat()),
    })
}

/// Reads and drops the rest of a body, up to `DRAIN_BYTES` and `DRAIN_TIME`.
pub(super) async fn drain(mut body: Body) {
    let _ = tokio::time::timeout(DRAIN_TIME, async {
        let mut dropped = 0;
        while let Some(Ok(frame)) = body.frame().await {
            dropped += frame.data_ref().map_or(0, |d| d.len());
            if dropped > DRAIN_BYTES {
                break;
            }
        }
    })
    .await;
}

/// Whether the body is JSON by its content type, as FastAPI decides: no content type, or
/// `application/json` or `application/…+json` (parameters such as `charset` aside).
fn is_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(header::CONTENT_TYPE) else { return true };
    let Ok(mime) = value.to_str().unwrap_or("").parse::<mime::Mime>() else { return false };
    mime.type_() == mime::APPLICATION && (mime.subtype() == mime::JSON || mime.suffix() == Some(mime::JSON))
}

/// A body `json.loads` refused, answered as FastAPI answers it: a `JSONDecodeError` is a 422
/// `json_invalid` with Python's message at its character offset; any other exception (not
/// text in its encoding, an integer of more than 4,300 digits, nesting past the recursion limit)
/// is a 400 whose detail does not say why, so the log does.
fn refusal(e: LoadError) -> ApiError {
    match e {
        LoadError::Decode { msg, pos, .. } => {
            let detail = json!([{"type": "json_invalid", "loc": ["body", pos], "msg": "JSON decode error", "input": {}, "ctx": {"error": msg}}]);
            ApiError(StatusCode::UNPROCESSABLE_ENTITY, detail)
        }
        LoadError::Other(cause) => {
            tracing::warn!("a request body could not be read as JSON: {cause}");
            ApiError::new(StatusCode::BAD_REQUEST, "There was an error parsing the body")
        }
    }
}
