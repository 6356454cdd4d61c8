//! The log on stderr (`tracing`): one line per event with its time and level, filtered by
//! `--log-level` (`DECIDER_LOG_LEVEL`), else by `RUST_LOG`, else at `info`.
//!
//! The server logs an access line per request at `info` (probes of `/health` and `/metrics` at
//! `debug`), refusals at `warn` with the answer's `detail`, and its start, load and shutdown.

use std::io::IsTerminal;

use anyhow::Context;
use tracing_subscriber::EnvFilter;

/// The level when neither `--log-level` nor `RUST_LOG` says one.
const DEFAULT_FILTER: &str = "info";

/// Sends the events of this process to stderr, filtered by `filter` (a level such as `warn`,
/// or `RUST_LOG` directives) or, without one, by `RUST_LOG`.
pub fn init(filter: Option<&str>) -> anyhow::Result<()> {
    let filter = match filter {
        Some(directives) => EnvFilter::try_new(directives).with_context(|| {
            format!("--log-level {directives:?}: expected error, warn, info, debug, trace or RUST_LOG directives")
        })?,
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER)),
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init()
        .map_err(|e| anyhow::anyhow!("starting the log: {e}"))
}
