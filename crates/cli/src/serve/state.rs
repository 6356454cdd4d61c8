//! The server's shared state and what the handlers do with it: refuse (counted and logged),
//! admit rows to the model's queue, plan off the async workers and wait for the model's answer.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::mpsc;

use axum::Extension;
use axum::http::StatusCode;
use decider::plan_budget::MAX_TOKEN_BYTES;
use decider::{DeciderError, PlanBudget, Prompter, WorkingMemory};
use tokio::sync::{oneshot, watch};

use super::access_log::Served;
use super::error::{ApiError, internal, model_failed, unprocessable};
use super::limits::Limits;
use super::memory::{self, Reservation};
use super::metrics::Metrics;
use super::queue::{self, Backlog, Claim, Held, Job, RouteAnswer, RoutePlan, Work};
use super::stats::Stats;

/// A decision request's answer, with what it ran for the access log and `/metrics`.
pub(super) type Answered = (Extension<Served>, RouteAnswer);

/// What every handler reads: the prompter, the queue to the model thread, the budgets, limits
/// and counters.
pub(super) struct AppState {
    pub(super) prompter: Prompter,
    pub(super) jobs: mpsc::Sender<Job>,
    pub(super) backlog: Backlog,
    pub(super) memory: memory::MemoryBudget,
    /// Sizes the model's working memory for a request.
    pub(super) working: WorkingMemory,
    pub(super) limits: Limits,
    pub(super) source: String,
    pub(super) device: String,
    pub(super) stats: Arc<Stats>,
    pub(super) metrics: Arc<Metrics>,
    /// Becomes true when the shutdown timeout has passed: requests still waiting for the model
    /// are answered 503 then.
    pub(super) deadline: watch::Receiver<bool>,
}

impl AppState {
    /// `error`, counted in `counter` of `/stats` (the access log logs it with its `detail`).
    pub(super) fn refused(&self, counter: &AtomicU64, error: ApiError) -> ApiError {
        Stats::count(counter);
        error
    }

    /// `error`, counted in `/stats` by its status: 413, 503 or another.
    pub(super) fn refused_by_status(&self, error: ApiError) -> ApiError {
        let counter = match error.0 {
            StatusCode::PAYLOAD_TOO_LARGE => &self.stats.rejected_too_large,
            StatusCode::SERVICE_UNAVAILABLE => &self.stats.rejected_overloaded,
            _ => &self.stats.errors,
        };
        self.refused(counter, error)
    }

    /// The 413 checks, counted in `/stats`.
    pub(super) fn check_size(&self, lengths: &[usize]) -> Result<(), ApiError> {
        self.limits.check_size(lengths).map_err(|e| self.refused(&self.stats.rejected_too_large, e))
    }

    /// `rows` admitted to the model's queue, or a 503 counted in `/stats`.
    pub(super) fn admit(&self, rows: usize) -> Result<queue::Admission, ApiError> {
        let limit = self.limits.max_queue_rows;
        self.backlog.admit(rows, limit).map_err(|queued| {
            let message = format!(
                "server busy: {queued} rows queued, the limit is {limit} (DECIDER_MAX_QUEUE_ROWS); retry later"
            );
            self.refused(&self.stats.rejected_overloaded, ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message))
        })
    }

    /// Plans a request with `plan`, off the async workers (tokenizing a long state is CPU
    /// work), within the memory budget ([`PlanningMemory`]). The blocking task owns the request
    /// and `reservation`: if the client hangs up meanwhile, the body's memory stays reserved
    /// until the request is freed.
    pub(super) async fn plan<T: Send + 'static>(
        self: &Arc<Self>,
        reservation: Reservation,
        plan: impl FnOnce(&Prompter, &mut dyn PlanBudget) -> Result<T, DeciderError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let state = self.clone();
        let (planned, refusal) = tokio::task::spawn_blocking(move || {
            let mut planning =
                PlanningMemory { memory: state.memory.reservation(), limits: state.limits, refusal: None };
            let planned = plan(&state.prompter, &mut planning); // the request, owned by `plan`, is freed here
            drop(reservation);
            (planned, planning.refusal)
        })
        .await
        .map_err(internal)?;
        match (planned, refusal) {
            (Ok(planned), _) => Ok(planned),
            (Err(_), Some(refusal)) => Err(self.refused_by_status(refusal)),
            (Err(e), None) => Err(self.refused_by_status(unprocessable(e))),
        }
    }

    /// Runs a planned request: holds its rows to the size limits (413), reserves the bytes its
    /// plan holds and the model's working memory for its rows in the memory budget until it is
    /// answered (413 or 503), admits its rows to the queue (503), has the model thread run it
    /// and waits for its answer.
    pub(super) async fn run(&self, plan: RoutePlan) -> Result<Answered, ApiError> {
        let lengths: Vec<usize> = plan.rows().iter().map(|r| r.ids.len()).collect();
        self.check_size(&lengths)?;
        let (rows, questions) = (plan.rows().len(), plan.questions());
        let served = Served { rows, tokens: lengths.iter().sum(), questions };
        let (plan_bytes, working) = (plan.heap_bytes(), self.working.bytes(&[plan.rows()]));
        let mut memory = self.memory.reservation();
        let what = format!(
            "the plan of its rows and questions ({} MiB) with the model's working memory for them ({} MiB)",
            memory::mib(plan_bytes),
            memory::mib(working)
        );
        memory.grow(plan_bytes.saturating_add(working), &what).map_err(|e| self.refused_by_status(e))?;
        let admission = self.admit(rows)?;
        let (reply, answer) = oneshot::channel();
        let claim = Claim::new(Held { admission, memory });
        // Dropped with this request when its client leaves: what the job holds is released at
        // once if the model thread has not taken it yet.
        let _release = ReleaseOnDrop(claim.clone());
        self.jobs
            .send(Job { work: Work { plan, reply }, claim, working })
            .map_err(|_| internal("the model thread has stopped"))?;
        let answer = tokio::select! {
            answer = answer => answer.map_err(|_| model_failed()).and_then(|r| r.map_err(internal)),
            () = self.shutdown_deadline() => Err(not_run_before_shutdown()),
        };
        let answer = answer.map_err(|e| self.refused_by_status(e))?;
        self.stats.answered(questions);
        Ok((Extension(served), answer))
    }

    /// Completes when the shutdown timeout has passed (never, while the server runs).
    async fn shutdown_deadline(&self) {
        let mut deadline = self.deadline.clone();
        if deadline.wait_for(|&passed| passed).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Counts the request as abandoned unless [`ClientWatch::finished`] is called before it drops.
    pub(super) fn watch_client(&self) -> ClientWatch<'_> {
        ClientWatch { stats: &self.stats, finished: false }
    }
}

/// Releases a job's [`Held`] when dropped, unless the model thread took it.
struct ReleaseOnDrop(Claim);

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        drop(self.0.take());
    }
}

/// The answer to a request the model had not answered when the shutdown timeout passed (the
/// connection closes after it: hyper ends every connection's keep-alive once shutdown begins).
fn not_run_before_shutdown() -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "server shutting down: the request was not answered within the shutdown timeout (--shutdown-timeout, DECIDER_SHUTDOWN_TIMEOUT); retry later",
    )
}

/// What planning a request holds, reserved in the memory budget before each text is tokenized
/// and each row kept; a question text too long for any row is refused before it is tokenized.
struct PlanningMemory {
    memory: Reservation,
    limits: Limits,
    /// The server's answer to the refusal that stopped planning.
    refusal: Option<ApiError>,
}

impl PlanBudget for PlanningMemory {
    fn reserve(&mut self, peak_bytes: usize, row_text_bytes: usize) -> Result<(), DeciderError> {
        let limit = self.limits.max_row_tokens;
        let result = if row_text_bytes / MAX_TOKEN_BYTES > limit {
            let message = format!(
                "too many tokens: a question's text of {row_text_bytes} bytes is more than {limit} tokens, the limit per row (DECIDER_MAX_ROW_TOKENS)"
            );
            Err(ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, message))
        } else {
            self.memory.grow_to(peak_bytes, "tokenizing its texts and building its rows")
        };
        result.map_err(|refusal| {
            let message = refusal.1.as_str().unwrap_or_default().to_string();
            self.refusal = Some(refusal);
            DeciderError::TooLarge(message)
        })
    }
}

/// A request's handler future is dropped, unfinished, when its client closes the connection.
pub(super) struct ClientWatch<'a> {
    stats: &'a Stats,
    finished: bool,
}

impl ClientWatch<'_> {
    pub(super) fn finished(mut self) {
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
