//! The log on stderr (`tracing`): one line per event with its time and level, filtered by
//! `--log-level` (`DECIDER_LOG_LEVEL`), else by `RUST_LOG`, else at `info`.
//!
//! The server logs an access line per request at `info` (probes of `/health` and `/metrics` at
//! `debug`), refusals at `warn` with the answer's `detail`, and its start, load and shutdown.

use std::io::IsTerminal;

use anyhow::Context;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::layer::{Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

use crate::progress;

/// The level when neither `--log-level` nor `RUST_LOG` says one.
const DEFAULT_FILTER: &str = "info";

/// Sends the events of this process to stderr, filtered by `filter` (a level such as `warn`,
/// or `RUST_LOG` directives) or, without one, by `RUST_LOG`. On a terminal, the progress of a
/// model's read is a bar instead of lines (`progress`).
pub fn init(filter: Option<&str>) -> anyhow::Result<()> {
    let filter = match filter {
        Some(directives) => EnvFilter::try_new(directives).with_context(|| {
            format!("--log-level {directives:?}: expected error, warn, info, debug, trace or RUST_LOG directives")
        })?,
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER)),
    };
    let terminal = std::io::stderr().is_terminal();
    let bar = progress::Bar::default();
    let lines = tracing_subscriber::fmt::layer()
        .with_target(false)
        .with_writer(progress::Stderr(bar.clone()))
        .with_ansi(terminal)
        .with_filter(filter_fn(move |event| !(terminal && progress::is_progress(event))));
    tracing_subscriber::registry()
        .with(filter)
        .with(lines)
        .with(terminal.then_some(bar))
        .try_init()
        .map_err(|e| anyhow::anyhow!("starting the log: {e}"))
}
