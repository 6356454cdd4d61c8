//! The HTTP routes and their handlers: each reads its request, plans it through [`AppState`] and
//! answers in the reference's JSON.

use std::sync::{Arc, OnceLock};

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::routing::{get, post};
use axum::{Extension, Router};
use decider::python_json::Json;
use decider::{AnswerType, FormAnswers};
use serde_json::{Map, Value, json};

use tower::ServiceExt;

use super::access_log::{self, Served};
use super::body::{self, JsonBody};
use super::error::ApiError;
use super::memory::{MemoryBudget, Reservation};
use super::metrics::Metrics;
use super::queue::{RouteAnswer, RoutePlan};
use super::request::{self, field_error, invalid_fields, systemone_request};
use super::state::{Answered, AppState};

/// Every route of the reference's server and `/metrics`, and FastAPI's answers to the others.
pub(super) fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/systemone", post(systemone))
        .route("/decide", post(decide))
        .route("/health", get(health))
        .route("/v1/models", get(models))
        .route("/stats", get(stats_report))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(state.clone(), only_chunked))
        .with_state(state)
}

/// The server while its model loads: `/health` says so with a 503, `/metrics` answers, and
/// every other request is a 503 that says to retry.
pub(super) fn loading(model: String, metrics: Arc<Metrics>, memory: MemoryBudget) -> Router {
    let health = move || async move {
        let body = json!({"ok": false, "status": "loading", "model": model});
        (StatusCode::SERVICE_UNAVAILABLE, [(header::RETRY_AFTER, "1")], axum::Json(body))
    };
    let scrape = move || async move { metrics_text(metrics.render(0, memory.used())) };
    Router::new().route("/health", get(health)).route("/metrics", get(scrape)).fallback(
        |body: axum::body::Body| async {
            body::drain(body).await;
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the model is loading; retry later")
        },
    )
}

/// `app` once it is set (the model loaded), `loading` until then, request by request: a
/// keep-alive connection opened while the model loads is answered by the model once it is there.
pub(super) fn loaded_or(app: Arc<OnceLock<Router>>, loading: Router, metrics: Arc<Metrics>) -> Router {
    let switch = tower::service_fn(move |request: axum::extract::Request| {
        let router = app.get().unwrap_or(&loading).clone();
        router.oneshot(request)
    });
    Router::new().fallback_service(switch).layer(axum::middleware::from_fn_with_state(metrics, access_log::access_log))
}

/// A request whose `Transfer-Encoding` is anything but `chunked` alone: a 501, and the connection
/// closed, as RFC 9112 (section 6.1) asks of a server that does not know a transfer coding
/// (hyper reads `gzip, chunked` as chunked and passes the still-coded body on).
/// Counted and logged as the other refusals.
async fn only_chunked(
    State(state): State<Arc<AppState>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let codings: Vec<_> = request.headers().get_all(header::TRANSFER_ENCODING).iter().collect();
    match codings[..] {
        [] => next.run(request).await,
        [coding] if coding.as_bytes().eq_ignore_ascii_case(b"chunked") => next.run(request).await,
        _ => {
            let listed = codings.iter().map(|c| String::from_utf8_lossy(c.as_bytes())).collect::<Vec<_>>().join(", ");
            let message = format!("transfer coding not implemented: {listed:?} (only \"chunked\" is)");
            let refusal = ApiError::new(StatusCode::NOT_IMPLEMENTED, message);
            let mut response = state.refused(&state.stats.errors, refusal).into_response();
            response.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
            response
        }
    }
}

async fn systemone(
    State(state): State<Arc<AppState>>,
    JsonBody(body, reservation): JsonBody,
) -> Result<Answered, ApiError> {
    let watch = state.watch_client();
    let response = answer_systemone(&state, body, reservation).await;
    watch.finished();
    response
}

/// `reservation` holds the body's memory until the request is planned.
async fn answer_systemone(state: &Arc<AppState>, body: Json, reservation: Reservation) -> Result<Answered, ApiError> {
    let (request, has_assets) = systemone_request(body, state.limits.max_state_tokens)?;
    if has_assets {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "this server was started without image support (DECIDER_IMAGES=1)",
        ));
    }
    let plan = state.plan(reservation, move |prompter, budget| prompter.plan_within(&request, budget)).await?;
    state.run(RoutePlan::SystemOne(plan)).await
}

async fn decide(
    State(state): State<Arc<AppState>>,
    JsonBody(body, reservation): JsonBody,
) -> Result<Answered, ApiError> {
    let watch = state.watch_client();
    let answers = answer_decide(&state, body, reservation).await;
    watch.finished();
    answers
}

/// `reservation` holds the body's memory until the form is planned.
async fn answer_decide(state: &Arc<AppState>, body: Json, reservation: Reservation) -> Result<Answered, ApiError> {
    let Json::Dict(mut fields) = body else { return Err(request::not_an_object(&body)) };
    let context = match fields.get_mut("context") {
        Some(Json::Str(c)) => std::mem::take(c),
        Some(other) => {
            return Err(invalid_fields(vec![field_error(
                "string_type",
                &[json!("context")],
                "Input should be a valid string",
                other,
            )]));
        }
        None => {
            return Err(invalid_fields(vec![field_error(
                "missing",
                &[json!("context")],
                "Field required",
                &Json::Dict(fields),
            )]));
        }
    };
    let schema = fields.get_mut("schema").map(Json::take).unwrap_or(Json::Null);
    drop(fields);
    // Validated and tokenized off the model thread, and held to the row limits like
    // `/v1/systemone` (an empty schema runs no row).
    let plan = state
        .plan(reservation, move |prompter, budget| prompter.plan_decide_within(&context, Some(&schema), budget))
        .await?;
    if plan.row_tokens() == 0 {
        // Answered without the model, and counted as the reference counts it: a request.
        state.stats.answered(0);
        return Ok((Extension(Served::default()), RouteAnswer::Decide(FormAnswers::new())));
    }
    state.run(RoutePlan::Decide(plan)).await
}

/// An unknown route: FastAPI's 404 body.
/// Its body is read and dropped first, as a refused oversized one is (`body.rs`): a client still
/// writing it would otherwise never read the answer.
async fn not_found(body: axum::body::Body) -> (StatusCode, axum::Json<Value>) {
    body::drain(body).await;
    (StatusCode::NOT_FOUND, axum::Json(json!({"detail": "Not Found"})))
}

/// A known route with another method: FastAPI's 405 body.
/// Its body is drained as [`not_found`]'s is.
async fn method_not_allowed(body: axum::body::Body) -> (StatusCode, axum::Json<Value>) {
    body::drain(body).await;
    (StatusCode::METHOD_NOT_ALLOWED, axum::Json(json!({"detail": "Method Not Allowed"})))
}

async fn health(State(state): State<Arc<AppState>>) -> axum::Json<Value> {
    let config = &state.prompter.config;
    let by_type: Map<String, Value> = [AnswerType::Choice, AnswerType::Noul, AnswerType::Score]
        .into_iter()
        .map(|kind| (kind.as_str().to_string(), json!(config.temperatures.of(kind, 2))))
        .collect();
    axum::Json(json!({
        "ok": true,
        "model": state.source,
        "device": state.device,
        "layout": "plain",
        "temperature": config.temperature,
        "temperature_by_type": by_type,
    }))
}

/// `GET /stats`: the reference's counters and limits.
async fn stats_report(State(state): State<Arc<AppState>>) -> axum::Json<Value> {
    axum::Json(state.stats.report(state.backlog.rows(), state.memory.used(), &state.limits))
}

/// `GET /metrics`: the Prometheus text (`metrics.rs`).
async fn metrics(State(state): State<Arc<AppState>>) -> axum::response::Response {
    metrics_text(state.metrics.render(state.backlog.rows(), state.memory.used()))
}

fn metrics_text(text: String) -> axum::response::Response {
    use axum::response::IntoResponse;
    ([(header::CONTENT_TYPE, super::metrics::CONTENT_TYPE)], text).into_response()
}

async fn models(State(state): State<Arc<AppState>>) -> axum::Json<Value> {
    let config = &state.prompter.config;
    axum::Json(json!({"models": [{
        "name": config.model_name,
        "description": "decider: one-pass typed decisions with calibrated probabilities",
        "release_date": config.release_date,
    }]}))
}
