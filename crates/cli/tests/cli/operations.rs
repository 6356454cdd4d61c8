//! What an operator runs the server with: `/metrics` read by a Prometheus text parser, an
//! access-log line per request, log levels, readiness while the model loads, a busy port found
//! before the load, the compute threads, and shell completions.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use integration_tests::server::{Server, read};
use prometheus_parse::{Scrape, Value as Sample};
use qwen35::loader::{LAYERS_DONE, LAYERS_TOTAL};
use serde_json::{Value, json};

const DECIDER: &str = env!("CARGO_BIN_EXE_decider");

/// `/metrics`, parsed: its content type is the Prometheus text format's.
fn scrape(server: &Server) -> Scrape {
    let response = ureq::get(&format!("{}/metrics", server.base)).call().expect("GET /metrics");
    assert_eq!(response.header("content-type"), Some("text/plain; version=0.0.4; charset=utf-8"));
    let text = response.into_string().unwrap();
    Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The value of the sample `name` whose labels include `labels`.
fn sample(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    let found = scrape
        .samples
        .iter()
        .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .unwrap_or_else(|| panic!("no {name}{labels:?} in {:#?}", scrape.samples));
    match &found.value {
        Sample::Counter(v) | Sample::Gauge(v) | Sample::Untyped(v) => *v,
        Sample::Histogram(buckets) => buckets.last().map_or(0.0, |b| b.count),
        other => panic!("{name}: {other:?}"),
    }
}

/// The row tokens a request's plan holds, as the library builds them.
fn row_tokens(body: &Value) -> usize {
    let request = decider::SystemOneRequest::new(body["state"].clone(), body["questions"].as_object().unwrap().clone());
    decider::Prompter::demo().plan(&request).unwrap().rows.iter().map(|r| r.ids.len()).sum()
}

#[test]
fn metrics_scrape_cleanly_and_count_what_the_server_did() {
    let server = Server::start(DECIDER, &["--max-memory", "512"]);
    let before = scrape(&server);
    assert_eq!(sample(&before, "decider_ready", &[]), 1.0);
    assert_eq!(sample(&before, "decider_memory_budget_bytes", &[]), (512u64 << 20) as f64);

    let questions = json!({"a": {"type": "noul", "instructions": "A?"}, "b": {"type": "choice", "instructions": "B?", "criteria": {"x": "X", "y": "Y"}}});
    let body = json!({"state": "a short state", "questions": questions});
    for _ in 0..3 {
        assert_eq!(server.post("/v1/systemone", &body.to_string()).0, 200);
    }
    let bad = json!({"state": "s", "questions": {"q": {"type": "nonsense", "instructions": "?"}}});
    assert_eq!(server.post("/v1/systemone", &bad.to_string()).0, 422);
    assert_eq!(server.post("/decide", &json!({"context": "c", "schema": {"Q?": {"type": "bool"}}}).to_string()).0, 200);
    assert_eq!(server.get("/no/such/route").0, 404);

    let after = scrape(&server);
    let requests = |route: &str, status: &str| {
        sample(&after, "decider_http_requests_total", &[("route", route), ("status", status)])
    };
    assert_eq!(
        [
            requests("/v1/systemone", "200"),
            requests("/v1/systemone", "422"),
            requests("/decide", "200"),
            requests("other", "404")
        ],
        [3.0, 1.0, 1.0, 1.0]
    );
    let latencies = |route: &str| sample(&after, "decider_http_request_duration_seconds_count", &[("route", route)]);
    assert_eq!([latencies("/v1/systemone"), latencies("/decide")], [4.0, 1.0]);
    assert_eq!(sample(&after, "decider_decisions_total", &[("route", "/v1/systemone")]), 6.0);
    assert_eq!(sample(&after, "decider_decisions_total", &[("route", "/decide")]), 1.0);
    assert_eq!(sample(&after, "decider_tokens_total", &[("route", "/v1/systemone")]), 3.0 * row_tokens(&body) as f64);
    let (_, stats) = server.get("/stats");
    assert_eq!(sample(&after, "decider_batch_rows_count", &[]), stats["batches"].as_f64().unwrap());
    assert_eq!(sample(&after, "decider_batch_rows_sum", &[]), stats["rows"].as_f64().unwrap());
    assert_eq!(sample(&after, "decider_queue_rows", &[]), 0.0);
    assert_eq!(sample(&after, "decider_memory_held_bytes", &[]), 0.0);

    // A request hyper refuses before routing is counted too.
    let _ = super::serve::raw_exchange(&server, "NOT AN HTTP REQUEST\r\n\r\n");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while sample(&scrape(&server), "decider_malformed_requests_total", &[]) != 1.0 {
        assert!(std::time::Instant::now() < deadline, "the malformed request is counted");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn each_request_is_logged_on_one_line_at_its_level() {
    let server = Server::start(DECIDER, &[]);
    let body = json!({"state": "s", "questions": {"a": {"type": "noul", "instructions": "A?"}}});
    assert_eq!(server.post("/v1/systemone", &body.to_string()).0, 200);
    let tokens = row_tokens(&body);
    assert!(
        server.logged(&format!(
            "INFO request method=POST path=/v1/systemone status=200 rows=1 tokens={tokens} questions=1 ms="
        )),
        "{}",
        server.log()
    );
    let bad = json!({"state": "s", "questions": {"q": {"type": "nonsense", "instructions": "?"}}});
    assert_eq!(server.post("/v1/systemone", &bad.to_string()).0, 422);
    assert!(
        server.logged("WARN refused status=422 detail=\"unknown question type 'nonsense'"),
        "a refusal names its reason:\n{}",
        server.log()
    );
    assert!(server.logged("method=POST path=/v1/systemone ms="), "{}", server.log());
    // Probes are logged at debug: not at the default level.
    assert_eq!(server.get("/health").0, 200);
    assert_eq!(server.get("/v1/models").0, 200);
    assert!(server.logged("path=/v1/models status=200"), "{}", server.log());
    assert!(!server.log().contains("path=/health"), "{}", server.log());

    // At warn, answered requests leave no line; refusals do.
    let quiet = Server::start(DECIDER, &["--log-level", "warn"]);
    assert_eq!(quiet.post("/v1/systemone", &body.to_string()).0, 200);
    assert_eq!(quiet.post("/v1/systemone", &bad.to_string()).0, 422);
    assert!(quiet.logged("WARN refused status=422"), "{}", quiet.log());
    assert!(!quiet.log().contains("INFO"), "{}", quiet.log());
    // And at debug, probes are there.
    let verbose = Server::start(DECIDER, &["--log-level", "debug"]);
    assert_eq!(verbose.get("/health").0, 200);
    assert!(verbose.logged("DEBUG request method=GET path=/health status=200"), "{}", verbose.log());

    let out = Command::new(DECIDER).args(["backends", "--log-level", "no=such=level"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("--log-level \"no=such=level\""), "{stderr}");
}

/// A config at decider-2b's vocabulary and a quarter of its layers and half its width: about a
/// gigabyte of f32 weights, drawn for a second or two while the server already listens.
fn slow_to_load_model(dir: &std::path::Path) -> String {
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/configs/qwen3.5-2b.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(fixture).unwrap()).unwrap();
    let text = &mut config["text_config"];
    for (key, value) in [
        ("num_hidden_layers", json!(4)),
        ("hidden_size", json!(1024)),
        ("intermediate_size", json!(3072)),
        ("num_attention_heads", json!(4)),
        ("linear_num_key_heads", json!(8)),
        ("linear_num_value_heads", json!(8)),
    ] {
        text[key] = value;
    }
    let layer_types = text["layer_types"].as_array().unwrap()[..4].to_vec();
    text["layer_types"] = json!(layer_types);
    let path = dir.join("config.json");
    std::fs::write(&path, config.to_string()).unwrap();
    format!("random:{}", path.display())
}

#[test]
fn health_says_loading_until_the_model_is_ready() {
    let dir = tempfile::tempdir().unwrap();
    let model = slow_to_load_model(dir.path());
    let mut child = KillOnDrop(
        Command::new(DECIDER)
            .args(["serve", "--model", &model, "--addr", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut stderr = BufReader::new(child.0.stderr.take().unwrap());
    let mut line = String::new();
    while !line.contains("listening on http://") {
        line.clear();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "the server says where it listens");
    }
    let base = line.split_whitespace().find(|w| w.starts_with("http://")).unwrap().trim_end_matches(';').to_string();
    std::thread::spawn(move || stderr.lines().for_each(drop));

    let (status, health) = read(ureq::get(&format!("{base}/health")).call());
    assert_eq!((status, &health["status"], &health["ok"]), (503, &json!("loading"), &json!(false)), "{health}");
    let body = json!({"state": "s", "questions": {"a": {"type": "noul", "instructions": "A?"}}}).to_string();
    let post =
        || read(ureq::post(&format!("{base}/v1/systemone")).set("content-type", "application/json").send_string(&body));
    let (status, refusal) = post();
    assert_eq!(status, 503, "{refusal}");
    let metrics = ureq::get(&format!("{base}/metrics")).call().unwrap().into_string().unwrap();
    assert!(metrics.lines().any(|l| l == "decider_ready 0"), "{metrics}");

    // The start-up line comes once the model is loaded: then the reference's /health body.
    let mut stdout = BufReader::new(child.0.stdout.take().unwrap());
    let mut banner = String::new();
    stdout.read_line(&mut banner).unwrap();
    assert!(banner.starts_with("decider serving"), "{banner}");
    let (status, health) = read(ureq::get(&format!("{base}/health")).call());
    assert_eq!((status, &health["ok"]), (200, &json!(true)), "{health}");
    assert!(health.get("status").is_none(), "the reference's body: {health}");
    assert_eq!(post().0, 200);
}

#[test]
fn a_busy_port_fails_before_the_model_loads() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let model = slow_to_load_model(dir.path());
    let out = Command::new(DECIDER).args(["serve", "--model", &model, "--addr", &addr]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("binding {addr}")) && stderr.contains("in use"), "{stderr}");
    assert!(!stderr.contains("loading") && !stderr.contains("loaded"), "nothing was loaded: {stderr}");
}

#[test]
fn threads_sizes_the_compute_pool() {
    let server = Server::start(DECIDER, &["--threads", "3"]);
    let body = json!({"state": "s", "questions": {"a": {"type": "noul", "instructions": "A?"}}});
    assert_eq!(server.post("/v1/systemone", &body.to_string()).0, 200);
    let tasks = std::fs::read_dir(format!("/proc/{}/task", server.child.id())).unwrap();
    let compute = tasks
        .filter_map(|task| std::fs::read_to_string(task.unwrap().path().join("comm")).ok())
        .filter(|name| name.starts_with("compute-"))
        .count();
    assert_eq!(compute, 3);
    let out = Command::new(DECIDER).args(["backends", "--threads", "0"]).output().unwrap();
    assert!(!out.status.success(), "zero threads is refused");
}

#[test]
fn completions_are_printed_for_each_shell() {
    for (shell, marker) in [("bash", "complete -F"), ("zsh", "#compdef decider"), ("fish", "complete -c decider")] {
        let out = Command::new(DECIDER).args(["completions", shell]).output().unwrap();
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(out.status.success() && script.contains(marker), "{shell}: {script}");
        for word in ["serve", "quantize", "max-memory", "weights"] {
            assert!(script.contains(word), "{shell} completes {word}");
        }
    }
    let out = Command::new(DECIDER).args(["completions", "tcsh"]).output().unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("possible values"));
}

/// A server process killed when the test ends, passed or not.
#[test]
fn model_help_names_every_kind_of_model_on_every_command() {
    for command in ["decide", "serve", "info", "forward", "prompt"] {
        let out = Command::new(DECIDER).args([command, "--help"]).output().unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        for kind in ["a folder", "Hugging Face Hub id (owner/name)", "`demo`", "`random:CONFIG`"] {
            assert!(help.contains(kind), "{command} --help names {kind}: {help}");
        }
    }
}

#[test]
fn loading_a_model_reports_its_progress() {
    let out = Command::new(DECIDER).args(["info", "--model", "demo"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The demo model's 4 layers: each is a tenth or more of the model.
    for done in 1..=4 {
        assert!(stderr.contains(&format!("INFO weights read {LAYERS_DONE}={done} {LAYERS_TOTAL}=4")), "{stderr}");
    }
    let quiet = Command::new(DECIDER).args(["info", "--model", "demo", "--log-level", "warn"]).output().unwrap();
    assert!(quiet.stderr.is_empty(), "{}", String::from_utf8_lossy(&quiet.stderr));
}

#[test]
fn a_backend_not_built_in_says_how_to_build_it() {
    let out = Command::new(DECIDER).args(["info", "--model", "demo", "--backend", "cuda"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("invalid value 'cuda' for '--backend <BACKEND>'")
            && stderr.contains("possible values: ndarray"),
        "{stderr}"
    );
    assert!(stderr.contains("cargo install --path crates/cli --locked --features wgpu"), "{stderr}");
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
