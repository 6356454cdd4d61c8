//! The queue between the HTTP side and the model thread.
//!
//! Rows are admitted against one bound over all requests (a 503 past it). The admission travels
//! with the job and is released when the model thread has answered or dropped it, so the bound
//! counts the model's real backlog, and a client that leaves cannot make room for more work
//! than the model will do. A job whose client has gone (its reply's receiver dropped with the
//! request) is dropped unrun. The model thread takes the requests queued when it is free and
//! scores their rows together.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use decider::batch::{MAX_BATCH_ROWS, MAX_BATCH_TOKENS};
use decider::decide_form::DecidePlan;
use decider::{Decider, DeciderError, FormAnswers, Plan, Row, SystemOneResponse};
use qwen35::Qwen35Ops;
use tokio::sync::oneshot;

use super::memory::{MemoryBudget, Reservation};
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

/// What the model thread runs, and where the answer goes.
pub(super) enum Work {
    SystemOne(Plan, oneshot::Sender<Result<SystemOneResponse, DeciderError>>),
    Decide(DecidePlan, oneshot::Sender<Result<FormAnswers, DeciderError>>),
}

impl Work {
    /// The request is gone: nobody waits for the answer.
    fn abandoned(&self) -> bool {
        match self {
            Work::SystemOne(_, reply) => reply.is_closed(),
            Work::Decide(_, reply) => reply.is_closed(),
        }
    }

    fn rows(&self) -> &[Row] {
        match self {
            Work::SystemOne(plan, _) => &plan.rows,
            Work::Decide(plan, _) => plan.rows(),
        }
    }

    /// Sends the answer made of the work's slot probabilities.
    fn reply<B: Qwen35Ops>(self, decider: &Decider<B>, probabilities: Result<Vec<Vec<f64>>, DeciderError>) {
        // A client that left meanwhile drops the answer.
        match self {
            Work::SystemOne(plan, reply) => drop(reply.send(probabilities.map(|p| decider.respond(&plan, &p)))),
            Work::Decide(plan, reply) => drop(reply.send(probabilities.map(|p| plan.answers(&p)))),
        }
    }
}

pub(super) struct Job {
    pub work: Work,
    pub admission: Admission,
    /// The plan's bytes and the model's working memory for it ([`decider::WorkingMemory`]) in
    /// the memory budget.
    pub memory: Reservation,
    /// The working memory part of `memory`.
    pub working: usize,
}

impl Job {
    fn rows(&self) -> &[Row] {
        self.work.rows()
    }

    /// Sends the job's answer, its rows out of the backlog and its memory out of the budget
    /// before the client hears back. A panic while the answer is put together fails this
    /// request alone (its reply dropped: a 500).
    fn reply<B: Qwen35Ops>(self, decider: &Decider<B>, probabilities: Result<Vec<Vec<f64>>, DeciderError>) {
        let Job { work, admission, memory, .. } = self;
        drop((admission, memory));
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
        // A job whose client has gone is dropped unrun, its admission with it.
        waiting.retain(|job: &Job| !job.work.abandoned());
        let (mut jobs, mut rows, mut tokens, mut working) = (Vec::<Job>::new(), 0, 0, 0);
        let mut together_extra = budget.reservation();
        while let Some(job) = waiting.front() {
            let (more_rows, more_tokens) = (job.rows().len(), job.rows().iter().map(|r| r.ids.len()).sum::<usize>());
            if !jobs.is_empty() {
                if rows + more_rows > COLLECT_ROWS || tokens + more_tokens > COLLECT_TOKENS {
                    break;
                }
                let together: Vec<&[Row]> = jobs.iter().chain([job]).map(Job::rows).collect();
                if !together_extra.try_grow_to(sizes.bytes(&together).saturating_sub(working + job.working)) {
                    break;
                }
            }
            (rows, tokens, working) = (rows + more_rows, tokens + more_tokens, working + job.working);
            jobs.extend(waiting.pop_front());
        }
        if !jobs.is_empty() {
            stats.ran(&jobs.iter().map(|job| job.rows().len()).collect::<Vec<_>>());
            answer(decider, jobs);
        }
        drop(together_extra);
    }
}

/// Scores the jobs' rows together and sends each its answer. A backend that panics (out of
/// device memory, say) on jobs run together has each rerun alone, so that only the request that
/// caused it fails, with a 500 (its reply dropped); the model thread goes on with the next.
fn answer<B: Qwen35Ops>(decider: &Decider<B>, jobs: Vec<Job>) {
    let run = |rows: &[&[Row]]| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| decider.slot_probabilities_of(rows)))
    };
    match run(&jobs.iter().map(Job::rows).collect::<Vec<_>>()) {
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
