//! HTTP fuzzing of the real `decider serve` on loopback: thousands of generated requests
//! (malformed, truncated and non-UTF-8 bodies, wrong types, extreme numbers, near-valid
//! questions, odd methods, paths and content types) while other clients send half requests,
//! send slowly and hang up, send megabytes of the tokenizer's costliest texts, and open bursts of
//! connections that hold half a head or a declared body. Every answer must be JSON with a documented status (never a 500),
//! the server must log no panic, and afterwards it must answer as before, holding no rows or
//! memory.
//!
//! `PROPTEST_CASES` sets the number of requests (2,000 by default); a longer run:
//! `PROPTEST_CASES=50000 cargo test -p decider-cli --test http_fuzz --release`.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use integration_tests::fuzz::{json_value, questions, text, valid_questions};
use integration_tests::server::{Server, read};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};

const DECIDER: &str = env!("CARGO_BIN_EXE_decider");

/// The statuses a request may get (docs/decisions.md): anything else, a 500 above all, is a bug.
const DOCUMENTED: [u16; 8] = [200, 400, 404, 405, 408, 413, 422, 503];

/// A `/v1/systemone` body: the two fields, sometimes missing, and the optional ones with any value.
fn systemone_body() -> impl Strategy<Value = Value> {
    let questions = prop_oneof![1 => questions(), 2 => valid_questions()];
    (json_value(), questions, proptest::option::of(json_value()), proptest::option::of(json_value()), any::<u8>())
        .prop_map(|(state, questions, independent, assets, drop)| {
            let mut body = json!({"state": state, "questions": questions});
            match drop % 8 {
                0 => body.as_object_mut().unwrap().remove("state"),
                1 => body.as_object_mut().unwrap().remove("questions"),
                2 => independent.map(|v| body["independent"] = v).map(|()| Value::Null),
                3 => assets.map(|v| body["assets"] = v).map(|()| Value::Null),
                _ => None,
            };
            body
        })
}

/// A `/decide` body.
fn decide_body() -> impl Strategy<Value = Value> {
    (
        prop_oneof![text().prop_map(Value::from), json_value()],
        prop_oneof![questions().prop_map(Value::Object), json_value()],
    )
        .prop_map(|(context, schema)| json!({"context": context, "schema": schema}))
}

/// Bodies as bytes: JSON of the routes' shapes, any JSON, a valid body cut short, raw bytes, and
/// texts JSON parsers disagree on.
fn body() -> impl Strategy<Value = Vec<u8>> {
    let shaped = prop_oneof![systemone_body(), decide_body(), json_value()].prop_map(|v| v.to_string().into_bytes());
    let edges = proptest::sample::select(vec![
        "",
        "NaN",
        "Infinity",
        "-Infinity",
        "-0",
        "1e999999",
        "123456789012345678901234567890",
        "\u{feff}{}",
        "{\"state\": 1e400, \"questions\": {}}",
        "{\"state\": \"s\", \"questions\": {\"q\": {\"type\": \"noul\", \"instructions\": \"\\ud800\"}}}",
        "{\"state\": \"s\", \"state\": 1, \"questions\": {}}",
    ])
    .prop_map(|s| s.as_bytes().to_vec());
    prop_oneof![
        6 => shaped.clone(),
        2 => (shaped, any::<prop::sample::Index>()).prop_map(|(bytes, cut)| bytes[..cut.index(bytes.len() + 1)].to_vec()),
        1 => proptest::collection::vec(any::<u8>(), 0..200),
        1 => edges,
        1 => (1usize..3000).prop_map(|depth| format!("{{\"state\": {}1{}, \"questions\": {{}}}}", "[".repeat(depth), "]".repeat(depth)).into_bytes()),
    ]
}

/// A request: method, path, content type and body. Most bodies have their route's shape.
fn request() -> impl Strategy<Value = (&'static str, &'static str, Option<&'static str>, Vec<u8>)> {
    let method = prop_oneof![8 => Just("POST"), 1 => Just("GET"), 1 => proptest::sample::select(vec!["PUT", "DELETE", "PATCH", "OPTIONS"])];
    let any_path = proptest::sample::select(vec![
        "/v1/systemone",
        "/decide",
        "/health",
        "/stats",
        "/v1/models",
        "/",
        "/v1/systemone/",
        "/v2/systemone",
        "/decide?x=1",
        "/%ff",
    ]);
    let routed = prop_oneof![
        4 => systemone_body().prop_map(|b| ("/v1/systemone", b.to_string().into_bytes())),
        2 => decide_body().prop_map(|b| ("/decide", b.to_string().into_bytes())),
        3 => (any_path, body()),
    ];
    let content_type = prop_oneof![4 => Just(Some("application/json")), 1 => Just(None), 1 => Just(Some("text/plain")), 1 => Just(Some("application/x-www-form-urlencoded"))];
    (method, routed, content_type).prop_map(|(method, (path, body), content_type)| (method, path, content_type, body))
}

/// Clients that misbehave until `stop`: half a head, a whole request then hanging up, a body
/// sent slowly and abandoned.
fn misbehave(address: &str, stop: &AtomicBool) -> usize {
    let body = json!({"state": "word ".repeat(200), "questions": {"q": {"type": "noul", "instructions": "Long?"}}})
        .to_string();
    let whole = format!(
        "POST /v1/systemone HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut sent = 0;
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut stream) = std::net::TcpStream::connect(address) else {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        };
        let _ = match sent % 3 {
            0 => stream.write_all(b"POST /v1/systemone HTTP/1.1\r\nhost: x\r\ncontent-le"),
            1 => stream.write_all(whole.as_bytes()),
            _ => stream.write_all(&whole.as_bytes()[..whole.len() / 2]).and_then(|()| {
                std::thread::sleep(Duration::from_millis(200));
                stream.write_all(b"x")
            }),
        };
        sent += 1;
        std::thread::sleep(Duration::from_millis(20));
    }
    sent
}

/// Texts of `bytes` bytes in the shapes that cost the tokenizer most: digits (one token per
/// byte), one letter and one unassigned character (runs its pre-split cannot break).
fn costly_text(shape: usize, bytes: usize) -> String {
    let unit = ["1234567890", "x", "\u{10FFFF}"][shape % 3];
    unit.repeat(bytes / unit.len())
}

/// Clients that send what costs the server most until `stop`, each answer's status checked as
/// the fuzzer's: question texts, `/decide` options and states of up to megabytes of the
/// tokenizer's costliest shapes, and bursts of 200 connections that hold half a head or a 1 KB
/// start of a declared 64 MiB body. Returns the statuses, and the connections of the bursts.
fn heavy(address: &str, stop: &AtomicBool) -> (std::collections::BTreeMap<u16, usize>, usize) {
    let agent = ureq::AgentBuilder::new().max_idle_connections(0).timeout(Duration::from_secs(120)).build();
    let (mut statuses, mut held) = (std::collections::BTreeMap::new(), 0);
    let mut sent = 0;
    while !stop.load(Ordering::Relaxed) {
        let text = costly_text(sent, [16 << 10, 256 << 10, 1 << 20, 3 << 20][sent / 3 % 4]);
        let (path, body) = match sent % 4 {
            0 => ("/v1/systemone", json!({"state": "s", "questions": {"q": {"type": "noul", "instructions": text}}})),
            1 => {
                ("/v1/systemone", json!({"state": text, "questions": {"q": {"type": "noul", "instructions": "Long?"}}}))
            }
            2 => ("/decide", json!({"context": "c", "schema": {"Pick?": {"type": "choice", "options": ["a", text]}}})),
            _ => {
                let partial = [
                    "GET /health HTTP/1.1\r\nhost: x\r\nx-long: hhhhhhhhhhhhhhhh".to_string(),
                    format!(
                        "POST /v1/systemone HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{{\"state\": \"{}",
                        64 << 20,
                        "a".repeat(1000)
                    ),
                ];
                let burst: Vec<_> = (0..200)
                    .filter_map(|i| {
                        let mut stream = std::net::TcpStream::connect(address).ok()?;
                        stream.write_all(partial[i % 2].as_bytes()).ok()?;
                        Some(stream)
                    })
                    .collect();
                held += burst.len();
                std::thread::sleep(Duration::from_millis(200));
                sent += 1;
                continue;
            }
        };
        let answer = agent.post(&format!("http://{address}{path}")).send_string(&body.to_string());
        let (status, response) = read(answer);
        assert!(DOCUMENTED.contains(&status), "{path} of a {} byte text -> {status} {response}", text.len());
        *statuses.entry(status).or_default() += 1;
        sent += 1;
    }
    (statuses, held)
}

#[test]
fn generated_requests_get_documented_answers_and_the_server_lives_on() {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(2000);
    // Timeouts short enough that the misbehaving clients' connections close during the run,
    // long enough that a request of the fuzzer, slowed by the model on a loaded machine, is not
    // cut off mid-body (tests/cli/serve.rs tests the timeouts themselves).
    // The memory budget at 1 GiB, so that the costly texts are refused (413, 503) as well as run.
    let server = Server::start(
        DECIDER,
        &["--max-state-tokens", "64", "--header-timeout", "5", "--body-timeout", "20", "--max-memory", "1024"],
    );
    // A fresh connection per request: a pooled one the server has closed would fail the next
    // POST on the client's side (ureq does not retry POSTs), which says nothing of the server.
    let agent = ureq::AgentBuilder::new().max_idle_connections(0).build();
    let known = json!({"state": {"ticket": "printer jammed", "floor": 3}, "questions": {
        "team": {"type": "choice", "instructions": "Team?", "criteria": ["facilities", "it", "hr"]},
        "urgent": {"type": "noul", "instructions": "Urgent?"}}})
    .to_string();
    let (status, before) = server.post("/v1/systemone", &known);
    assert_eq!(status, 200, "{before}");

    let stop = AtomicBool::new(false);
    let (answered, misbehaved, (costly, held)) = std::thread::scope(|scope| {
        let bad_clients: Vec<_> = (0..2).map(|_| scope.spawn(|| misbehave(server.address(), &stop))).collect();
        let heavy_client = scope.spawn(|| heavy(server.address(), &stop));
        let statuses = std::sync::Mutex::new(std::collections::BTreeMap::<u16, usize>::new());
        let mut runner = TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
        let result = runner.run(&request(), |(method, path, content_type, body)| {
            let mut call = agent.request(method, &format!("{}{path}", server.base)).timeout(Duration::from_secs(120));
            if let Some(content_type) = content_type {
                call = call.set("content-type", content_type);
            }
            let (status, response) = read(if method == "GET" { call.call() } else { call.send_bytes(&body) });
            prop_assert!(
                DOCUMENTED.contains(&status),
                "{method} {path} {:?} -> {status} {response}",
                String::from_utf8_lossy(&body)
            );
            *statuses.lock().unwrap().entry(status).or_default() += 1;
            Ok(())
        });
        stop.store(true, Ordering::Relaxed);
        let misbehaved: usize = bad_clients.into_iter().map(|c| c.join().unwrap()).sum();
        let heavy = heavy_client.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        if let Err(failure) = result {
            panic!("{failure}");
        }
        (statuses.into_inner().unwrap(), misbehaved, heavy)
    });
    println!("{cases} generated requests, by status: {answered:?}; {misbehaved} misbehaving connections beside them");
    println!("costly texts, by status: {costly:?}; {held} connections held in bursts");
    assert!(costly.values().sum::<usize>() > 0, "the costly texts were sent");
    assert!(
        answered.get(&200).is_some_and(|&n| n > cases as usize / 20),
        "the generators reach the model: {answered:?}"
    );

    let (status, after) = server.post("/v1/systemone", &known);
    assert_eq!((status, &after), (200, &before), "the server answers as before");
    // The misbehaving clients' requests drain within their timeouts.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, stats) = server.get("/stats");
        if stats["outstanding_rows"] == 0 && stats["memory_held_bytes"] == 0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "rows or memory still held: {stats}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = server.log();
    assert!(!log.contains("panicked"), "the server log has a panic:\n{log}");
}
