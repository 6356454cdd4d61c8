//! `decider serve` within its memory budget and its answers at the edges, on a real server on
//! loopback: long question texts and unbreakable states are reserved or refused before they are
//! tokenized, bodies and request heads hold memory only as their bytes arrive, work whose client
//! left frees its place at once, every waiting client is answered at shutdown, error messages do
//! not echo megabytes, and transfer codings other than `chunked` are refused.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use integration_tests::server::Server;
use serde_json::{Value, json};

use crate::serve::{peak_resident_bytes, raw_exchange, wait_for_stats};

const DECIDER: &str = env!("CARGO_BIN_EXE_decider");

/// A `decider serve --model demo` under an address-space limit of 8 GiB (as containers and
/// systemd units set one): an allocation past it fails, and aborts the server.
fn capped_server(extra: &[&str]) -> Server {
    let mut command = Command::new("prlimit");
    command.args(["--as=8589934592", "--", DECIDER, "serve", "--model", "demo", "--addr", "127.0.0.1:0"]).args(extra);
    let server = Server::spawn(command);
    assert!(!server.base.is_empty(), "the server started: {}", server.log());
    server
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

fn resident_bytes(server: &Server) -> u64 {
    server.memory_bytes("VmRSS:").expect("a VmRSS line in /proc/<pid>/status")
}

/// The HTTP request of a JSON `body` to `path`, the connection to close after its answer.
fn http_post(path: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// A new connection to `server` that has sent `bytes`.
fn send(server: &Server, bytes: &str) -> TcpStream {
    let mut stream = TcpStream::connect(server.address()).unwrap();
    stream.write_all(bytes.as_bytes()).unwrap();
    stream
}

/// Everything the server answers on `stream` until it closes it: the status, the headers
/// (lower-cased names) and the body; `None` when it closed without an answer.
fn read_answer(mut stream: TcpStream) -> Option<(u16, Vec<(String, String)>, String)> {
    stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer.split_once("\r\n\r\n")?;
    let mut lines = head.lines();
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_string()))
        .collect();
    Some((status, headers, body.to_string()))
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

#[cfg(target_os = "linux")]
#[test]
fn long_question_texts_are_refused_before_they_are_tokenized() {
    let server = capped_server(&["--max-memory", "256"]);
    // How far the server's peak resident memory rises above what it holds while one request is
    // answered (what an earlier request left for its threads to free is not counted again).
    let growth = |path: &str, body: &Value| {
        let body = body.to_string();
        server.reset_peak_resident().expect("the peak reset (/proc/<pid>/clear_refs)");
        let before = resident_bytes(&server);
        let (status, response) = server.post(path, &body);
        (peak_resident_bytes(&server).saturating_sub(before), status, response)
    };
    // 12 MB of digits (one token per byte, the tokenizer's costliest text): tokenizing it would
    // take about 6 GB, more than the whole budget.
    let digits =
        json!({"state": "s", "questions": {"q": {"type": "noul", "instructions": "1234567890".repeat(1_200_000)}}});
    let (digits_growth, status, response) = growth("/v1/systemone", &digits);
    assert_eq!(status, 413, "{response}");
    let detail = response["detail"].as_str().unwrap();
    assert!(detail.starts_with("request too large for memory: tokenizing its texts"), "{detail}");
    // 40 MB of one letter: more tokens than a row may hold (36,864 by default) at 512 bytes per
    // token, the longest token; refused before the memory is even asked for.
    let letters = json!({"state": "s", "questions": {"q": {"type": "noul", "instructions": "x".repeat(40_000_000)}}});
    let (letters_growth, status, response) = growth("/v1/systemone", &letters);
    assert_eq!(status, 413, "{response}");
    let detail = response["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("too many tokens: a question's text of 40000")
            && detail.ends_with("the limit per row (DECIDER_MAX_ROW_TOKENS)"),
        "{detail}"
    );
    // The same for a /decide option.
    let form = json!({"context": "c", "schema": {"Pick?": {"type": "choice", "options": ["a", "\u{10FFFF}".repeat(10_000_000)]}}});
    let (option_growth, status, response) = growth("/decide", &form);
    assert_eq!(status, 413, "{response}");
    for (what, growth, body) in
        [("digits", digits_growth, 12e6), ("letters", letters_growth, 40e6), ("option", option_growth, 40e6)]
    {
        println!("long question texts, {what}: peak resident {:.0} MiB above resident", mib(growth));
        // The body and its parsed copies: a few times its size, not the gigabytes of tokenizing it.
        assert!((growth as f64) < 8.0 * body, "{what}: peak resident memory rose by {:.0} MiB", mib(growth));
    }
    assert_eq!(server.get("/health").0, 200);
}

#[cfg(target_os = "linux")]
#[test]
fn states_the_tokenizer_cannot_break_are_tokenized_within_the_budget() {
    // Four 15 MiB states of one letter at once: tokenized whole, each took gigabytes and the
    // server aborted. Each is tokenized only as far as its 32,768-token cap needs. (Rows are
    // limited below the cap, so each is refused once planned, without the model's time.)
    let server = capped_server(&["--max-row-tokens", "30000"]);
    let before = peak_resident_bytes(&server);
    let body = |c: char| {
        json!({"state": c.to_string().repeat(15 << 20), "questions": {"q": {"type": "noul", "instructions": "Long?"}}})
            .to_string()
    };
    let answers: Vec<(u16, Value)> = std::thread::scope(|scope| {
        let (server, body) = (&server, &body);
        let clients = ['x', 'y', 'z', 'w'].map(|c| scope.spawn(move || server.post("/v1/systemone", &body(c))));
        clients.into_iter().map(|c| c.join().unwrap()).collect()
    });
    let planned = |(status, response): &(u16, Value)| {
        *status == 413 && response["detail"].as_str().unwrap().starts_with("too many tokens: one row has 32")
    };
    for answer in &answers {
        assert!(planned(answer) || answer.0 == 503, "{answer:?}");
    }
    assert!(answers.iter().any(planned), "at least one is tokenized");
    let growth = peak_resident_bytes(&server).saturating_sub(before);
    println!("four 15 MiB one-letter states: peak resident grew by {:.0} MiB", mib(growth));
    assert!(growth < 2 << 30, "peak resident memory grew by {:.0} MiB", mib(growth));
    assert_eq!(server.get("/health").0, 200);
}

#[cfg(target_os = "linux")]
#[test]
fn bodies_and_heads_hold_memory_only_as_their_bytes_arrive() {
    let server = capped_server(&[]);
    let before = resident_bytes(&server);
    // 200 connections each declare a 64 MiB body (the limit) and send 1 KB of it.
    let declared = format!(
        "POST /v1/systemone HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{{\"state\": \"{}",
        64 << 20,
        "a".repeat(1000)
    );
    let bodies: Vec<TcpStream> = (0..200).map(|_| send(&server, &declared)).collect();
    // 1,000 connections each send 60 KB of a head and stop before its end.
    let head = format!("GET /health HTTP/1.1\r\nhost: x\r\nx-long: {}", "h".repeat(60_000));
    let heads: Vec<TcpStream> = (0..1000).map(|_| send(&server, &head)).collect();
    let (status, stats) = server.get("/stats");
    assert_eq!(status, 200, "the server answers beside them");
    let held = resident_bytes(&server).saturating_sub(before);
    println!("200 declared 64 MiB bodies and 1,000 unfinished 60 KB heads: resident grew by {:.0} MiB", mib(held));
    // 1,000 heads of at most 64 KiB, 200 bodies of 1 KB, and hyper's per-connection state.
    assert!(held < 160 << 20, "resident memory grew by {:.0} MiB; {stats}", mib(held));
    drop((bodies, heads));
    // A head well past the connection's buffer (less than hyper's default of 400 KB) is refused.
    let answer =
        raw_exchange(&server, &format!("GET /health HTTP/1.1\r\nhost: x\r\nx-long: {}\r\n\r\n", "h".repeat(150_000)));
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    assert_eq!(server.get("/health").0, 200);
}

#[test]
fn work_whose_client_left_frees_its_place_at_once() {
    // Long requests keep the model busy; clients queue 38 rows behind them and hang up. Their
    // rows leave the queue at once, not when the model thread comes to them: the next request,
    // which needs most of the queue, is admitted while the long ones still run.
    let server = Server::start(DECIDER, &["--max-queue-rows", "40"]);
    let long = |i: usize| {
        json!({"state": format!("{i} {}", "word ".repeat(30_000)), "questions": {"q": {"type": "noul", "instructions": "Long?"}}})
            .to_string()
    };
    let finished = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for i in 0..2 {
            let (server, finished, body) = (&server, &finished, long(i));
            scope.spawn(move || {
                assert_eq!(server.post("/v1/systemone", &body).0, 200);
                finished.fetch_add(1, Ordering::SeqCst);
            });
        }
        wait_for_stats(&server, |s| s["outstanding_rows"] == 2);
        let short = http_post(
            "/v1/systemone",
            &json!({"state": "s", "questions": {"q": {"type": "noul", "instructions": "Short?"}}}).to_string(),
        );
        let leavers: Vec<TcpStream> = (0..38).map(|_| send(&server, &short)).collect();
        wait_for_stats(&server, |s| s["outstanding_rows"] == 40);
        drop(leavers);
        let stats = wait_for_stats(&server, |s| s["abandoned"] == 38);
        assert!(finished.load(Ordering::SeqCst) < 2, "the long requests still run: {stats}");
        assert!(stats["outstanding_rows"].as_u64().unwrap() <= 2, "the leavers' rows are out of the queue: {stats}");
        let questions: serde_json::Map<String, Value> =
            (0..30).map(|i| (format!("q{i}"), json!({"type": "noul", "instructions": format!("Q{i}?")}))).collect();
        let (status, response) =
            server.post("/v1/systemone", &json!({"state": "s", "questions": questions}).to_string());
        assert_eq!(status, 200, "{response}");
    });
}

#[cfg(unix)]
#[test]
fn every_waiting_client_is_answered_at_shutdown() {
    // Two long requests run past the 1 s shutdown timeout, five short ones wait behind them:
    // each client gets its answer or a 503 that says to retry and closes the connection, none
    // a bare end of connection.
    let mut server = Server::start(DECIDER, &["--shutdown-timeout", "1"]);
    let long = |i: usize| json!({"state": format!("{i} {}", "word ".repeat(30_000)), "questions": {"q": {"type": "noul", "instructions": "Long?"}}});
    let short = json!({"state": "s", "questions": {"q": {"type": "noul", "instructions": "Short?"}}});
    let bodies: Vec<Value> = (0..2).map(long).chain(std::iter::repeat_n(short, 5)).collect();
    let mut clients = Vec::new();
    for (i, body) in bodies.iter().enumerate() {
        clients.push(send(&server, &http_post("/v1/systemone", &body.to_string())));
        wait_for_stats(&server, |s| s["outstanding_rows"] == i as u64 + 1);
    }
    let start = Instant::now();
    assert!(Command::new("kill").args(["-TERM", &server.child.id().to_string()]).status().unwrap().success());
    let answers: Vec<_> = clients.into_iter().map(read_answer).collect();
    let (exit, log) = server.exit();
    assert!(exit.success(), "exit status {exit}; log:\n{log}");
    assert!(start.elapsed() < Duration::from_secs(20), "shut down after {:?}", start.elapsed());
    let mut refused = 0;
    for (i, answer) in answers.iter().enumerate() {
        let (status, headers, body) =
            answer.as_ref().unwrap_or_else(|| panic!("client {i} got no answer; log:\n{log}"));
        match status {
            200 => {}
            503 => {
                refused += 1;
                assert_eq!(header(headers, "retry-after"), Some("1"), "client {i}: {headers:?}");
                assert_eq!(header(headers, "connection"), Some("close"), "client {i}: {headers:?}");
                assert!(body.contains("server shutting down"), "client {i}: {body}");
            }
            other => panic!("client {i}: {other} {body}"),
        }
    }
    assert!(refused >= 5, "the short requests behind the long ones are not run: {answers:?}");
}

#[test]
fn messages_quote_at_most_64_kib_of_the_request() {
    let server = Server::start(DECIDER, &[]);
    let kind = "t".repeat(10 << 20);
    let body = json!({"state": "s", "questions": {"q": {"type": kind, "instructions": "?"}}}).to_string();
    let answer = ureq::post(&format!("{}/v1/systemone", server.base)).send_string(&body);
    let Err(ureq::Error::Status(422, response)) = answer else { panic!("a 422: {answer:?}") };
    let text = response.into_string().unwrap();
    assert!(text.len() < 70 << 10, "a 422 of {} bytes", text.len());
    let detail: Value = serde_json::from_str(&text).unwrap();
    let detail = detail["detail"].as_str().unwrap();
    assert!(detail.starts_with("unknown question type 'ttt") && detail.ends_with(" bytes cut)"), "{}", &detail[..100]);
    assert!(server.logged("refused status=422 detail=\"unknown question type 'ttt"));
    let longest = server.log().lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 4 << 10, "a log line of {longest} bytes");
}

#[test]
fn transfer_codings_other_than_chunked_are_refused() {
    let server = Server::start(DECIDER, &[]);
    let body = json!({"state": "s", "questions": {"q": {"type": "noul", "instructions": "Up?"}}}).to_string();
    let chunked = |coding: &str| {
        let request = format!(
            "POST /v1/systemone HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ntransfer-encoding: {coding}\r\nconnection: close\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
            body.len()
        );
        read_answer(send(&server, &request)).expect("an answer")
    };
    let (status, _, answer) = chunked("chunked");
    assert_eq!(status, 200, "{answer}");
    let (status, headers, answer) = chunked("gzip, chunked");
    assert_eq!(status, 501, "{answer}");
    assert_eq!(header(&headers, "connection"), Some("close"));
    assert!(answer.contains(r#"transfer coding not implemented: \"gzip, chunked\""#), "{answer}");
}

/// `clients` connections at once, each sending `request` and reading its answer; their statuses
/// (0 for a connection closed without one).
fn flood(server: &Server, clients: usize, request: &str) -> Vec<u16> {
    std::thread::scope(|scope| {
        let senders: Vec<_> = (0..8)
            .map(|_| {
                scope.spawn(|| {
                    let streams: Vec<TcpStream> = (0..clients / 8).map(|_| send(server, request)).collect();
                    streams.into_iter().map(|s| read_answer(s).map_or(0, |(status, _, _)| status)).collect::<Vec<_>>()
                })
            })
            .collect();
        senders.into_iter().flat_map(|s| s.join().unwrap()).collect()
    })
}

/// Resident memory beyond `--max-memory` that many concurrent clients may add: the connections'
/// buffers and hyper's state (about 33 KiB each), the blocking threads' stacks and allocator
/// caches (one thread per CPU), and what the allocator keeps of freed memory (docs/decisions.md).
const CONCURRENCY_CONSTANT: u64 = 192 << 20;

#[cfg(target_os = "linux")]
#[test]
fn resident_memory_stays_within_the_budget_at_256_and_1000_clients() {
    // Each client sends a state over the 32,768-token cap: its body, its parse and tokenizing
    // its prefix are what the budget counts. (Rows are limited below the cap, so that each is
    // refused once planned: the model's working memory is checked by the other tests, and the
    // model's time would make this one minutes long.)
    const BUDGET_MIB: u64 = 256;
    let server = capped_server(&[
        "--max-memory",
        &BUDGET_MIB.to_string(),
        "--max-queue-rows",
        "100000",
        "--max-row-tokens",
        "30000",
    ]);
    let body = json!({"state": "word ".repeat(40_000), "questions": {"q": {"type": "noul", "instructions": "Long?"}}});
    let request = http_post("/v1/systemone", &body.to_string());
    let before = peak_resident_bytes(&server);
    for clients in [256, 1000] {
        let statuses = flood(&server, clients, &request);
        let planned = statuses.iter().filter(|&&s| s == 413).count();
        assert!(statuses.iter().all(|s| [413, 503].contains(s)), "{clients} clients: {statuses:?}");
        assert!(planned > 0, "{clients} clients: some are tokenized");
        let growth = peak_resident_bytes(&server).saturating_sub(before);
        println!(
            "{clients} clients of a 32,768-token state at --max-memory {BUDGET_MIB}: {planned} tokenized, peak resident grew by {:.0} MiB",
            mib(growth)
        );
        assert!(
            growth <= (BUDGET_MIB << 20) + CONCURRENCY_CONSTANT,
            "{clients} clients: peak resident memory grew by {:.0} MiB",
            mib(growth)
        );
    }
    let (_, stats) = server.get("/stats");
    assert_eq!(
        (stats["outstanding_rows"].as_u64(), stats["memory_held_bytes"].as_u64()),
        (Some(0), Some(0)),
        "{stats}"
    );
}

/// A model folder whose embedding (4M x 32 in f32, 512 MiB of zeros stored as a hole) is the last
/// tensor of its shard, so that a load spends its first second reading it.
fn folder_with_a_long_read() -> tempfile::TempDir {
    const VOCAB: usize = 4 << 20;
    let dir = tempfile::tempdir().unwrap();
    let fixture = integration_tests::fixture_path("dense/save_pretrained");
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture.join("config.json")).unwrap()).unwrap();
    config["vocab_size"] = VOCAB.into();
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    std::fs::write(dir.path().join("tokenizer.json"), decider::Tokenizer::test_tokenizer_json()).unwrap();
    let bytes = std::fs::read(fixture.join("model.safetensors")).unwrap();
    let tensors = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    // Offsets count from the end of the header: the fixture's other tensors, then the embedding.
    let (mut header, mut data) = (serde_json::Map::new(), Vec::new());
    let mut embedding = None;
    for (name, view) in tensors.tensors() {
        if name.ends_with("embed_tokens.weight") {
            embedding = Some((name, view.shape()[1]));
            continue;
        }
        let offsets = [data.len(), data.len() + view.data().len()];
        header.insert(name, json!({"dtype": view.dtype(), "shape": view.shape(), "data_offsets": offsets}));
        data.extend_from_slice(view.data());
    }
    let (name, hidden) = embedding.expect("an embedding");
    let end = data.len() + VOCAB * hidden * 4;
    header.insert(name, json!({"dtype": "F32", "shape": [VOCAB, hidden], "data_offsets": [data.len(), end]}));
    let mut header = serde_json::to_vec(&header).unwrap();
    header.resize(header.len().next_multiple_of(8), b' ');
    let mut file = std::fs::File::create(dir.path().join("model.safetensors")).unwrap();
    file.write_all(&(header.len() as u64).to_le_bytes()).unwrap();
    file.write_all(&header).unwrap();
    file.write_all(&data).unwrap();
    // The embedding's bytes: a hole, read as zeros.
    file.set_len((8 + header.len() + end) as u64).unwrap();
    dir
}

#[cfg(target_os = "linux")]
#[test]
fn a_folder_truncated_while_it_loads_is_reported() {
    let folder = folder_with_a_long_read();
    let shard = folder.path().join("model.safetensors");
    let mut child = Command::new(DECIDER)
        .args(["serve", "--model", folder.path().to_str().unwrap(), "--addr", "127.0.0.1:0", "--weights", "f32"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Truncated once the embedding's read is under way (the process holds 300 MiB more: more
    // than the tokenizer and the rest of a server take, about 210 MiB on the demo model, less
    // than the 512 MiB embedding).
    let pid = child.id().to_string();
    let resident = || integration_tests::process_memory_bytes(&pid, "VmRSS:").unwrap_or(0);
    let start = resident();
    let deadline = Instant::now() + Duration::from_secs(60);
    while resident() < start + (300 << 20) {
        if let Some(exit) = child.try_wait().unwrap() {
            let mut log = String::new();
            child.stderr.take().unwrap().read_to_string(&mut log).unwrap();
            panic!("the server ended before its load got under way: {exit}: {log}");
        }
        assert!(Instant::now() < deadline, "the load never got under way");
        std::thread::sleep(Duration::from_millis(2));
    }
    std::fs::OpenOptions::new().write(true).open(&shard).unwrap().set_len(1 << 20).unwrap();
    let exit = child.wait().unwrap();
    let mut log = String::new();
    child.stderr.take().unwrap().read_to_string(&mut log).unwrap();
    assert_eq!(exit.code(), Some(1), "{exit}: {log}");
    assert!(
        log.contains(&format!(
            "decider: a file of {} was truncated or changed while it was read (SIGBUS)",
            folder.path().display()
        )),
        "{log}"
    );
}
