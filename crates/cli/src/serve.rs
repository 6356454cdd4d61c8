//! `decider serve`: the reference's HTTP API (decider-ai 1.10.0's server) on axum.
//!
//! Requests are validated and tokenized on the async side; the model runs on one worker
//! thread that owns it and answers requests in arrival order, those queued together scored
//! together (their rows in shared batches). Rows are admitted against a
//! queue bound (503 past it) after the size limits (413), and every question is validated
//! before either (422), as in the reference.

use std::net::SocketAddr;
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use qwen35::Qwen35Ops;

use crate::backend::GenericTask;

mod access_log;
mod args;
mod body;
mod error;
mod handlers;
mod limits;
mod listener;
mod memory;
mod metrics;
mod queue;
mod request;
mod state;
mod stats;

pub use args::ServeArgs;
use limits::Limits;
use metrics::Metrics;
use queue::{Backlog, Job};
use state::AppState;
use stats::Stats;

impl GenericTask for &ServeArgs {
    fn run<B: Qwen35Ops>(self, device: &B::Device) -> anyhow::Result<()> {
        let demo = if self.model.is_random() { " (random weights)" } else { "" };
        serve::<B>(self, device, shutdown_signal(), |name, addr| {
            println!("decider serving {name} on http://{addr} with backend {}{demo}", self.backend);
        })?;
        tracing::info!("shut down");
        Ok(())
    }
}

/// Binds `args.addr`, loads the model, calls `ready` with the model name and bound address once
/// it is loaded, and serves until `shutdown` completes; requests in flight are finished first.
///
/// The port is bound before the model loads, so a port in use fails at once rather than after
/// a load of minutes, and `/health` answers 503 `loading` meanwhile (a readiness probe).
pub fn serve<B: Qwen35Ops>(
    args: &ServeArgs,
    device: &B::Device,
    shutdown: impl Future<Output = ()> + Send + 'static,
    ready: impl FnOnce(&str, SocketAddr),
) -> anyhow::Result<()> {
    let listener = std::net::TcpListener::bind(&args.addr).with_context(|| format!("binding {}", args.addr))?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    tracing::info!("listening on http://{addr}; loading {}", args.model);
    let budget_bytes = args.max_memory.saturating_mul(1 << 20);
    let budget = memory::MemoryBudget::new(budget_bytes);
    let stats = Arc::new(Stats::default());
    let metrics = Arc::new(Metrics::new(budget_bytes));
    let (jobs, inbox) = mpsc::channel::<Job>();
    let (loaded_tx, loaded) = tokio::sync::oneshot::channel();
    let (model, weights, temperature) = (args.model.clone(), args.weights.choice, args.temperature);
    let (model_budget, model_stats, model_metrics, model_device) =
        (budget.clone(), stats.clone(), metrics.clone(), device.clone());
    // The model thread owns the model: it loads it, then answers jobs until the server
    // drops its sender.
    std::thread::Builder::new().name("model".into()).spawn(move || {
        let started = Instant::now();
        let loaded = model.load::<B>(weights, &model_device).and_then(|decider| match temperature {
            Some(t) => Ok(decider.with_temperature(t)?),
            None => Ok(decider),
        });
        let decider = match loaded {
            Ok(decider) => decider,
            Err(e) => return loaded_tx.send(Err(e)).unwrap_or(()),
        };
        tracing::info!("loaded {} in {:.1} s", decider.source(), started.elapsed().as_secs_f64());
        let _ = loaded_tx.send(Ok((
            decider.prompter().clone(),
            decider.working_memory(),
            decider.source().to_string(),
            device_label(&format!("{model_device:?}")),
        )));
        queue::answer_jobs(&decider, inbox, &model_budget, &model_stats, &model_metrics);
    })?;
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
    let (deadline, deadline_passed) = tokio::sync::watch::channel(false);
    let app = Arc::new(OnceLock::new());
    let loading = handlers::loading(args.model.to_string(), metrics.clone(), budget.clone());
    let service = handlers::loaded_or(app.clone(), loading, metrics.clone());
    let runtime =
        tokio::runtime::Builder::new_multi_thread().max_blocking_threads(blocking_threads()).enable_all().build()?;
    runtime.block_on(async {
        // Polled once now, so that a shutdown signal's handlers are in place before the start-up
        // line tells anyone the server is there (a SIGTERM before them would kill it outright).
        let mut shutdown = Box::pin(shutdown);
        let _ = shutdown.as_mut().poll(&mut std::task::Context::from_waker(std::task::Waker::noop()));
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let (malformed_stats, malformed_metrics) = (stats.clone(), metrics.clone());
        let malformed: listener::Malformed = Arc::new(move |status, e| {
            Stats::count(&malformed_stats.errors);
            malformed_metrics.malformed();
            let detail = serde_json::Value::String(format!("malformed HTTP request: {e}"));
            tracing::warn!(status = status.as_u16(), %detail, "refused");
        });
        let connections = listener::Connections { timeouts, half_close: args.half_close };
        let serving = listener::serve(listener, service, connections, shutdown, deadline, malformed);
        let mut serving = std::pin::pin!(serving);
        let parts = tokio::select! {
            parts = loaded => parts.context("the model thread stopped")??,
            // Stopped while the model loads.
            () = &mut serving => return anyhow::Ok(()),
        };
        let (prompter, working, source, device) = parts;
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
            metrics: metrics.clone(),
            deadline: deadline_passed,
        });
        let _ = app.set(handlers::router(state.clone()));
        metrics.set_ready();
        ready(&state.prompter.config.model_name, addr);
        serving.await;
        anyhow::Ok(())
    })?;
    // Tokenizing work of requests cut off by the shutdown timeout is not waited for.
    runtime.shutdown_timeout(Duration::from_secs(1));
    Ok(())
}

/// Threads that parse bodies and plan requests (tokio's blocking pool), as many as the compute
/// threads (`--threads`, one per CPU by default): that work is CPU-bound, so more threads would
/// not finish it sooner, and each would hold its own stack and allocator caches outside the
/// memory budget. More requests wait for a free thread.
fn blocking_threads() -> usize {
    rayon::current_num_threads().max(2)
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

/// `device` as the reference's `/health` spells it (`str(torch.device)`): `"cpu"` for a CPU
/// device; any other keeps burn's name, lower-cased.
fn device_label(debug: &str) -> String {
    if debug == "Cpu" { "cpu".into() } else { debug.to_lowercase() }
}
