//! `decider serve`: the reference's HTTP API (decider-ai 1.10.0's server) on axum.
//!
//! Requests are validated and tokenized on the async side; the model runs on one worker
//! thread that owns it and answers requests in arrival order. Rows are admitted against a
//! queue bound (503 past it) after the size limits (413), and every question is validated
//! before either (422), as in the reference.

use std::net::SocketAddr;
use std::sync::Arc;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;

use anyhow::Context;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use decider::decide_form::DecidePlan;
use decider::{AnswerType, DeciderError, Plan, Prompter, SystemOneRequest};
use qwen35::Qwen35Ops;
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;

use crate::backend::{BackendName, GenericTask};
use crate::model_source::{ModelSource, WeightsArg};

mod body;
use body::JsonBody;

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Model folder, or `demo` (random weights, runs offline).
    #[arg(long, env = "DECIDER_MODEL")]
    pub model: ModelSource,
    #[command(flatten)]
    pub weights: WeightsArg,
    /// One temperature for every answer type, instead of decider_config.json's.
    #[arg(long, env = "DECIDER_TEMPERATURE")]
    pub temperature: Option<f64>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8000")]
    pub addr: SocketAddr,
    #[arg(long, value_enum, default_value_t = BackendName::default_name())]
    pub backend: BackendName,
    /// Scoring rows one request may expand to (questions and isolated Score levels).
    #[arg(long, env = "DECIDER_MAX_ROWS", default_value_t = 1024)]
    pub max_rows: usize,
    /// Tokens of the state segment; longer states are cut.
    #[arg(long, env = "DECIDER_MAX_STATE_TOKENS", default_value_t = 32768)]
    pub max_state_tokens: usize,
    /// Tokens in one row (default: the state cap + 4,096).
    #[arg(long, env = "DECIDER_MAX_ROW_TOKENS")]
    pub max_row_tokens: Option<usize>,
    /// Tokens of all rows of one request.
    #[arg(long, env = "DECIDER_MAX_REQUEST_TOKENS", default_value_t = 1 << 20)]
    pub max_request_tokens: usize,
    /// Rows admitted and not yet answered, over all requests; more is a 503.
    #[arg(long, env = "DECIDER_MAX_QUEUE_ROWS", default_value_t = 4096)]
    pub max_queue_rows: usize,
    /// Largest request body in bytes (413 above).
    #[arg(long, env = "DECIDER_MAX_BODY_BYTES", default_value_t = 64 << 20)]
    pub max_body_bytes: usize,
}

/// Work for the model thread.
enum Job {
    SystemOne(Plan, oneshot::Sender<Result<decider::SystemOneResponse, DeciderError>>),
    Decide(DecidePlan, oneshot::Sender<Map<String, Value>>),
}

struct AppState {
    prompter: Prompter,
    jobs: mpsc::Sender<Job>,
    queued_rows: AtomicUsize,
    limits: Limits,
    source: String,
    device: String,
    stats: Stats,
}

/// The counters of `GET /stats`, named as the reference server's `stats`, kept as the server runs.
#[derive(Default)]
struct Stats {
    /// Requests answered.
    requests: AtomicU64,
    /// Model-thread jobs run (one per answered request: its rows run as one job).
    batches: AtomicU64,
    /// Questions answered.
    decisions: AtomicU64,
    /// Rows scored.
    rows: AtomicU64,
    /// Requests of several rows whose shared state ran once.
    shared_prefix_requests: AtomicU64,
    /// Requests refused with a question error (422) or failed on the model thread (500).
    errors: AtomicU64,
    /// 413s from the row and token limits.
    rejected_too_large: AtomicU64,
    /// 503s from the queue bound.
    rejected_overloaded: AtomicU64,
    /// Jobs by their number of rows.
    batch_hist: Mutex<BTreeMap<usize, u64>>,
}

impl Stats {
    fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A request answered with `questions` answers from `rows` rows in one job.
    fn answered(&self, questions: usize, rows: usize) {
        Self::count(&self.requests);
        Self::count(&self.batches);
        self.decisions.fetch_add(questions as u64, Ordering::Relaxed);
        self.rows.fetch_add(rows as u64, Ordering::Relaxed);
        if rows > 1 {
            Self::count(&self.shared_prefix_requests);
        }
        *self.batch_hist.lock().unwrap_or_else(|e| e.into_inner()).entry(rows).or_default() += 1;
    }
}

#[derive(Clone, Copy)]
struct Limits {
    max_rows: usize,
    max_state_tokens: usize,
    max_row_tokens: usize,
    max_request_tokens: usize,
    max_queue_rows: usize,
    max_body_bytes: usize,
}

/// An HTTP error with the reference's `{"detail": ...}` body.
struct ApiError(StatusCode, Value);

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self(status, Value::String(message.into()))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, axum::Json(json!({ "detail": self.1 }))).into_response()
    }
}

impl ServeArgs {
    /// The defaults of `decider serve --model MODEL --addr 127.0.0.1:0` (a free port).
    pub fn new(model: ModelSource) -> Self {
        Self {
            model,
            weights: WeightsArg { format: Default::default() },
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            backend: BackendName::default_name(),
            max_rows: 1024,
            max_state_tokens: 32768,
            max_row_tokens: None,
            max_request_tokens: 1 << 20,
            max_queue_rows: 4096,
            max_body_bytes: 64 << 20,
            temperature: None,
        }
    }
}

impl GenericTask for &ServeArgs {
    fn run<B: Qwen35Ops>(self, device: &B::Device) -> anyhow::Result<()> {
        let demo = if self.model.is_demo() { " (demo model: random weights)" } else { "" };
        serve::<B>(self, device, shutdown_signal(), |name, addr| {
            println!("decider serving {name} on http://{addr} with backend {}{demo}", self.backend);
        })?;
        eprintln!("decider: shut down");
        Ok(())
    }
}

/// Loads the model, binds `args.addr`, calls `ready` with the model name and bound address, and
/// serves until `shutdown` completes; requests in flight are finished first.
pub fn serve<B: Qwen35Ops>(
    args: &ServeArgs,
    device: &B::Device,
    shutdown: impl Future<Output = ()> + Send + 'static,
    ready: impl FnOnce(&str, SocketAddr),
) -> anyhow::Result<()> {
    let (jobs, inbox) = mpsc::channel::<Job>();
    let (loaded_tx, loaded) = mpsc::channel();
    let (model, weights, temperature) = (args.model.clone(), args.weights.format, args.temperature);
    let device = device.clone();
    // The model thread owns the model: it loads it, then answers jobs until the server
    // drops its sender.
    std::thread::Builder::new().name("model".into()).spawn(move || {
        let loaded = model.load::<B>(weights, &device).and_then(|decider| match temperature {
            Some(t) => Ok(decider.with_temperature(t)?),
            None => Ok(decider),
        });
        let decider = match loaded {
            Ok(decider) => decider,
            Err(e) => return loaded_tx.send(Err(e)).unwrap_or(()),
        };
        let _ = loaded_tx.send(Ok((decider.prompter().clone(), decider.source().to_string(), device_label(&format!("{device:?}")))));
        for job in inbox {
            // A backend that panics on one request (out of device memory, say) fails that
            // request with a 500, its reply dropped; the server goes on with the next.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match job {
                Job::SystemOne(plan, reply) => {
                    let _ = reply.send(decider.answer_plan(&plan));
                }
                Job::Decide(plan, reply) => {
                    let _ = reply.send(decider.answer_decide(&plan));
                }
            }));
        }
    })?;
    let (prompter, source, device) = loaded.recv().context("the model thread stopped")??;
    let limits = Limits {
        max_rows: args.max_rows,
        max_state_tokens: args.max_state_tokens,
        max_row_tokens: args.max_row_tokens.unwrap_or(args.max_state_tokens + 4096),
        max_request_tokens: args.max_request_tokens,
        max_queue_rows: args.max_queue_rows,
        max_body_bytes: args.max_body_bytes,
    };
    let state = Arc::new(AppState { prompter, jobs, queued_rows: AtomicUsize::new(0), limits, source, device, stats: Stats::default() });
    let app = Router::new()
        .route("/v1/systemone", post(systemone))
        .route("/decide", post(decide))
        .route("/health", get(health))
        .route("/v1/models", get(models))
        .route("/stats", get(stats))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state.clone());
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(args.addr).await.with_context(|| format!("binding {}", args.addr))?;
        ready(&state.prompter.config.model_name, listener.local_addr()?);
        axum::serve(listener, app).with_graceful_shutdown(shutdown).await?;
        anyhow::Ok(())
    })
}

/// Ctrl-C or SIGTERM: stop accepting, finish the requests in flight.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        if let Ok(mut signal) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            signal.recv().await;
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = terminate => {} }
}

/// Rows admitted for one request; released when the answer is in (or the client left).
struct Admission<'a> {
    state: &'a AppState,
    rows: usize,
}

impl<'a> Admission<'a> {
    fn new(state: &'a AppState, rows: usize) -> Result<Self, ApiError> {
        let limit = state.limits.max_queue_rows;
        let admitted = state.queued_rows.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |queued| (queued + rows <= limit).then_some(queued + rows));
        match admitted {
            Ok(_) => Ok(Self { state, rows }),
            Err(queued) => Err(state.refused(&state.stats.rejected_overloaded, ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("server busy: {queued} rows queued, the limit is {limit} (DECIDER_MAX_QUEUE_ROWS); retry later"),
            ))),
        }
    }
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        self.state.queued_rows.fetch_sub(self.rows, Ordering::SeqCst);
    }
}

/// One entry of FastAPI's list-shaped 422 `detail`.
fn field_error(kind: &str, loc: &[Value], msg: &str, input: &Value) -> Value {
    let mut loc_all = vec![json!("body")];
    loc_all.extend_from_slice(loc);
    json!({"type": kind, "loc": loc_all, "msg": msg, "input": input})
}

/// pydantic's lax boolean.
fn lax_bool(value: &Value) -> Option<bool> {
    match value {
        Value::Bool(b) => Some(*b),
        Value::Number(n) if n.as_f64() == Some(1.0) => Some(true),
        Value::Number(n) if n.as_f64() == Some(0.0) => Some(false),
        Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
            "1" | "on" | "t" | "true" | "y" | "yes" => Some(true),
            "0" | "off" | "f" | "false" | "n" | "no" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

/// `S1Req`: the fields of a `/v1/systemone` body, with pydantic's errors for wrong types.
fn systemone_request(body: &Value, max_state_tokens: usize) -> Result<(SystemOneRequest, bool), ApiError> {
    let Value::Object(fields) = body else {
        let msg = "Input should be a valid dictionary or object to extract fields from";
        return Err(ApiError(StatusCode::UNPROCESSABLE_ENTITY, json!([field_error("model_attributes_type", &[], msg, body)])));
    };
    let mut errors = Vec::new();
    for required in ["state", "questions"] {
        if !fields.contains_key(required) {
            errors.push(field_error("missing", &[json!(required)], "Field required", body));
        }
    }
    let questions = match fields.get("questions") {
        Some(Value::Object(q)) => q.clone(),
        Some(other) => {
            errors.push(field_error("dict_type", &[json!("questions")], "Input should be a valid dictionary", other));
            Map::new()
        }
        None => Map::new(),
    };
    for name in ["model", "layout"] {
        if let Some(v) = fields.get(name).filter(|v| !v.is_null() && !v.is_string()) {
            errors.push(field_error("string_type", &[json!(name)], "Input should be a valid string", v));
        }
    }
    let independent = match fields.get("independent") {
        None => true,
        Some(v) => lax_bool(v).unwrap_or_else(|| {
            errors.push(field_error("bool_parsing", &[json!("independent")], "Input should be a valid boolean, unable to interpret input", v));
            true
        }),
    };
    let has_assets = match fields.get("assets") {
        None | Some(Value::Null) => false,
        Some(Value::Object(a)) => !a.is_empty(),
        Some(other) => {
            errors.push(field_error("dict_type", &[json!("assets")], "Input should be a valid dictionary", other));
            false
        }
    };
    if !errors.is_empty() {
        return Err(ApiError(StatusCode::UNPROCESSABLE_ENTITY, Value::Array(errors)));
    }
    let mut request = SystemOneRequest::new(fields["state"].clone(), questions);
    request.independent = independent;
    request.max_state_tokens = max_state_tokens;
    Ok((request, has_assets))
}

impl AppState {
    /// `error`, counted in `counter` of `/stats`.
    fn refused(&self, counter: &AtomicU64, error: ApiError) -> ApiError {
        Stats::count(counter);
        error
    }

    /// The 413 checks, counted in `/stats`.
    fn check_size(&self, lengths: &[usize]) -> Result<(), ApiError> {
        check_size(&self.limits, lengths).map_err(|e| self.refused(&self.stats.rejected_too_large, e))
    }
}

/// The 413 checks, in the reference's order: rows, then tokens per row, then per request.
fn check_size(limits: &Limits, lengths: &[usize]) -> Result<(), ApiError> {
    let (n, total, longest) = (lengths.len(), lengths.iter().sum::<usize>(), lengths.iter().copied().max().unwrap_or(0));
    let message = if n > limits.max_rows {
        format!("too many questions: the request expands to {n} scoring rows, the limit is {} (DECIDER_MAX_ROWS)", limits.max_rows)
    } else if longest > limits.max_row_tokens {
        format!("too many tokens: one row has {longest} tokens, the limit is {} per row (DECIDER_MAX_ROW_TOKENS)", limits.max_row_tokens)
    } else if total > limits.max_request_tokens {
        format!("too many tokens: the request has {total} tokens over {n} rows, the limit is {} (DECIDER_MAX_REQUEST_TOKENS)", limits.max_request_tokens)
    } else {
        return Ok(());
    };
    Err(ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, message))
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

/// The model thread dropped a reply: the backend panicked on this request.
fn model_failed() -> ApiError {
    internal("the model failed on this request; the server log has the reason")
}

fn unprocessable(e: DeciderError) -> ApiError {
    match e {
        DeciderError::InvalidQuestion(m) => ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, m),
        other => internal(other),
    }
}

async fn systemone(
    State(state): State<Arc<AppState>>,
    JsonBody(body): JsonBody,
) -> Result<axum::Json<decider::SystemOneResponse>, ApiError> {
    let (request, has_assets) = systemone_request(&body, state.limits.max_state_tokens)?;
    if has_assets {
        return Err(ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "this server was started without image support (DECIDER_IMAGES=1)"));
    }
    // Tokenizing a long state is CPU work: keep it off the async workers.
    let planner = state.clone();
    let plan = tokio::task::spawn_blocking(move || planner.prompter.plan(&request))
        .await
        .map_err(internal)?
        .map_err(|e| state.refused(&state.stats.errors, unprocessable(e)))?;
    state.check_size(&plan.rows.iter().map(|r| r.ids.len()).collect::<Vec<_>>())?;
    let _admission = Admission::new(&state, plan.rows.len())?;
    let (reply, answer) = oneshot::channel();
    let (questions, rows) = (plan.questions.len(), plan.rows.len());
    state.jobs.send(Job::SystemOne(plan, reply)).map_err(|_| internal("the model thread has stopped"))?;
    let response = answer.await.map_err(|_| model_failed()).and_then(|r| r.map_err(internal));
    let response = response.map_err(|e| state.refused(&state.stats.errors, e))?;
    state.stats.answered(questions, rows);
    Ok(axum::Json(response))
}

async fn decide(State(state): State<Arc<AppState>>, JsonBody(body): JsonBody) -> Result<axum::Json<Map<String, Value>>, ApiError> {
    let context = match body.get("context") {
        Some(Value::String(c)) => c.clone(),
        Some(other) => {
            return Err(ApiError(StatusCode::UNPROCESSABLE_ENTITY, json!([field_error("string_type", &[json!("context")], "Input should be a valid string", other)])));
        }
        None => return Err(ApiError(StatusCode::UNPROCESSABLE_ENTITY, json!([field_error("missing", &[json!("context")], "Field required", &body)]))),
    };
    let schema = body.get("schema").cloned().unwrap_or(Value::Null);
    // Validated and tokenized here, off the model thread, and held to the row limits like
    // `/v1/systemone` (an empty schema runs no row).
    let planner = state.clone();
    let plan = tokio::task::spawn_blocking(move || planner.prompter.plan_decide(&context, Some(&schema)))
        .await
        .map_err(internal)?
        .map_err(|e| state.refused(&state.stats.errors, unprocessable(e)))?;
    if plan.row_tokens() == 0 {
        return Ok(axum::Json(Map::new()));
    }
    state.check_size(&[plan.row_tokens()])?;
    let _admission = Admission::new(&state, 1)?;
    let (reply, answer) = oneshot::channel();
    let questions = plan.questions();
    state.jobs.send(Job::Decide(plan, reply)).map_err(|_| internal("the model thread has stopped"))?;
    let answers = answer.await.map_err(|_| state.refused(&state.stats.errors, model_failed()))?;
    state.stats.answered(questions, 1);
    Ok(axum::Json(answers))
}

/// `device` as the reference's `/health` spells it (`str(torch.device)`): `"cpu"` for a CPU
/// device; any other keeps burn's name, lower-cased.
fn device_label(debug: &str) -> String {
    if debug == "Cpu" { "cpu".into() } else { debug.to_lowercase() }
}

/// An unknown route: FastAPI's 404 body.
async fn not_found() -> (StatusCode, axum::Json<Value>) {
    (StatusCode::NOT_FOUND, axum::Json(json!({"detail": "Not Found"})))
}

/// A known route with another method: FastAPI's 405 body.
async fn method_not_allowed() -> (StatusCode, axum::Json<Value>) {
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

/// `GET /stats`: the reference's counters and limits. This server has no CUDA graphs, engine
/// statistics, length buckets or schema cache, so `engine` and `schema_cache` are null,
/// `graphs` is 0 and `bucket_hist` is empty.
async fn stats(State(state): State<Arc<AppState>>) -> axum::Json<Value> {
    let s = &state.stats;
    let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    let batch_hist: Map<String, Value> =
        s.batch_hist.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|(rows, n)| (rows.to_string(), json!(n))).collect();
    let limits = &state.limits;
    axum::Json(json!({
        "requests": get(&s.requests),
        "batches": get(&s.batches),
        "decisions": get(&s.decisions),
        "rows": get(&s.rows),
        "shared_prefix_requests": get(&s.shared_prefix_requests),
        "errors": get(&s.errors),
        "rejected_too_large": get(&s.rejected_too_large),
        "rejected_overloaded": get(&s.rejected_overloaded),
        "batch_hist": batch_hist,
        "bucket_hist": {},
        "outstanding_rows": state.queued_rows.load(Ordering::SeqCst),
        "engine": null,
        "graphs": 0,
        "sealed": true,
        "schema_cache": null,
        "limits": {
            "max_rows": limits.max_rows,
            "max_row_tokens": limits.max_row_tokens,
            "max_request_tokens": limits.max_request_tokens,
            "max_queue_rows": limits.max_queue_rows,
        },
    }))
}

async fn models(State(state): State<Arc<AppState>>) -> axum::Json<Value> {
    let config = &state.prompter.config;
    axum::Json(json!({"models": [{
        "name": config.model_name,
        "description": "decider: one-pass typed decisions with calibrated probabilities",
        "release_date": config.release_date,
    }]}))
}
