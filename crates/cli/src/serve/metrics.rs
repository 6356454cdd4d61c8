//! `GET /metrics`: what the server did and holds, in the Prometheus text format (version 0.0.4)
//! for a Prometheus scraper. `/stats` keeps the reference's JSON counters; these are the same
//! facts as an operator's dashboards and alerts want them: by route and status, with latency
//! histograms. Every metric is named here, once.

use std::sync::atomic::AtomicI64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The `Content-Type` of `/metrics`.
pub(super) const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

/// A request's route (one of the server's paths, or `other`) and the status it was answered.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct RouteStatus {
    pub route: &'static str,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct Route {
    pub route: &'static str,
}

pub(super) struct Metrics {
    registry: Registry,
    requests: Family<RouteStatus, Counter>,
    duration: Family<Route, Histogram>,
    decisions: Family<Route, Counter>,
    tokens: Family<Route, Counter>,
    /// Rows the model thread ran in each of its batches (requests queued together share one).
    pub batch_rows: Histogram,
    malformed: Counter,
    queue_rows: Gauge<i64, AtomicI64>,
    memory_held: Gauge<i64, AtomicI64>,
    ready: Gauge<i64, AtomicI64>,
}

/// Seconds from 5 ms to about 82 s: a short request on a small model to a 32,768-token state on
/// a large one.
fn latency_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 15))
}

impl Metrics {
    /// Every metric at zero, with the memory budget of `--max-memory` (bytes).
    pub fn new(memory_budget_bytes: usize) -> Self {
        let mut registry = Registry::with_prefix("decider");
        let requests = Family::<RouteStatus, Counter>::default();
        registry.register("http_requests", "HTTP requests answered, by route and status", requests.clone());
        let duration = Family::<Route, Histogram>::new_with_constructor(latency_buckets as fn() -> Histogram);
        registry.register(
            "http_request_duration_seconds",
            "Time from a request's headers to its answer, by route",
            duration.clone(),
        );
        let decisions = Family::<Route, Counter>::default();
        registry.register(
            "decisions",
            "Questions answered (one per typed question or /decide field)",
            decisions.clone(),
        );
        let tokens = Family::<Route, Counter>::default();
        registry.register("tokens", "Prompt tokens of the rows of answered requests", tokens.clone());
        let batch_rows = Histogram::new(exponential_buckets(1.0, 2.0, 13));
        registry.register("batch_rows", "Rows the model ran together in one batch", batch_rows.clone());
        let malformed = Counter::default();
        registry.register("malformed_requests", "Requests refused as malformed HTTP before routing", malformed.clone());
        let queue_rows = Gauge::default();
        registry.register("queue_rows", "Rows admitted and not yet answered", queue_rows.clone());
        let memory_held = Gauge::default();
        registry.register(
            "memory_held_bytes",
            "Bytes of the memory budget that requests hold now",
            memory_held.clone(),
        );
        let memory_budget = Gauge::<i64, AtomicI64>::default();
        memory_budget.set(memory_budget_bytes.try_into().unwrap_or(i64::MAX));
        registry.register("memory_budget_bytes", "The memory budget (--max-memory) in bytes", memory_budget);
        let ready = Gauge::default();
        registry.register(
            "ready",
            "1 once the model is loaded and requests are answered, 0 while it loads",
            ready.clone(),
        );
        Self { registry, requests, duration, decisions, tokens, batch_rows, malformed, queue_rows, memory_held, ready }
    }

    /// A request on `route` answered with `status` after `seconds`.
    pub fn answered(&self, route: &'static str, status: u16, seconds: f64) {
        self.requests.get_or_create(&RouteStatus { route, status }).inc();
        self.duration.get_or_create(&Route { route }).observe(seconds);
    }

    /// A request on `route` whose answer held `questions` answers over rows of `tokens` tokens.
    pub fn decided(&self, route: &'static str, questions: usize, tokens: usize) {
        self.decisions.get_or_create(&Route { route }).inc_by(questions as u64);
        self.tokens.get_or_create(&Route { route }).inc_by(tokens as u64);
    }

    /// A request hyper refused before it reached a route.
    pub fn malformed(&self) {
        self.malformed.inc();
    }

    pub fn set_ready(&self) {
        self.ready.set(1);
    }

    /// The text of a scrape, with the queue and memory as they are now.
    pub fn render(&self, queue_rows: usize, memory_held: usize) -> String {
        self.queue_rows.set(queue_rows.try_into().unwrap_or(i64::MAX));
        self.memory_held.set(memory_held.try_into().unwrap_or(i64::MAX));
        let mut text = String::new();
        prometheus_text::encode(&mut text, &self.registry).expect("writing to a String cannot fail");
        text
    }
}
