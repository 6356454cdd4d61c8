//! The counters of `GET /stats`, named as the reference server's `stats`, kept as the server runs.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value, json};

use super::limits::Limits;

#[derive(Default)]
pub(super) struct Stats {
    /// Requests answered.
    pub requests: AtomicU64,
    /// Times the model thread ran the requests queued then, together.
    pub batches: AtomicU64,
    /// Questions answered.
    pub decisions: AtomicU64,
    /// Rows scored by the model thread.
    pub rows: AtomicU64,
    /// Requests of several rows whose shared state ran once.
    pub shared_prefix_requests: AtomicU64,
    /// Requests refused with a question error (422) or failed on the model thread (500).
    pub errors: AtomicU64,
    /// 413s from the row and token limits.
    pub rejected_too_large: AtomicU64,
    /// 503s from the queue bound.
    pub rejected_overloaded: AtomicU64,
    /// Requests whose client closed the connection while they were tokenized, queued or run;
    /// queued work is dropped unrun. Not a reference field.
    pub abandoned: AtomicU64,
    /// 408s: bodies that did not arrive within `--body-timeout`. Not a reference field.
    pub timed_out: AtomicU64,
    /// Batches by their number of rows.
    batch_hist: Mutex<BTreeMap<usize, u64>>,
}

impl Stats {
    pub fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A request answered with `questions` answers.
    pub fn answered(&self, questions: usize) {
        Self::count(&self.requests);
        self.decisions.fetch_add(questions as u64, Ordering::Relaxed);
    }

    /// The model thread ran requests of these numbers of rows together.
    pub fn ran(&self, requests: &[usize]) {
        Self::count(&self.batches);
        let rows: usize = requests.iter().sum();
        self.rows.fetch_add(rows as u64, Ordering::Relaxed);
        let shared = requests.iter().filter(|&&rows| rows > 1).count();
        self.shared_prefix_requests.fetch_add(shared as u64, Ordering::Relaxed);
        *self.batch_hist.lock().unwrap_or_else(|e| e.into_inner()).entry(rows).or_default() += 1;
    }

    /// The body of `GET /stats`. This server has no CUDA graphs, engine statistics, length
    /// buckets or schema cache, so `engine` and `schema_cache` are null, `graphs` is 0 and
    /// `bucket_hist` is empty.
    /// `memory_held` (bytes of the memory budget requests hold now) is not a reference field.
    pub fn report(&self, outstanding_rows: usize, memory_held: usize, limits: &Limits) -> Value {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let batch_hist: Map<String, Value> = self
            .batch_hist
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(rows, n)| (rows.to_string(), json!(n)))
            .collect();
        json!({
            "requests": get(&self.requests),
            "batches": get(&self.batches),
            "decisions": get(&self.decisions),
            "rows": get(&self.rows),
            "shared_prefix_requests": get(&self.shared_prefix_requests),
            "errors": get(&self.errors),
            "rejected_too_large": get(&self.rejected_too_large),
            "rejected_overloaded": get(&self.rejected_overloaded),
            "abandoned": get(&self.abandoned),
            "timed_out": get(&self.timed_out),
            "batch_hist": batch_hist,
            "bucket_hist": {},
            "outstanding_rows": outstanding_rows,
            "memory_held_bytes": memory_held,
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
        })
    }
}
