//! One log line and one set of metrics per request: its method, path, status and time, and for
//! an answered decision its rows, tokens and questions (at `info`); a refusal with the `detail`
//! it was answered (at `warn`); a request whose client left before its answer (at `info`).
//! Probes (`/health`, `/metrics`) are logged at `debug`, so a scraper does not fill the log.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;

use super::error::{Refusal, cut};
use super::metrics::Metrics;

/// Bytes of a request's path a log line carries at most.
const LOGGED_PATH_LIMIT: usize = 256;

/// What an answered decision request ran: a response extension the handlers set.
#[derive(Clone, Copy, Default)]
pub(super) struct Served {
    pub rows: usize,
    pub tokens: usize,
    pub questions: usize,
}

/// The middleware: times `request`, logs it and counts it in `metrics`.
pub(super) async fn access_log(State(metrics): State<Arc<Metrics>>, request: Request, next: Next) -> Response {
    let route = route_label(request.uri().path());
    let mut request_line = ClientLeft {
        method: request.method().clone(),
        path: cut(request.uri().path().to_string(), LOGGED_PATH_LIMIT),
        start: Instant::now(),
        answered: false,
    };
    let response = next.run(request).await;
    request_line.answered = true;
    let ClientLeft { method, path, start, .. } = &request_line;
    let seconds = start.elapsed().as_secs_f64();
    let ms = millis(seconds);
    let status = response.status().as_u16();
    metrics.answered(route, status, seconds);
    if let Some(served) = response.extensions().get::<Served>() {
        metrics.decided(route, served.questions, served.tokens);
        let Served { rows, tokens, questions } = *served;
        tracing::info!(%method, %path, status, rows, tokens, questions, ms, "request");
    } else if let Some(Refusal(detail)) = response.extensions().get::<Refusal>() {
        // Status and reason first, as the lines of requests refused before routing have them.
        tracing::warn!(status, detail = %detail, %method, %path, ms, "refused");
    } else if is_probe(route) {
        tracing::debug!(%method, %path, status, ms, "request");
    } else {
        tracing::info!(%method, %path, status, ms, "request");
    }
    response
}

/// A request's method, path and start, which its log line names; logged when dropped
/// unanswered (its future dropped: the client closed the connection).
struct ClientLeft {
    method: Method,
    path: String,
    start: Instant,
    answered: bool,
}

impl Drop for ClientLeft {
    fn drop(&mut self) {
        if !self.answered {
            let ms = millis(self.start.elapsed().as_secs_f64());
            tracing::info!(method = %self.method, path = %self.path, ms, "client left before its answer");
        }
    }
}

/// `seconds` in milliseconds to a tenth, as the log prints them.
fn millis(seconds: f64) -> f64 {
    (seconds * 1e4).round() / 10.0
}

/// The routes' paths as the log and `/metrics` label them (those of `handlers::router`); any
/// other path is `other`.
fn route_label(path: &str) -> &'static str {
    const ROUTES: [&str; 6] = ["/v1/systemone", "/decide", "/health", "/v1/models", "/stats", "/metrics"];
    ROUTES.into_iter().find(|&route| route == path).unwrap_or("other")
}

/// Whether `route` is one that orchestrators and scrapers poll.
fn is_probe(route: &str) -> bool {
    matches!(route, "/health" | "/metrics")
}
