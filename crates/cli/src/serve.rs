//! `decider serve`: the reference's HTTP API (decider-ai 1.10.0's server) on axum.
//!
//! Requests are validated and tokenized on the async side; the model runs on one worker
//! thread that owns it and answers requests in arrival order, those queued together scored
//! together (their rows in shared batches). Rows are admitted against a
//! queue bound (503 past it) after the size limits (413), and every question is validated
//! before either (422), as in the reference.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::mpsc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use decider::python_json::Json;
use decider::{AnswerType, DeciderError, FormAnswers, Prompter, Row, WorkingMemory};
use qwen35::Qwen35Ops;
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;

use crate::backend::GenericTask;

mod args;
mod body;
mod error;
mod limits;
mod listener;
mod memory;
mod queue;
mod request;
mod stats;
pub use args::ServeArgs;
use body::JsonBody;
use error::{ApiError, internal, model_failed, unprocessable};
use limits::Limits;
use memory::Reservation;
use queue::{Backlog, Job, Work};
use request::{field_error, invalid_fields, systemone_request};
use stats::Stats;

struct AppState {
    prompter: Prompter,
    jobs: mpsc::Sender<Job>,
    backlog: Backlog,
    memory: memory::MemoryBudget,
    /// Sizes the model's working memory for a request.
    working: WorkingMemory,
    limits: Limits,
    source: String,
    device: String,
    stats: Arc<Stats>,
}

impl GenericTask for &ServeArgs {
    fn run<B: Qwen35Ops>(self, device: &B::Device) -> anyhow::Result<()> {
        let demo = if self.model.is_random() { " (random weights)" } else { "" };
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
    let budget = memory::MemoryBudget::new(args.max_memory.saturating_mul(1 << 20));
    let model_budget = budget.clone();
    let stats = Arc::new(Stats::default());
    let model_stats = stats.clone();
    let (loaded_tx, loaded) = mpsc::channel();
    let (model, weights, temperature) =
        (args.model.clone(), args.weights.format_for::<B>(&args.model, device)?, args.temperature);
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
        let _ = loaded_tx.send(Ok((
            decider.prompter().clone(),
            decider.working_memory(),
            decider.source().to_string(),
            device_label(&format!("{device:?}")),
        )));
        queue::answer_jobs(&decider, inbox, &model_budget, &model_stats);
    })?;
    let (prompter, working, source, device) = loaded.recv().context("the model thread stopped")??;
    let limits = Limits {
        max_rows: args.max_rows,
        max_state_tokens: args.max_state_tokens,
        max_row_tokens: args.max_row_tokens.unwrap_or(args.max_state_tokens + 4096),
        max_request_tokens: args.max_request_tokens,
        max_queue_rows: args.max_queue_rows,
        max_body_bytes: args.max_body_bytes,
        body_timeout: Duration::from_secs(args.body_timeout),
    };
    let timeouts = listener::Timeouts {
        header: Duration::from_secs(args.header_timeout),
        write: Duration::from_secs(args.write_timeout),
        shutdown: Duration::from_secs(args.shutdown_timeout),
    };
    let state = Arc::new(AppState {
        prompter,
        jobs,
        backlog: Backlog::default(),
        memory: budget,
        working,
        limits,
        source,
        device,
        stats,
    });
    let app = Router::new()
        .route("/v1/systemone", post(systemone))
        .route("/decide", post(decide))
        .route("/health", get(health))
        .route("/v1/models", get(models))
        .route("/stats", get(stats_report))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state.clone());
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        // Polled once now, so that a shutdown signal's handlers are in place before the start-up
        // line tells anyone the server is there (a SIGTERM before them would kill it outright).
        let mut shutdown = Box::pin(shutdown);
        let _ = shutdown.as_mut().poll(&mut std::task::Context::from_waker(std::task::Waker::noop()));
        let listener =
            tokio::net::TcpListener::bind(&args.addr).await.with_context(|| format!("binding {}", args.addr))?;
        ready(&state.prompter.config.model_name, listener.local_addr()?);
        let refusals = state.clone();
        let malformed: listener::Malformed = Arc::new(move |status, e| {
            refusals.refused(&refusals.stats.errors, ApiError::new(status, format!("malformed HTTP request: {e}")));
        });
        listener::serve(listener, app, timeouts, shutdown, malformed).await;
        anyhow::Ok(())
    })?;
    // Tokenizing work of requests cut off by the shutdown timeout is not waited for.
    runtime.shutdown_timeout(Duration::from_secs(1));
    Ok(())
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

impl AppState {
    /// `error`, counted in `counter` of `/stats`.
    /// Every refusal is logged on one line: its status and its `detail` as JSON.
    fn refused(&self, counter: &AtomicU64, error: ApiError) -> ApiError {
        Stats::count(counter);
        eprintln!("decider: refused status={} detail={}", error.0.as_u16(), error.1);
        error
    }

    /// `error`, counted in `/stats` by its status: 413, 503 or another.
    fn refused_by_status(&self, error: ApiError) -> ApiError {
        let counter = match error.0 {
            StatusCode::PAYLOAD_TOO_LARGE => &self.stats.rejected_too_large,
            StatusCode::SERVICE_UNAVAILABLE => &self.stats.rejected_overloaded,
            _ => &self.stats.errors,
        };
        self.refused(counter, error)
    }

    /// The 413 checks, counted in `/stats`.
    fn check_size(&self, lengths: &[usize]) -> Result<(), ApiError> {
        self.limits.check_size(lengths).map_err(|e| self.refused(&self.stats.rejected_too_large, e))
    }

    /// `rows` admitted to the model's queue, or a 503 counted in `/stats`.
    fn admit(&self, rows: usize) -> Result<queue::Admission, ApiError> {
        let limit = self.limits.max_queue_rows;
        self.backlog.admit(rows, limit).map_err(|queued| {
            let message = format!(
                "server busy: {queued} rows queued, the limit is {limit} (DECIDER_MAX_QUEUE_ROWS); retry later"
            );
            self.refused(&self.stats.rejected_overloaded, ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message))
        })
    }

    /// Plans a request with `plan`, off the async workers (tokenizing a long state is CPU
    /// work). The blocking task owns the request and `reservation`: if the client hangs up
    /// meanwhile, the body's memory stays reserved until the request is freed.
    async fn plan<T: Send + 'static>(
        self: &Arc<Self>,
        reservation: Reservation,
        plan: impl FnOnce(&Prompter) -> Result<T, DeciderError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let state = self.clone();
        let planned = tokio::task::spawn_blocking(move || {
            let planned = plan(&state.prompter); // the request, owned by `plan`, is freed here
            drop(reservation);
            planned
        })
        .await
        .map_err(internal)?;
        planned.map_err(|e| self.refused(&self.stats.errors, unprocessable(e)))
    }

    /// Admits `rows` and reserves what they need: the bytes their plan holds and the model's
    /// working memory for them ([`AppState::sizes`]), in the memory budget until it is answered;
    /// has the model thread run the work `job` makes of a reply sender, and waits for its
    /// answer to `questions` questions.
    async fn answer<T>(
        &self,
        rows: usize,
        (plan_bytes, working): (usize, usize),
        questions: usize,
        job: impl FnOnce(oneshot::Sender<Result<T, DeciderError>>) -> Work,
    ) -> Result<T, ApiError> {
        let mut memory = self.memory.reservation();
        let what = format!(
            "the plan of its rows and questions ({} MiB) with the model's working memory for them ({} MiB)",
            memory::mib(plan_bytes),
            memory::mib(working)
        );
        memory.grow(plan_bytes.saturating_add(working), &what).map_err(|e| self.refused_by_status(e))?;
        let admission = self.admit(rows)?;
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job { work: job(reply), admission, memory, working })
            .map_err(|_| internal("the model thread has stopped"))?;
        let answer = answer.await.map_err(|_| model_failed()).and_then(|r| r.map_err(internal));
        let answer = answer.map_err(|e| self.refused(&self.stats.errors, e))?;
        self.stats.answered(questions);
        Ok(answer)
    }

    /// The bytes a plan of `rows`, holding `plan_bytes`, needs: those, and the model's working
    /// memory to score the rows.
    fn sizes(&self, rows: &[Row], plan_bytes: usize) -> (usize, usize) {
        (plan_bytes, self.working.bytes(&[rows]))
    }

    /// Counts the request as abandoned unless [`ClientWatch::finished`] is called before it drops.
    fn watch_client(&self) -> ClientWatch<'_> {
        ClientWatch { stats: &self.stats, finished: false }
    }
}

/// A request's handler future is dropped, unfinished, when its client closes the connection.
struct ClientWatch<'a> {
    stats: &'a Stats,
    finished: bool,
}

impl ClientWatch<'_> {
    fn finished(mut self) {
        self.finished = true;
    }
}

impl Drop for ClientWatch<'_> {
    fn drop(&mut self) {
        if !self.finished {
            Stats::count(&self.stats.abandoned);
        }
    }
}

async fn systemone(
    State(state): State<Arc<AppState>>,
    JsonBody(body, reservation): JsonBody,
) -> Result<axum::Json<decider::SystemOneResponse>, ApiError> {
    let watch = state.watch_client();
    let response = answer_systemone(&state, body, reservation).await;
    watch.finished();
    response.map(axum::Json)
}

/// `reservation` holds the body's memory until the request is planned.
async fn answer_systemone(
    state: &Arc<AppState>,
    body: Json,
    reservation: Reservation,
) -> Result<decider::SystemOneResponse, ApiError> {
    let (request, has_assets) = systemone_request(body, state.limits.max_state_tokens)?;
    if has_assets {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "this server was started without image support (DECIDER_IMAGES=1)",
        ));
    }
    let plan = state.plan(reservation, move |prompter| prompter.plan(&request)).await?;
    state.check_size(&plan.rows.iter().map(|r| r.ids.len()).collect::<Vec<_>>())?;
    let (rows, sizes, questions) = (plan.rows.len(), state.sizes(&plan.rows, plan.heap_bytes()), plan.questions.len());
    state.answer(rows, sizes, questions, |reply| Work::SystemOne(plan, reply)).await
}

async fn decide(
    State(state): State<Arc<AppState>>,
    JsonBody(body, reservation): JsonBody,
) -> Result<axum::Json<FormAnswers>, ApiError> {
    let watch = state.watch_client();
    let answers = answer_decide(&state, body, reservation).await;
    watch.finished();
    answers.map(axum::Json)
}

/// `reservation` holds the body's memory until the form is planned.
async fn answer_decide(state: &Arc<AppState>, body: Json, reservation: Reservation) -> Result<FormAnswers, ApiError> {
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
    let plan = state.plan(reservation, move |prompter| prompter.plan_decide(&context, Some(&schema))).await?;
    if plan.row_tokens() == 0 {
        return Ok(FormAnswers::new());
    }
    state.check_size(&[plan.row_tokens()])?;
    let (sizes, questions) = (state.sizes(plan.rows(), plan.heap_bytes()), plan.questions());
    state.answer(1, sizes, questions, |reply| Work::Decide(plan, reply)).await
}

/// `device` as the reference's `/health` spells it (`str(torch.device)`): `"cpu"` for a CPU
/// device; any other keeps burn's name, lower-cased.
fn device_label(debug: &str) -> String {
    if debug == "Cpu" { "cpu".into() } else { debug.to_lowercase() }
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

async fn models(State(state): State<Arc<AppState>>) -> axum::Json<Value> {
    let config = &state.prompter.config;
    axum::Json(json!({"models": [{
        "name": config.model_name,
        "description": "decider: one-pass typed decisions with calibrated probabilities",
        "release_date": config.release_date,
    }]}))
}
