//! The HTTP server, started as the real `decider serve` process on loopback and spoken to over
//! real HTTP: the reference's wire format, its status codes and messages, limits, a bounded
//! concurrent load, and graceful shutdown.

use std::process::Command;

use burn::backend::NdArray;
use decider::{Decider, SystemOneRequest};
use integration_tests::server::{Server, read};
use serde_json::{Value, json};

/// The `decider` binary under test.
const DECIDER: &str = env!("CARGO_BIN_EXE_decider");

/// A server with the default limits, for the tests that need nothing special.
fn server() -> Server {
    Server::start(DECIDER, &[])
}

fn every_type() -> Value {
    json!({
        "team": {"type": "choice", "instructions": "Which team should handle this?",
                 "criteria": {"billing": "charges and refunds", "technical": null, "sales": null}},
        "urgent": {"type": "noul", "instructions": "Is it urgent?", "criteria": {"true": "needs an answer today"}},
        "bool_alias": {"type": "bool", "question": "Is the customer angry?"},
        "severity": {"type": "score", "instructions": "How severe?", "criteria": {"0": "none", "1": "minor", "2": "major"}},
        "code": {"instructions": "Which code?", "options": (0..40).map(|i| format!("code-{i}")).collect::<Vec<_>>()}
    })
}

#[test]
fn systemone_answers_equal_the_library_and_have_the_wire_format() {
    let server = server();
    let state = json!({"ticket": {"subject": "Charged twice", "lines": [1, 2, 3, 4, 5, 6, 7, 8]}});
    for independent in [true, false] {
        let body = json!({"model": "decider", "state": state, "questions": every_type(), "independent": independent});
        let (status, response) = server.post("/v1/systemone", &body.to_string());
        assert_eq!(status, 200, "{response}");
        let keys: Vec<_> = response.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, ["model", "answers", "usage"]);
        let mut request = SystemOneRequest::new(state.clone(), every_type().as_object().unwrap().clone());
        request.independent = independent;
        let library = Decider::<NdArray>::demo(&Default::default()).answer(&request).unwrap();
        assert_eq!(response, serde_json::to_value(&library).unwrap(), "independent={independent}");
        assert_eq!(response["answers"]["bool_alias"]["type"], "noul");
        assert_eq!(response["answers"]["code"]["probabilities"].as_object().unwrap().len(), 40);
        assert_eq!(response["usage"]["output_tokens"], 0);
    }
}

#[test]
fn invalid_questions_get_422_with_the_reference_message() {
    let cases = [
        (
            json!({"q": {"type": "choice", "instructions": "Pick", "criteria": (0..256).map(|i| format!("o{i}")).collect::<Vec<_>>()}}),
            "choice criteria: a map of 2..255 options",
        ),
        (
            json!({"q": {"type": "score", "instructions": "How?", "criteria": ["only"]}}),
            "score criteria: an ordered list of 2..10 level descriptions",
        ),
        (
            json!({"q": {"type": "noul", "criteria": {}}}),
            "noul question without instructions: criteria must describe true or false",
        ),
        (json!({"q": {"type": "x", "instructions": "?"}}), "unknown question type 'x'"),
        (json!({"q": {"type": "choice", "criteria": ["a", "b"]}}), "question without instructions"),
        (json!({"q": "not an object"}), "question \"q\" must be an object"),
    ];
    let server = server();
    for (questions, message) in cases {
        let (status, body) = server.post("/v1/systemone", &json!({"state": "s", "questions": questions}).to_string());
        assert_eq!((status, body["detail"].as_str()), (422, Some(message)), "{questions}");
    }
}

/// A state with Python's own JSON numbers (`NaN`, integers past 64 bits, `-0`, exponents,
/// trailing zeros) is answered as the state Python renders from it: the same answer as for that
/// rendering sent as a text state (tests/fixtures/json/loads.json has both, from Python's `json`).
#[test]
fn a_state_is_rendered_with_pythons_json_numbers() {
    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(integration_tests::fixture_path("json/loads.json")).unwrap())
            .unwrap();
    let case = record["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["text"].as_str().is_some_and(|t| t.contains("NaN") && t.contains("neg0")))
        .unwrap();
    let (state, rendered) = (case["text"].as_str().unwrap(), case["dumps"].as_str().unwrap());
    assert!(rendered.contains("123456789012345678901234567890") && rendered.contains("\"neg0\": 0,"), "{rendered}");
    let questions = json!({"fits": {"type": "noul", "instructions": "Is the record complete?"}});
    let server = server();
    let (status, as_sent) =
        server.post("/v1/systemone", &format!("{{\"state\": {state}, \"questions\": {questions}}}"));
    assert_eq!(status, 200, "{as_sent}");
    let (_, as_rendered) =
        server.post("/v1/systemone", &json!({"state": rendered, "questions": questions}).to_string());
    assert_eq!(as_sent, as_rendered);
}

#[test]
fn malformed_bodies_get_the_reference_fastapi_422() {
    // tests/fixtures/http/errors.json: FastAPI's answers to each body (Python's `json.loads`
    // messages and offsets included), recorded by tests/fixtures/http/generate.py.
    let server = server();
    let cases: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(integration_tests::fixture_path("http/errors.json")).unwrap())
            .unwrap();
    assert!(cases.len() >= 46);
    for case in &cases {
        let path = case["path"].as_str().unwrap();
        let body = match (case["body"].as_str(), case["body_hex"].as_str()) {
            (Some(text), _) => text.as_bytes().to_vec(),
            (None, Some(hex)) => {
                (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect()
            }
            _ => panic!("a case has a body: {case}"),
        };
        let mut request = ureq::post(&format!("{}{path}", server.base));
        if let Some(content_type) = case["content_type"].as_str() {
            request = request.set("content-type", content_type);
        }
        let (status, response) = read(request.send_bytes(&body));
        assert_eq!(status as u64, case["status"].as_u64().unwrap(), "{case}: {response}");
        assert_eq!(response["detail"], case["response"]["detail"], "{case}");
    }
    // A long refused body is not echoed back whole (its reply would be six times its size).
    let controls = "\u{1}".repeat(1_000_000);
    let (status, response) = read(
        ureq::post(&format!("{}/v1/systemone", server.base)).set("content-type", "text/plain").send_string(&controls),
    );
    assert_eq!(
        (status, &response["detail"][0]["input"]),
        (422, &json!("(more than 65536 bytes of JSON, not echoed)")),
        "{response}"
    );
    // pydantic reads "yes" as true; no questions answer nothing.
    let (status, response) =
        server.post("/v1/systemone", "{\"state\": \"s\", \"questions\": {}, \"independent\": \"yes\"}");
    assert_eq!(
        (status, response),
        (
            200,
            json!({"model": "decider-demo-random-weights", "answers": {}, "usage": {"input_tokens": 0, "output_tokens": 0}})
        )
    );
}

#[test]
fn health_models_and_decide_routes() {
    let server = server();
    let (status, health) = server.get("/health");
    assert_eq!(status, 200);
    assert_eq!(
        (health["ok"].as_bool(), health["model"].as_str(), health["layout"].as_str()),
        (Some(true), Some("demo"), Some("plain"))
    );
    assert_eq!(health["temperature_by_type"]["noul"], 1.0);
    assert_eq!(health["device"], "cpu", "spelled as the reference's str(torch.device)");
    let (_, models) = server.get("/v1/models");
    assert_eq!(models["models"][0]["name"], "decider-demo-random-weights");

    let body = json!({"context": "My card was charged twice.", "schema": {
        "Which team?": {"type": "choice", "options": ["billing", "technical"]},
        "Urgent?": {"type": "bool"},
        "How bad?": {"type": "scale", "legend": {"1": "mild", "5": "severe"}}}});
    let (status, answers) = server.post("/decide", &body.to_string());
    assert_eq!(status, 200, "{answers}");
    assert_eq!(answers.as_object().unwrap().keys().collect::<Vec<_>>(), ["Which team?", "Urgent?", "How bad?"]);
    // Each answer's keys in the reference's order (docs/decisions.md, `POST /decide`): `type` after the value.
    let keys = |question: &str| answers[question].as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys("Which team?"), ["choice", "confidence", "type", "probabilities"]);
    assert_eq!(keys("Urgent?"), ["noul", "type"]);
    assert_eq!(keys("How bad?"), ["score", "confidence", "type", "legend", "probabilities"]);
    assert_eq!(
        (answers["Urgent?"]["type"].as_str(), answers["How bad?"]["type"].as_str()),
        (Some("noul"), Some("scale"))
    );
    assert_eq!(answers["How bad?"]["legend"], json!({"1": "mild", "5": "severe"}));
    let score = answers["How bad?"]["score"].as_f64().unwrap();
    assert!((1.0..=5.0).contains(&score), "a scale score is on the legend's own scale: {score}");
    assert_eq!(server.post("/decide", "{\"context\": \"x\", \"schema\": {}}"), (200, json!({})));
    let (status, error) =
        server.post("/decide", "{\"context\": \"x\", \"schema\": {\"q\": {\"type\": \"choice\", \"options\": []}}}");
    assert_eq!(status, 422);
    assert!(
        error["detail"].as_str().unwrap().starts_with("schema['q']: \"options\" must be a non-empty list of strings"),
        "{error}"
    );

    // More options than labels: answered over the first 255, as the reference's readout does.
    let options: Vec<String> = (0..300).map(|i| format!("option {i}")).collect();
    let (status, answers) = server.post(
        "/decide",
        &json!({"context": "x", "schema": {"Which?": {"type": "choice", "options": options}}}).to_string(),
    );
    assert_eq!(status, 200, "{answers}");
    let probabilities = answers["Which?"]["probabilities"].as_object().unwrap();
    assert_eq!(probabilities.keys().cloned().collect::<Vec<_>>(), options[..255]);
    let total: f64 = probabilities.values().map(|p| p.as_f64().unwrap()).sum();
    assert!((total - 1.0).abs() < 0.02, "255 probabilities rounded to 4 places: {total}");
}

#[test]
fn stats_count_what_the_server_did() {
    let server = Server::start(DECIDER, &["--max-row-tokens", "120"]);
    let (status, stats) = server.get("/stats");
    assert_eq!(status, 200);
    assert_eq!(
        (stats["requests"].as_u64(), stats["rows"].as_u64(), stats["errors"].as_u64()),
        (Some(0), Some(0), Some(0))
    );
    assert_eq!(
        stats["limits"],
        json!({"max_rows": 1024, "max_row_tokens": 120, "max_request_tokens": 1 << 20, "max_queue_rows": 4096})
    );

    let two = json!({"a": {"type": "noul", "instructions": "A?"}, "b": {"type": "noul", "instructions": "B?"}});
    assert_eq!(server.post("/v1/systemone", &json!({"state": "s", "questions": two}).to_string()).0, 200);
    assert_eq!(server.post("/decide", &json!({"context": "c", "schema": {"Q?": {"type": "bool"}}}).to_string()).0, 200);
    let bad = json!({"q": {"type": "nonsense", "instructions": "?"}});
    assert_eq!(server.post("/v1/systemone", &json!({"state": "s", "questions": bad}).to_string()).0, 422);
    let long = json!({"q": {"type": "noul", "instructions": "why ".repeat(100)}});
    assert_eq!(server.post("/v1/systemone", &json!({"state": "s", "questions": long}).to_string()).0, 413);
    // Requests with nothing to score are requests, not batches (decider-ai's serve.py counts
    // `requests` for them and runs no batch).
    assert_eq!(server.post("/v1/systemone", &json!({"state": "s", "questions": {}}).to_string()).0, 200);
    assert_eq!(server.post("/decide", &json!({"context": "c", "schema": {}}).to_string()).0, 200);

    let (_, stats) = server.get("/stats");
    let count = |name: &str| stats[name].as_u64().unwrap_or_else(|| panic!("{name} in {stats}"));
    assert_eq!(
        [count("requests"), count("batches"), count("decisions"), count("rows"), count("shared_prefix_requests")],
        [4, 2, 3, 3, 1],
        "{stats}"
    );
    assert_eq!(
        [count("errors"), count("rejected_too_large"), count("rejected_overloaded"), count("outstanding_rows")],
        [1, 1, 0, 0]
    );
    assert_eq!(stats["batch_hist"], json!({"1": 1, "2": 1}));

    // A request too malformed to route is answered by the HTTP layer, and counted and logged too.
    let answer = raw_exchange(&server, "NOT AN HTTP REQUEST\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    // More headers than hyper parses (100): a head too large, in a few bytes the server reads whole.
    let headers: String = (0..120).map(|i| format!("x-h{i}: 1\r\n")).collect();
    let answer = raw_exchange(&server, &format!("GET /health HTTP/1.1\r\nhost: x\r\n{headers}\r\n"));
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
    // Counted when hyper ends the connection, which may be just after the client has read the answer.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while server.get("/stats").1["errors"] != 3 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let (_, stats) = server.get("/stats");
    assert_eq!(stats["errors"], 3, "{stats}");
    for status in [400, 431] {
        assert!(
            server.logged(&format!("refused status={status} detail=\"malformed HTTP request: ")),
            "{status} logged:\n{}",
            server.log()
        );
    }
}

#[test]
fn decider_variables_configure_the_server_and_flags_win() {
    let start = |args: &[&str]| {
        let mut command = Command::new(DECIDER);
        command
            .args(["serve", "--addr", "127.0.0.1:0"])
            .args(args)
            .env("DECIDER_MODEL", "demo")
            .env("DECIDER_TEMPERATURE", "0.5");
        Server::spawn(command)
    };
    let from_env = start(&[]);
    let (_, health) = from_env.get("/health");
    assert_eq!((health["model"].as_str(), health["temperature"].as_f64()), (Some("demo"), Some(0.5)), "{health}");
    assert_eq!(health["temperature_by_type"], json!({"choice": 0.5, "noul": 0.5, "score": 0.5}));
    let flag = start(&["--temperature", "2"]);
    assert_eq!(flag.get("/health").1["temperature"], 2.0, "the flag wins over DECIDER_TEMPERATURE");
    let mut refused = start(&["--temperature", "0"]);
    let (status, stderr) = refused.exit();
    assert!(!status.success(), "a temperature of 0 is refused at start");
    assert!(stderr.contains("temperature"), "the error names the temperature: {stderr}");
    // The address too: no flag at all.
    let mut command = Command::new(DECIDER);
    command.arg("serve").env("DECIDER_MODEL", "demo").env("DECIDER_ADDR", "127.0.0.1:0");
    let from_env = Server::spawn(command);
    assert!(!from_env.base.is_empty(), "the server listens on DECIDER_ADDR: {}", from_env.log());
    assert_eq!(from_env.get("/health").0, 200);
}

/// A client that sends its request and then half-closes its side (its FIN) has left, by default
/// as for uvicorn, which serves the reference: it gets no answer. With `--half-close` it gets
/// its answer.
#[test]
fn a_client_that_half_closes_is_answered_only_with_half_close() {
    use std::io::{Read, Write};
    let body = json!({"state": "s", "questions": {"q": {"type": "noul", "instructions": "Up?"}}}).to_string();
    let request = format!(
        "POST /v1/systemone HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let half_close = |server: &Server| {
        let mut stream = std::net::TcpStream::connect(server.address()).unwrap();
        stream.set_read_timeout(Some(std::time::Duration::from_secs(60))).unwrap();
        stream.write_all(request.as_bytes()).unwrap();
        stream.shutdown(std::net::Shutdown::Write).unwrap();
        let mut response = Vec::new();
        let _ = stream.read_to_end(&mut response); // a reset is no answer too
        String::from_utf8_lossy(&response).into_owned()
    };
    let by_default = half_close(&server());
    assert_eq!(by_default, "", "without --half-close the client has left: no answer");
    let answered = half_close(&Server::start(DECIDER, &["--half-close"]));
    assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");
    assert!(answered.contains("\"noul\""), "{answered}");
}

#[test]
fn unknown_routes_and_methods_get_fastapi_json_bodies() {
    let server = server();
    assert_eq!(server.get("/v2/nothing"), (404, json!({"detail": "Not Found"})));
    assert_eq!(server.post("/nothing", "{}"), (404, json!({"detail": "Not Found"})));
    assert_eq!(server.get("/v1/systemone"), (405, json!({"detail": "Method Not Allowed"})));
    assert_eq!(server.post("/health", "{}"), (405, json!({"detail": "Method Not Allowed"})));
    // A client writes its whole body before it reads the answer: the server reads the body
    // first, or the client's write fails with a broken pipe and the answer is lost.
    let large = "x".repeat(3_000_000);
    assert_eq!(server.post("/nothing", &large), (404, json!({"detail": "Not Found"})));
    assert_eq!(server.post("/health", &large), (405, json!({"detail": "Method Not Allowed"})));
}

#[test]
fn size_limits_give_413_and_a_long_state_is_truncated() {
    let server = Server::start(
        DECIDER,
        &[
            "--max-state-tokens",
            "64",
            "--max-row-tokens",
            "120",
            "--max-rows",
            "20",
            "--max-body-bytes",
            "100000",
            "--max-queue-rows",
            "12",
        ],
    );
    let long_state = "word ".repeat(2000);
    let question = json!({"q": {"type": "noul", "instructions": "Is it long?"}});
    let (status, response) =
        server.post("/v1/systemone", &json!({"state": long_state, "questions": question}).to_string());
    assert_eq!(status, 200, "the state is cut to 64 tokens: {response}");
    assert!(response["usage"]["input_tokens"].as_u64().unwrap() < 120);

    let long_question = json!({"q": {"type": "noul", "instructions": "why ".repeat(100)}});
    let (status, response) =
        server.post("/v1/systemone", &json!({"state": "s", "questions": long_question}).to_string());
    assert_eq!(status, 413);
    assert!(response["detail"].as_str().unwrap().starts_with("too many tokens: one row has"), "{response}");

    let many: serde_json::Map<String, Value> =
        (0..3).map(|i| (format!("s{i}"), json!({"type": "score", "instructions": "How?", "criteria": (0..10).map(|l| format!("level {l}")).collect::<Vec<_>>()}))).collect();
    let (status, response) = server.post("/v1/systemone", &json!({"state": "s", "questions": many}).to_string());
    assert_eq!(status, 413, "30 isolated level rows > 20: {response}");
    assert!(
        response["detail"].as_str().unwrap().starts_with("too many questions: the request expands to 30 scoring rows")
    );

    // A request the queue could never hold is too large, not a reason to retry (503).
    let fifteen: serde_json::Map<String, Value> =
        (0..15).map(|i| (format!("q{i}"), json!({"type": "noul", "instructions": "Yes?"}))).collect();
    let (status, response) = server.post("/v1/systemone", &json!({"state": "s", "questions": fifteen}).to_string());
    assert_eq!(status, 413, "15 rows, a queue of 12: {response}");
    assert_eq!(
        response["detail"],
        "too many questions: the request expands to 15 scoring rows, more than the queue holds (12, DECIDER_MAX_QUEUE_ROWS)"
    );

    // `/decide` is held to the same row limit.
    let schema = json!({"Why?": {"type": "choice", "options": (0..40).map(|i| format!("reason number {i}")).collect::<Vec<_>>()}});
    let (status, response) = server.post("/decide", &json!({"context": "s", "schema": schema}).to_string());
    assert_eq!(status, 413, "{response}");
    assert!(response["detail"].as_str().unwrap().starts_with("too many tokens: one row has"), "{response}");
}

/// The server's peak resident memory in bytes.
#[cfg(target_os = "linux")]
pub(crate) fn peak_resident_bytes(server: &Server) -> u64 {
    server.memory_bytes("VmHWM:").expect("a VmHWM line in /proc/<pid>/status")
}

#[cfg(target_os = "linux")]
#[test]
fn a_state_of_32768_tokens_answers_in_bounded_memory() {
    // The longest state the reference accepts, with two question rows continuing it. Attention
    // over it at once would take `heads x 32768 x 32768` f32 scores (8 GiB on the demo model);
    // in segments with an online softmax it stays near the model's own size.
    const LIMIT: u64 = 2 << 30;
    let server = server();
    let state = "word ".repeat(40_000); // over the 32,768-token cap, so the cap applies too
    let questions = json!({
        "long": {"type": "noul", "instructions": "Is the state long?"},
        "kind": {"type": "choice", "instructions": "What is it?", "criteria": {"text": null, "noise": null}}
    });
    let (status, response) = server.post("/v1/systemone", &json!({"state": state, "questions": questions}).to_string());
    assert_eq!(status, 200, "{response}");
    let input_tokens = response["usage"]["input_tokens"].as_u64().unwrap();
    assert!(input_tokens > 32_768, "the state is cut to 32,768 tokens, the questions come after it: {input_tokens}");
    let noul = response["answers"]["long"]["noul"].as_f64().expect("a noul answer");
    assert!((0.0..=1.0).contains(&noul), "{response}");
    let probabilities = response["answers"]["kind"]["probabilities"].as_object().expect("choice probabilities");
    let total: f64 = probabilities.values().map(|p| p.as_f64().unwrap()).sum();
    assert!((total - 1.0).abs() < 1e-3, "{response}");
    let peak = peak_resident_bytes(&server);
    println!("32,768-token state: peak resident {:.0} MiB", peak as f64 / (1 << 20) as f64);
    assert!(peak < LIMIT, "peak resident memory {peak} bytes, the bound is {LIMIT}");
    assert_eq!(server.get("/health").0, 200);
}

#[cfg(target_os = "linux")]
#[test]
fn a_large_state_costs_memory_by_its_token_cap_not_its_size() {
    // 600,000 one-element lists (3 MB of JSON) render to 17 MB of annotated text; tokenized
    // whole, that took gigabytes. Only a prefix proportional to the 512-token cap is rendered and
    // tokenized; what remains is parsing the body.
    const GROWTH_LIMIT: u64 = 512 << 20;
    let server = Server::start(DECIDER, &["--max-state-tokens", "512"]);
    let state: Vec<Value> = (0..600_000).map(|i| json!([i % 10])).collect();
    let body = json!({"state": state, "questions": {"q": {"type": "noul", "instructions": "Is it long?"}}}).to_string();
    let before = peak_resident_bytes(&server);
    let (status, response) = server.post("/v1/systemone", &body);
    assert_eq!(status, 200, "{response}");
    assert!(response["usage"]["input_tokens"].as_u64().unwrap() < 600, "the state is cut to 512 tokens: {response}");
    let growth = peak_resident_bytes(&server).saturating_sub(before);
    println!("{} MB body: peak resident grew by {:.0} MiB", body.len() / 1_000_000, growth as f64 / (1 << 20) as f64);
    assert!(growth < GROWTH_LIMIT, "peak resident memory grew by {growth} bytes for a {} byte body", body.len());
}

#[cfg(target_os = "linux")]
#[test]
fn bodies_are_parsed_within_the_memory_budget() {
    // A list of one-element lists parses to about 100 bytes per byte of JSON. One such 4 MB body
    // is reserved at about 520 MiB (4 MB + 256 bytes per `[` and `,`), so a budget of 1 GiB
    // holds one parse at a time: of eight sent at once, those that find the budget taken get a
    // 503, and memory stays within the budget. Without it, as many parses run at once as the
    // server has threads.
    const BUDGET_MIB: u64 = 1024;
    let server = Server::start(DECIDER, &["--max-memory", "1024", "--max-state-tokens", "64"]);
    let state: Vec<Value> = (0..1_000_000).map(|i| json!([i % 10])).collect();
    let body = json!({"state": state, "questions": {"q": {"type": "noul", "instructions": "Long?"}}}).to_string();
    let before = peak_resident_bytes(&server);
    let results: Vec<(u16, Value)> = std::thread::scope(|scope| {
        let clients: Vec<_> = (0..8).map(|_| scope.spawn(|| server.post("/v1/systemone", &body))).collect();
        clients.into_iter().map(|c| c.join().unwrap()).collect()
    });
    let growth = peak_resident_bytes(&server).saturating_sub(before);
    let answered = results.iter().filter(|(s, _)| *s == 200).count();
    for (status, response) in &results {
        assert!(*status == 200 || *status == 503, "{status}: {response}");
        if *status == 503 {
            assert!(
                response["detail"].as_str().unwrap().starts_with("server busy: requests in flight hold"),
                "{response}"
            );
        }
    }
    println!("8 bodies of 4 MB at once: {answered} answered, the rest 503; peak resident grew by {} MiB", growth >> 20);
    assert!((1..8).contains(&answered), "{answered} of 8 answered");
    assert!(
        growth < BUDGET_MIB << 20,
        "peak resident memory grew by {} MiB, the budget is {BUDGET_MIB} MiB",
        growth >> 20
    );

    // A body that could never fit is a 413 that says so; the server lives on.
    let tight = Server::start(DECIDER, &["--max-memory", "256"]);
    let (status, response) = tight.post("/v1/systemone", &body);
    assert_eq!(status, 413, "{response}");
    let detail = response["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("request too large for memory: its body and parsed JSON needs")
            && detail.ends_with("the limit is 256 MiB (--max-memory, DECIDER_MAX_MEMORY)"),
        "{detail}"
    );
    // (Its 32,768-token prefix is tokenized within the budget too: 256 KiB of text, reserved at
    // 512 bytes per byte.)
    let text = json!({"state": "word ".repeat(600_000), "questions": {"q": {"type": "noul", "instructions": "Long?"}}})
        .to_string();
    assert_eq!(tight.post("/v1/systemone", &text).0, 200, "3 MB of text parses to its own size and fits");
    // The same lists in UTF-16, which Python's json.loads reads too, are held to the budget as the
    // text they decode to: the bytes of a "Ģ" (22 01) do not pass for a quote.
    let utf16: Vec<u8> = body.replacen('[', "[\"Ģ\", ", 1).encode_utf16().flat_map(u16::to_le_bytes).collect();
    let (status, response) = read(
        ureq::post(&format!("{}/v1/systemone", tight.base)).set("content-type", "application/json").send_bytes(&utf16),
    );
    assert_eq!(status, 413, "{response}");
    let (_, stats) = tight.get("/stats");
    assert_eq!(
        (stats["rejected_too_large"].as_u64(), stats["memory_held_bytes"].as_u64()),
        (Some(2), Some(0)),
        "{stats}"
    );
}

/// A small body can plan to many rows (every question repeats the state): the plan's token ids
/// are held in the memory budget while the request waits for the model, with the model's
/// working memory for them, and released after.
#[test]
fn queued_rows_and_their_working_memory_are_held_in_the_memory_budget() {
    let questions: serde_json::Map<String, Value> = (0..100)
        .map(|i| (format!("q{i}"), json!({"type": "noul", "instructions": format!("Is fact {i} true?")})))
        .collect();
    // A digit is a token: 3,000 tokens in 3,000 bytes, little to tokenize (1.5 MiB reserved).
    let body = json!({"state": "7".repeat(3000), "questions": questions}).to_string();
    assert!(body.len() < 64 << 10, "a body of {} bytes", body.len());
    // 100 rows of over 3,000 tokens: over 1.2 MB of token ids.
    let small = Server::start(DECIDER, &["--max-memory", "4"]);
    let (status, response) = small.post("/v1/systemone", &body);
    assert_eq!(status, 413, "{response}");
    let detail = response["detail"].as_str().unwrap();
    let prefix = "request too large for memory: the plan of its rows and questions (2 MiB) with the model's working memory for them (";
    assert!(
        detail.starts_with(prefix) && detail.ends_with("the limit is 4 MiB (--max-memory, DECIDER_MAX_MEMORY)"),
        "{detail}"
    );
    let needed: String = detail.split(" needs ").nth(1).unwrap().chars().take_while(char::is_ascii_digit).collect();
    assert_eq!(small.get("/stats").1["memory_held_bytes"], 0);
    drop(small);

    // What it said it needs is enough.
    let roomy = Server::start(DECIDER, &["--max-memory", &needed]);
    let (status, response) = roomy.post("/v1/systemone", &body);
    assert_eq!(status, 200, "{response}");
    assert_eq!(response["answers"].as_object().unwrap().len(), 100);
    assert_eq!(roomy.get("/stats").1["memory_held_bytes"], 0, "released once answered");
}

/// The model's working memory grows with the state (its cache, attention's scores over it): a
/// 32,768-token state that needs more than the budget is refused before it runs, and a short
/// one is answered by the same server.
#[test]
fn a_request_whose_working_memory_exceeds_the_budget_is_refused_before_it_runs() {
    // A digit is a token: tokenizing the 40 KB state is reserved at 20 MiB, within the budget;
    // the model's working memory for its 32,768 tokens is not.
    let server = Server::start(DECIDER, &["--max-memory", "32"]);
    let question = json!({"q": {"type": "noul", "instructions": "Long?"}});
    let (status, response) =
        server.post("/v1/systemone", &json!({"state": "7".repeat(40_000), "questions": question}).to_string());
    assert_eq!(status, 413, "{response}");
    let detail = response["detail"].as_str().unwrap();
    assert!(
        detail.contains("with the model's working memory for them (")
            && detail.ends_with("the limit is 32 MiB (--max-memory, DECIDER_MAX_MEMORY)"),
        "{detail}"
    );
    assert!(server.logged("refused status=413 detail="), "logged:\n{}", server.log());
    let (status, response) =
        server.post("/v1/systemone", &json!({"state": "word ".repeat(100), "questions": question}).to_string());
    assert_eq!(status, 200, "{response}");
    let (_, stats) = server.get("/stats");
    assert_eq!(
        (stats["rejected_too_large"].as_u64(), stats["memory_held_bytes"].as_u64()),
        (Some(1), Some(0)),
        "{stats}"
    );
}

#[test]
fn a_body_over_the_limit_gets_a_413_the_client_can_read() {
    let server = Server::start(DECIDER, &["--max-body-bytes", "100000"]);
    let url = format!("{}/v1/systemone", server.base);
    let oversized = "x".repeat(3_000_000);
    // The client writes the whole body before it reads the answer: the server must read
    // (and drop) the rest, or the client's write fails with a broken pipe.
    for _ in 0..5 {
        let (status, response) = read(ureq::post(&url).send_string(&oversized));
        assert_eq!(status, 413, "a declared length over --max-body-bytes: {response}");
        assert!(
            response["detail"].as_str().unwrap().starts_with("request body too large: the limit is 100000 bytes"),
            "{response}"
        );
    }
    // Chunked: no length is declared, the limit is found while reading.
    let (status, _) = read(ureq::post(&url).send(std::io::Cursor::new(oversized.clone())));
    assert_eq!(status, 413, "a chunked body over --max-body-bytes");
    // A client waiting for `100 Continue` gets the 413 without sending its body.
    let response = raw_exchange(
        &server,
        "POST /v1/systemone HTTP/1.1\r\nhost: x\r\ncontent-length: 3000000\r\nexpect: 100-continue\r\n\r\n",
    );
    assert!(response.starts_with("HTTP/1.1 413"), "{response}");
    // The server lives on.
    assert_eq!(server.get("/health").0, 200);
}

#[test]
fn clients_that_leave_free_their_place_and_their_work_is_dropped() {
    // Each request's state takes the demo model a while; the clients send it, wait until their
    // requests are queued, and hang up. Their queued work must not run: the model is free for
    // the next client at once.
    const LEAVERS: u64 = 16;
    let server = Server::start(DECIDER, &["--max-queue-rows", "64"]);
    let body = json!({"state": "word ".repeat(3000), "questions": {"q": {"type": "noul", "instructions": "Long?"}}})
        .to_string();
    let request = format!(
        "POST /v1/systemone HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let clients: Vec<_> = (0..LEAVERS)
        .map(|_| {
            use std::io::Write;
            let mut stream = std::net::TcpStream::connect(server.address()).expect("connect");
            stream.write_all(request.as_bytes()).unwrap();
            stream
        })
        .collect();
    let queued = wait_for_stats(&server, |s| s["outstanding_rows"].as_u64() >= Some(LEAVERS / 2));
    drop(clients);
    let stats = wait_for_stats(&server, |s| {
        s["abandoned"].as_u64().unwrap() + s["requests"].as_u64().unwrap() == LEAVERS
            && s["outstanding_rows"].as_u64() == Some(0)
    });
    let scored_after = stats["rows"].as_u64().unwrap() - queued["rows"].as_u64().unwrap();
    let runs_after = stats["batches"].as_u64().unwrap() - queued["batches"].as_u64().unwrap();
    assert!(
        scored_after < LEAVERS / 2,
        "most of the queued work was dropped unrun: {scored_after} rows scored; {stats}"
    );
    assert!(
        runs_after <= 2,
        "at most the run under way when the clients left (and one the server began before it saw them go): {runs_after} runs; {stats}"
    );
    let (status, response) = server.post(
        "/v1/systemone",
        &json!({"state": "s", "questions": {"q": {"type": "noul", "instructions": "Up?"}}}).to_string(),
    );
    assert_eq!(status, 200, "{response}");
}

/// Requests that queue while the model is busy run together, their rows in shared batches, and
/// each is answered as it is alone.
#[test]
fn requests_queued_together_are_scored_together_and_answered_as_alone() {
    let server = server();
    // A long state keeps the model busy while eight one-row requests queue behind it.
    let long = json!({"state": "word ".repeat(30_000), "questions": {"q": {"type": "noul", "instructions": "Long?"}}})
        .to_string();
    let requests: Vec<String> = (0..8)
        .map(|i| {
            let state = json!({"ticket": i, "text": "the printer is jammed again ".repeat(1 + 3 * i)});
            let question = match i % 3 {
                0 => json!({"type": "noul", "instructions": "Urgent?"}),
                1 => json!({"type": "choice", "instructions": "Team?", "criteria": ["facilities", "it", "hr"]}),
                _ => {
                    json!({"type": "score", "instructions": "How bad?", "criteria": ["0: fine", "1: bad", "2: awful"]})
                }
            };
            json!({"state": state, "questions": {"q": question}, "independent": false}).to_string()
        })
        .collect();
    let together: Vec<(u16, Value)> = std::thread::scope(|scope| {
        let busy = scope.spawn(|| server.post("/v1/systemone", &long));
        wait_for_stats(&server, |s| s["outstanding_rows"].as_u64() == Some(1));
        let clients: Vec<_> = requests.iter().map(|body| scope.spawn(|| server.post("/v1/systemone", body))).collect();
        let queued =
            wait_for_stats(&server, |s| s["outstanding_rows"].as_u64() == Some(9) || s["requests"].as_u64() > Some(0));
        assert_eq!(queued["requests"], 0, "the eight queued before the long request was answered: {queued}");
        let answers = clients.into_iter().map(|c| c.join().expect("client")).collect();
        assert_eq!(busy.join().expect("client").0, 200);
        answers
    });
    let (_, stats) = server.get("/stats");
    assert_eq!(stats["batch_hist"], json!({"1": 1, "8": 1}), "the long request, then the eight together: {stats}");
    for (i, (body, (status, answer))) in requests.iter().zip(&together).enumerate() {
        assert_eq!(*status, 200, "{answer}");
        let (status, alone) = server.post("/v1/systemone", body);
        assert_eq!(status, 200, "{alone}");
        // One unit of the wire's 4-digit rounding.
        assert_close(answer, &alone, 1e-4, &format!("request {i}"));
    }
    let (_, stats) = server.get("/stats");
    assert_eq!(stats["batch_hist"], json!({"1": 9, "8": 1}), "each alone: {stats}");
}

/// `a` equals `b` with numbers within `tolerance`.
pub(crate) fn assert_close(a: &Value, b: &Value, tolerance: f64, at: &str) {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            assert!((x - y).abs() <= tolerance, "{at}: {x} vs {y}");
        }
        (Value::Object(x), Value::Object(y)) => {
            assert_eq!(x.keys().collect::<Vec<_>>(), y.keys().collect::<Vec<_>>(), "{at}");
            for (key, value) in x {
                assert_close(value, &y[key], tolerance, &format!("{at}.{key}"));
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            assert_eq!(x.len(), y.len(), "{at}");
            for (k, (x, y)) in x.iter().zip(y).enumerate() {
                assert_close(x, y, tolerance, &format!("{at}[{k}]"));
            }
        }
        _ => assert_eq!(a, b, "{at}"),
    }
}

/// `/stats` once `done` holds of it; panics after a minute.
pub(crate) fn wait_for_stats(server: &Server, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (_, stats) = server.get("/stats");
        if done(&stats) {
            return stats;
        }
        assert!(std::time::Instant::now() < deadline, "/stats never reached the expected state: {stats}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn idle_and_slow_clients_are_closed_in_time_and_do_not_starve_others() {
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};
    let server = Server::start(DECIDER, &["--header-timeout", "2", "--body-timeout", "2"]);
    let address = server.address().to_string();
    // 300 connections that never say anything.
    let idle: Vec<_> = (0..300).map(|_| std::net::TcpStream::connect(&address).expect("connect")).collect();
    // One that sends headers promising a body, then a tenth of it.
    let mut slow = std::net::TcpStream::connect(&address).unwrap();
    slow.write_all(b"POST /v1/systemone HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"state\": ").unwrap();
    // Others are answered meanwhile.
    let (status, _) = server.post(
        "/v1/systemone",
        &json!({"state": "s", "questions": {"q": {"type": "noul", "instructions": "Up?"}}}).to_string(),
    );
    assert_eq!(status, 200);
    // The slow body gets a 408 once its time is up.
    slow.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let start = Instant::now();
    let mut answer = String::new();
    let _ = slow.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("request body timeout: the body did not arrive within 2 s"), "{answer}");
    assert!(start.elapsed() < Duration::from_secs(10), "the 408 came after {:?}", start.elapsed());
    assert_eq!(server.get("/stats").1["timed_out"], 1, "the 408 is counted");
    assert!(server.logged("refused status=408 detail="), "and logged:\n{}", server.log());
    // The idle connections are closed by the header timeout.
    for mut stream in idle {
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let read = stream.read(&mut [0u8; 1]);
        let timed_out = read
            .as_ref()
            .is_err_and(|e| matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut));
        assert!(!timed_out && !matches!(read, Ok(n) if n > 0), "an idle connection is still open: {read:?}");
    }
    assert!(start.elapsed() < Duration::from_secs(15), "idle connections closed after {:?}", start.elapsed());
}

#[test]
fn a_client_that_stops_reading_its_answers_is_closed_after_the_write_timeout() {
    use std::io::{Read, Write};
    use std::time::Duration;
    let server = Server::start(DECIDER, &["--write-timeout", "2"]);
    let mut stream = std::net::TcpStream::connect(server.address()).unwrap();
    // 100,000 pipelined requests: their answers (30 MB) are far more than the sockets buffer, and
    // the client reads none of them for 6 s.
    let (batches, per_batch) = (100, 1000);
    let requests = "GET /health HTTP/1.1\r\nhost: x\r\n\r\n".repeat(per_batch);
    let mut writer = stream.try_clone().unwrap();
    let writing =
        std::thread::spawn(move || (0..batches).take_while(|_| writer.write_all(requests.as_bytes()).is_ok()).count());
    std::thread::sleep(Duration::from_secs(6));
    // Others are answered meanwhile.
    assert_eq!(server.get("/health").0, 200);
    // The server gave up on the stalled writes: the connection ends after the answers it had
    // written, where it would otherwise answer all and wait for more.
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut answers = Vec::new();
    let read = stream.read_to_end(&mut answers);
    let timed_out =
        read.as_ref().is_err_and(|e| matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut));
    let answered = String::from_utf8_lossy(&answers).matches("HTTP/1.1 200").count();
    assert!(!timed_out, "the connection is still open after {answered} answers: {read:?}");
    assert!(answered < batches * per_batch, "every request was answered");
    writing.join().unwrap();
}

#[cfg(unix)]
#[test]
fn sigterm_finishes_in_bounded_time_while_a_client_holds_half_a_request() {
    use std::io::Write;
    use std::time::{Duration, Instant};
    let mut server = Server::start(DECIDER, &["--body-timeout", "600", "--shutdown-timeout", "2"]);
    let mut half = std::net::TcpStream::connect(server.address()).unwrap();
    half.write_all(b"POST /v1/systemone HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{").unwrap();
    assert_eq!(server.get("/health").0, 200);
    let start = Instant::now();
    assert!(Command::new("kill").args(["-TERM", &server.child.id().to_string()]).status().unwrap().success());
    let exit = loop {
        if let Some(exit) = server.child.try_wait().unwrap() {
            break exit;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "still running {:?} after SIGTERM", start.elapsed());
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(exit.success(), "exit status {exit}");
    drop(half);
}

/// Writes `request` on a fresh connection and returns what the server answers.
pub(crate) fn raw_exchange(server: &Server, request: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(server.address()).expect("connect");
    stream.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut head = [0u8; 512];
    let n = stream.read(&mut head).expect("an answer before the body is sent");
    String::from_utf8_lossy(&head[..n]).into_owned()
}

/// 8 clients sending at once, `per_client` requests each.
fn load(server: &Server, per_client: usize) -> Vec<(u16, Value)> {
    let body = json!({"state": "The printer on floor 3 is jammed again.", "questions": {
        "team": {"type": "choice", "instructions": "Team?", "criteria": ["facilities", "it", "hr"]},
        "urgent": {"type": "noul", "instructions": "Urgent?"}}})
    .to_string();
    std::thread::scope(|scope| {
        let clients: Vec<_> = (0..8)
            .map(|_| scope.spawn(|| (0..per_client).map(|_| server.post("/v1/systemone", &body)).collect::<Vec<_>>()))
            .collect();
        clients.into_iter().flat_map(|c| c.join().expect("client thread")).collect()
    })
}

#[test]
fn concurrent_load_is_answered_or_refused_with_503() {
    // Within the queue bound every request is answered, all alike.
    let roomy = server();
    let results = load(&roomy, 15);
    assert!(results.iter().all(|(status, _)| *status == 200), "{:?}", results.iter().find(|(s, _)| *s != 200));
    assert!(results.windows(2).all(|w| w[0].1 == w[1].1), "every answer is the same");
    drop(roomy);

    // With room for 4 requests (2 rows each), the rest is refused with 503 and the server lives on.
    let tight = Server::start(DECIDER, &["--max-queue-rows", "8"]);
    let results = load(&tight, 25);
    assert_eq!(results.len(), 200);
    let answered = results.iter().filter(|(s, _)| *s == 200).count();
    let refused: Vec<_> = results.iter().filter(|(s, _)| *s == 503).collect();
    assert_eq!(
        answered + refused.len(),
        200,
        "only 200 and 503: {:?}",
        results.iter().find(|(s, _)| *s != 200 && *s != 503)
    );
    assert!(answered >= 4, "{answered} answered");
    for (_, r) in &refused {
        assert!(r["detail"].as_str().unwrap().starts_with("server busy: "), "{r}");
    }
    println!(
        "load: 120 of 120 answered with the default queue; {answered} answered, {} refused with 503 with a queue of 8 rows",
        refused.len()
    );
    assert_eq!(tight.get("/health").0, 200, "the server is still up");
}

#[cfg(unix)]
#[test]
fn sigterm_shuts_down_gracefully() {
    let sigterm = |server: &Server| {
        assert!(Command::new("kill").args(["-TERM", &server.child.id().to_string()]).status().unwrap().success())
    };
    let mut server = Server::start(DECIDER, &[]);
    assert_eq!(server.get("/health").0, 200);
    sigterm(&server);
    let exit = server.child.wait().unwrap();
    assert!(exit.success(), "exit status {exit}");
    // At once after the start-up line: the handlers are already in place.
    let mut server = Server::start(DECIDER, &[]);
    sigterm(&server);
    let (exit, log) = server.exit();
    assert!(exit.success() && log.contains("INFO shut down"), "exit status {exit}; log:\n{log}");
}

#[test]
fn the_address_may_name_a_host() {
    let mut command = Command::new(DECIDER);
    command.args(["serve", "--model", "demo", "--addr", "localhost:0"]);
    let server = Server::spawn(command);
    assert!(!server.base.is_empty(), "the server started: {}", server.log());
    assert_eq!(server.get("/health").0, 200);
}
