//! Decisions per second of a real `decider serve` process: 16 clients at once against one client
//! at a time, on the same server, with the same short decision (140 tokens, one yes/no
//! question). Clients at once let the server score the requests queued together in shared
//! batches; the ratio of the two rates is what that batching buys. Prints the server's batches
//! and its peak resident memory.
//!
//! `DECIDER_BENCH_MODEL` is the `--model` (default `demo`; the decider-2b widths are
//! `random:tests/fixtures/configs/qwen3.5-2b.json`), `DECIDER_BENCH_REQUESTS` the requests of
//! each phase (default 32; 0 skips them), `DECIDER_BENCH_BACKEND` the `--backend`,
//! `DECIDER_BENCH_WEIGHTS` the `--weights` (default `f32`). With
//! `DECIDER_BENCH_LONG_STATE=1` a last phase sends one decision on a state cut to the longest
//! the reference accepts (32,768 tokens) and prints the server's peak resident memory over its
//! resident memory after loading (slow: minutes on a 2B model).
//!
//! First, the start-up of a one-shot command: `decider info` builds or loads the whole model, as
//! every `decide` and `forward` call does, timed against `decider backends`, a process that loads
//! nothing (5 runs each; `DECIDER_BENCH_STARTUP=0` skips it, e.g. for a large model folder).

use std::process::{Command, Stdio};
use std::time::Instant;

use integration_tests::server::Server;
use serde_json::{Value, json};

const CLIENTS: usize = 16;

fn main() {
    let model = std::env::var("DECIDER_BENCH_MODEL").unwrap_or_else(|_| "demo".into());
    let requests: usize = std::env::var("DECIDER_BENCH_REQUESTS").ok().and_then(|n| n.parse().ok()).unwrap_or(32);
    let mut command = Command::new(env!("CARGO_BIN_EXE_decider"));
    // Relative config paths are taken from the workspace root, where `cargo xtask bench` runs.
    command.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let weights = std::env::var("DECIDER_BENCH_WEIGHTS").unwrap_or_else(|_| "f32".into());
    if std::env::var("DECIDER_BENCH_STARTUP").map_or(true, |v| v != "0") {
        start_up(&model, &weights);
    }
    command.args(["serve", "--model", &model, "--weights", &weights, "--addr", "127.0.0.1:0"]);
    if let Ok(backend) = std::env::var("DECIDER_BENCH_BACKEND") {
        command.args(["--backend", &backend]);
    }
    let loading = Instant::now();
    let server = Server::spawn(command);
    assert!(!server.base.is_empty(), "the server did not start: {}", server.log());
    let loaded = memory_mib(&server, "VmRSS:");
    println!(
        "serve_load: --model {model} --weights {weights}, loaded in {:.1} s, resident {loaded:.0} MiB",
        loading.elapsed().as_secs_f64()
    );

    let body = decision();
    let (status, first) = server.post("/v1/systemone", &body);
    assert_eq!(status, 200, "{first}");
    let tokens = first["usage"]["input_tokens"].as_u64().unwrap_or(0);

    if requests > 0 {
        load_phases(&server, &body, requests, tokens);
    }

    if std::env::var("DECIDER_BENCH_LONG_STATE").is_ok_and(|v| v == "1") {
        let long = json!({"state": "word ".repeat(40_000), "questions": {"long": {"type": "noul", "instructions": "Is the state long?"}}}).to_string();
        // Linux: the peak restarts from the resident memory now, so it is this request's.
        let _ = server.reset_peak_resident();
        let start = Instant::now();
        let (status, answer) = server.post("/v1/systemone", &long);
        assert_eq!(status, 200, "{answer}");
        let peak = memory_mib(&server, "VmHWM:");
        println!(
            "  a state cut to 32,768 tokens ({} tokens in all): {:.1} s, peak resident {peak:.0} MiB, {:.0} MiB over the resident after loading",
            answer["usage"]["input_tokens"],
            start.elapsed().as_secs_f64(),
            peak - loaded
        );
    }
}

/// Median wall time of `decider info` over 5 runs, beside that of `decider backends`, and the
/// peak resident memory of those runs.
fn start_up(model: &str, weights: &str) {
    let run = |args: &[&str]| {
        let start = Instant::now();
        let status = Command::new(env!("CARGO_BIN_EXE_decider"))
            .args(args)
            .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .stdout(Stdio::null())
            .status()
            .expect("decider runs");
        assert!(status.success(), "decider {args:?} failed");
        start.elapsed().as_secs_f64()
    };
    let median = |args: &[&str]| {
        let mut times: Vec<f64> = (0..5).map(|_| run(args)).collect();
        times.sort_by(f64::total_cmp);
        times[2]
    };
    let nothing = median(&["backends"]);
    let mut info = vec!["info", "--model", model, "--weights", weights];
    let backend = std::env::var("DECIDER_BENCH_BACKEND");
    if let Ok(backend) = &backend {
        info.extend(["--backend", backend]);
    }
    let loading = median(&info);
    println!(
        "start-up: decider info --model {model} --weights {weights}: {loading:.2} s (median of 5; decider backends: {nothing:.3} s), peak resident {:.0} MiB",
        children_peak_kib() as f64 / 1024.0
    );
}

/// The largest peak resident memory of this process's finished children, in KiB (0 where the
/// system does not say).
#[cfg(unix)]
fn children_peak_kib() -> i64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) } != 0 {
        return 0;
    }
    // Linux reports KiB, macOS bytes.
    #[allow(clippy::useless_conversion, reason = "`c_long` is 32 bits on some targets")]
    let peak = i64::from(usage.ru_maxrss);
    if cfg!(target_os = "macos") { peak / 1024 } else { peak }
}

#[cfg(not(unix))]
fn children_peak_kib() -> i64 {
    0
}

/// Decisions/s of `requests` decisions one at a time, then from [`CLIENTS`] clients at once.
fn load_phases(server: &Server, body: &str, requests: usize, tokens: u64) {
    let one_at_a_time = rate(server, body, 1, requests);
    let batches_before = server.get("/stats").1["batches"].as_u64().unwrap_or(0);
    let at_once = rate(server, body, CLIENTS, requests);
    let stats = server.get("/stats").1;
    let batches = stats["batches"].as_u64().unwrap_or(0) - batches_before;
    println!("serve_load: {requests} decisions of {tokens} tokens per phase");
    println!("  1 client at a time:   {one_at_a_time:8.2} decisions/s");
    println!(
        "  {CLIENTS} clients at once:   {at_once:8.2} decisions/s in {batches} model runs (batch_hist over both phases {})",
        stats["batch_hist"]
    );
    println!("  ratio:                {:8.2}x", at_once / one_at_a_time);
    println!("  server peak resident: {:8.0} MiB", memory_mib(server, "VmHWM:"));
}

/// A one-question decision of 140 tokens.
fn decision() -> String {
    let state = json!({
        "ticket": {"id": 4471, "channel": "email", "subject": "Charged twice for one order",
                   "body": "Hello, my card was charged twice for the same order last Tuesday. I only placed one order and the second charge is still pending on my statement. Could you refund the duplicate? I have attached the bank statement. Thanks, Dana"},
        "customer": {"plan": "pro", "since": "2021-03-02", "open_tickets": 1}
    });
    json!({"state": state, "questions": {"refund": {"type": "noul", "instructions": "Should the duplicate charge be refunded today?"}}}).to_string()
}

/// Decisions per second of `total` requests sent by `clients` clients, each waiting for its answer.
fn rate(server: &Server, body: &str, clients: usize, total: usize) -> f64 {
    let start = Instant::now();
    std::thread::scope(|scope| {
        for c in 0..clients {
            scope.spawn(move || {
                for _ in (c..total).step_by(clients) {
                    let (status, answer): (u16, Value) = server.post("/v1/systemone", body);
                    assert_eq!(status, 200, "{answer}");
                }
            });
        }
    });
    total as f64 / start.elapsed().as_secs_f64()
}

/// A memory figure of the server in MiB ([`Server::memory_bytes`]; 0 where there is none).
fn memory_mib(server: &Server, field: &str) -> f64 {
    server.memory_bytes(field).unwrap_or(0) as f64 / (1 << 20) as f64
}
