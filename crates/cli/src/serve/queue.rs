//! The queue between the HTTP side and the model thread.
//!
//! Rows are admitted against one bound over all requests (a 503 past it). The admission and the
//! job's memory ([`Held`]) travel with the job, shared with the request that waits for it
//! ([`Claim`]): the model thread takes them when it starts the job and releases them when it has
//! answered, so the bound counts the model's real backlog and a client that leaves while its job
//! runs cannot make room for more work than the model will do; a client that leaves while its
//! job is still queued releases them at once, and the model thread drops the job unrun. The
//! model thread takes the requests queued when it is free and scores their rows together.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, mpsc};

use axum::response::{IntoResponse, Response};
use decider::batch::{MAX_BATCH_ROWS, MAX_BATCH_TOKENS};
use decider::decide_form::DecidePlan;
use decider::{Decider, DeciderError, FormAnswers, Plan, Row, SystemOneResponse};
use qwen35::Qwen35Ops;
use tokio::sync::oneshot;

use super::memory::{MemoryBudget, Reservation};
use super::metrics::Metrics;
use super::stats::Stats;

/// Rows admitted and not yet answered or dropped, over all requests.
#[derive(Clone, Default)]
pub(super) struct Backlog(Arc<AtomicUsize>);

impl Backlog {
    pub fn rows(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }

    /// Admits `rows` more if the backlog stays within `limit`; otherwise the rows queued now.
    pub fn admit(&self, rows: usize, limit: usize) -> Result<Admission, usize> {
        self.0.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |queued| {
            queued.checked_add(rows).filter(|&total| total <= limit)
        })?;
        Ok(Admission { backlog: self.clone(), rows })
    }
}

/// Rows of one request in the backlog; released when dropped.
pub(super) struct Admission {
    backlog: Backlog,
    rows: usize,
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.backlog.0.fetch_sub(self.rows, Ordering::SeqCst);
    }
}

/// A model route's request, planned: the rows the model runs for it and what its answer is made
/// of. The one type the queue, the memory budget and the model thread know a request by.
pub(super) enum RoutePlan {
    SystemOne(Plan),
    Decide(DecidePlan),
}

impl RoutePlan {
    pub fn rows(&self) -> &[Row] {
        match self {
            RoutePlan::SystemOne(plan) => &plan.rows,
            RoutePlan::Decide(plan) => plan.rows(),
        }
    }

    /// Bytes the plan holds on the heap.
    pub fn heap_bytes(&self) -> usize {
        match self {
            RoutePlan::SystemOne(plan) => plan.heap_bytes(),
            RoutePlan::Decide(plan) => plan.heap_bytes(),
        }
    }

    /// Questions it answers.
    pub fn questions(&self) -> usize {
        match self {
            RoutePlan::SystemOne(plan) => plan.questions.len(),
            RoutePlan::Decide(plan) => plan.questions(),
        }
    }

    /// The answer made of the rows' slot probabilities.
    fn answer<B: Qwen35Ops>(&self, decider: &Decider<B>, probabilities: &[Vec<f64>]) -> RouteAnswer {
        match self {
            RoutePlan::SystemOne(plan) => RouteAnswer::SystemOne(decider.respond(plan, probabilities)),
            RoutePlan::Decide(plan) => RouteAnswer::Decide(plan.answers(probabilities)),
        }
    }
}

/// A model route's answer: its route's JSON body.
pub(super) enum RouteAnswer {
    SystemOne(SystemOneResponse),
    Decide(FormAnswers),
}

impl IntoResponse for RouteAnswer {
    fn into_response(self) -> Response {
        match self {
            RouteAnswer::SystemOne(response) => axum::Json(response).into_response(),
            RouteAnswer::Decide(answers) => axum::Json(answers).into_response(),
        }
    }
}

/// What the model thread runs, and where the answer goes.
pub(super) struct Work {
    pub plan: RoutePlan,
    pub reply: oneshot::Sender<Result<RouteAnswer, DeciderError>>,
}

impl Work {
    fn rows(&self) -> &[Row] {
        self.plan.rows()
    }

    /// Sends the answer made of the work's slot probabilities.
    fn reply<B: Qwen35Ops>(self, decider: &Decider<B>, probabilities: Result<Vec<Vec<f64>>, DeciderError>) {
        // A client that left meanwhile drops the answer.
        drop(self.reply.send(probabilities.map(|p| self.plan.answer(decider, &p))));
    }
}

/// What a job holds in the server's bounds until it is answered: its rows in the backlog, and
/// the plan's bytes with the model's working memory for it ([`decider::WorkingMemory`]) in the
/// memory budget.
#[expect(dead_code, reason = "held for their Drop: the rows and bytes are released when it is dropped")]
pub(super) struct Held {
    pub admission: Admission,
    pub memory: Reservation,
}

/// A job's [`Held`], shared by the queued job and the request waiting for it: whichever takes it
/// first releases it (the model thread when it has answered, the request when its client left
/// before the job ran).
#[derive(Clone)]
pub(super) struct Claim(Arc<Mutex<Option<Held>>>);

impl Claim {
    pub fn new(held: Held) -> Self {
        Self(Arc::new(Mutex::new(Some(held))))
    }

    /// The job's [`Held`], unless the other side took it.
    pub fn take(&self) -> Option<Held> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take()
    }

    fn is_taken(&self) -> bool {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).is_none()
    }
}

pub(super) struct Job {
    pub work: Work,
    pub claim: Claim,
    /// The working memory part of the job's reserved memory.
    pub working: usize,
}

impl Job {
    fn rows(&self) -> &[Row] {
        self.work.rows()
    }
}

/// A job the model thread has taken, with what it holds.
struct Running {
    work: Work,
    held: Held,
}

impl Running {
    fn rows(&self) -> &[Row] {
        self.work.rows()
    }

    /// Sends the job's answer, its rows out of the backlog and its memory out of the budget
    /// before the client hears back. A panic while the answer is put together fails this
    /// request alone (its reply dropped: a 500).
    fn reply<B: Qwen35Ops>(self, decider: &Decider<B>, probabilities: Result<Vec<Vec<f64>>, DeciderError>) {
        let Running { work, held } = self;
        drop(held);
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work.reply(decider, probabilities)));
    }
}

/// Rows and tokens the model thread takes from the queue to run together (more when the first
/// request alone has more). Requests queued while the model works are answered together, their
/// rows sharing batches (`decider::batch`); the bounds keep the first of them from waiting on
/// much more work than its own.
const COLLECT_ROWS: usize = 2 * MAX_BATCH_ROWS;
const COLLECT_TOKENS: usize = 2 * MAX_BATCH_TOKENS;

/// Answers jobs until every sender is dropped: each time, the jobs queued by then, in arrival
/// order, within [`COLLECT_ROWS`] and [`COLLECT_TOKENS`], scored together. Rows of several
/// requests padded into one batch can need more working memory than the requests reserved
/// each alone: a request joins the others only if `budget` has room for the difference now,
/// held until they are answered.
pub(super) fn answer_jobs<B: Qwen35Ops>(
    decider: &Decider<B>,
    inbox: mpsc::Receiver<Job>,
    budget: &MemoryBudget,
    stats: &Stats,
    metrics: &Metrics,
) {
    let sizes = decider.working_memory();
    let mut waiting = VecDeque::new();
    loop {
        if waiting.is_empty() {
            match inbox.recv() {
                Ok(job) => waiting.push_back(job),
                Err(_) => return,
            }
        }
        waiting.extend(inbox.try_iter());
        // A job whose client has gone released what it held, and is dropped unrun.
        waiting.retain(|job: &Job| !job.claim.is_taken());
        let (mut jobs, mut rows, mut tokens, mut working) = (Vec::<Running>::new(), 0, 0, 0);
        let mut together_extra = budget.reservation();
        while let Some(job) = waiting.front() {
            let (more_rows, more_tokens) = (job.rows().len(), job.rows().iter().map(|r| r.ids.len()).sum::<usize>());
            if !jobs.is_empty() {
                if rows + more_rows > COLLECT_ROWS || tokens + more_tokens > COLLECT_TOKENS {
                    break;
                }
                let together: Vec<&[Row]> = jobs.iter().map(Running::rows).chain([job.rows()]).collect();
                if !together_extra.try_grow_to(sizes.bytes(&together).saturating_sub(working + job.working)) {
                    break;
                }
            }
            let job = waiting.pop_front().expect("the front job");
            // Taken from the request here: from now on its client leaving does not free its place.
            if let Some(held) = job.claim.take() {
                (rows, tokens, working) = (rows + more_rows, tokens + more_tokens, working + job.working);
                jobs.push(Running { work: job.work, held });
            }
        }
        if !jobs.is_empty() {
            // Requests of no rows (no questions) run nothing: not a batch, as the reference counts.
            if rows > 0 {
                stats.ran(&jobs.iter().map(|job| job.rows().len()).collect::<Vec<_>>());
                metrics.batch_rows.observe(rows as f64);
            }
            answer(decider, jobs);
        }
        drop(together_extra);
    }
}

/// Scores the jobs' rows together and sends each its answer. A backend that panics (out of
/// device memory, say) on jobs run together has each rerun alone, so that only the request that
/// caused it fails, with a 500 (its reply dropped); the model thread goes on with the next.
fn answer<B: Qwen35Ops>(decider: &Decider<B>, jobs: Vec<Running>) {
    let run = |rows: &[&[Row]]| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| decider.slot_probabilities_of(rows)))
    };
    match run(&jobs.iter().map(Running::rows).collect::<Vec<_>>()) {
        Ok(results) => jobs.into_iter().zip(results).for_each(|(job, result)| job.reply(decider, result)),
        Err(_) if jobs.len() > 1 => {
            for job in jobs {
                if let Ok(mut result) = run(&[job.rows()]) {
                    job.reply(decider, result.pop().expect("one request, one result"));
                }
            }
        }
        Err(_) => {}
    }
}
