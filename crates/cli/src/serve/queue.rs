//! The queue between the HTTP side and the model thread.
//!
//! Rows are admitted against one bound over all requests (a 503 past it). The admission travels
//! with the job and is released when the model thread has answered or dropped it, so the bound
//! counts the model's real backlog, and a client that leaves cannot make room for more work
//! than the model will do. A job whose client has gone (its reply's receiver dropped with the
//! request) is dropped unrun.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use decider::decide_form::DecidePlan;
use decider::{Decider, DeciderError, Plan, SystemOneResponse};
use qwen35::Qwen35Ops;
use serde_json::{Map, Value};
use tokio::sync::oneshot;

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
        self.0.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |queued| queued.checked_add(rows).filter(|&total| total <= limit))?;
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
    Decide(DecidePlan, oneshot::Sender<Result<Map<String, Value>, DeciderError>>),
}

impl Work {
    /// The request is gone: nobody waits for the answer.
    fn abandoned(&self) -> bool {
        match self {
            Work::SystemOne(_, reply) => reply.is_closed(),
            Work::Decide(_, reply) => reply.is_closed(),
        }
    }

    fn rows(&self) -> usize {
        match self {
            Work::SystemOne(plan, _) => plan.rows.len(),
            Work::Decide(..) => 1,
        }
    }
}

pub(super) struct Job {
    pub work: Work,
    pub admission: Admission,
}

/// Answers jobs in arrival order until every sender is dropped.
pub(super) fn answer_jobs<B: Qwen35Ops>(decider: &Decider<B>, inbox: mpsc::Receiver<Job>, stats: &Stats) {
    for Job { work, admission } in inbox {
        if work.abandoned() {
            continue; // its admission drops here
        }
        stats.ran(work.rows());
        match work {
            Work::SystemOne(plan, reply) => answer(admission, reply, || decider.answer_plan(&plan)),
            Work::Decide(plan, reply) => answer(admission, reply, || decider.answer_decide(&plan)),
        }
    }
}

/// Runs one job and sends its answer, its rows out of the backlog before the client hears back.
/// A backend that panics on one request (out of device memory, say) fails that request with a
/// 500, its reply dropped; the model thread goes on with the next.
fn answer<T>(admission: Admission, reply: oneshot::Sender<T>, run: impl FnOnce() -> T) {
    let answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run));
    drop(admission);
    if let Ok(answer) = answer {
        let _ = reply.send(answer);
    }
}
