//! A real `decider serve` process on loopback, for the server tests: started on a free port,
//! spoken to over HTTP, its stderr kept for the log checks, killed when dropped.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use serde_json::Value;

pub struct Server {
    pub child: Child,
    /// `http://127.0.0.1:PORT`, from the start-up line (empty if the server did not start).
    pub base: String,
    log: Arc<Mutex<String>>,
    log_reader: Option<JoinHandle<()>>,
}

impl Server {
    /// `decider serve --model demo --addr 127.0.0.1:0 EXTRA…` of the `decider` binary at `binary`.
    pub fn start(binary: &str, extra: &[&str]) -> Server {
        let mut command = Command::new(binary);
        command.args(["serve", "--model", "demo", "--addr", "127.0.0.1:0"]).args(extra);
        Self::spawn(command)
    }

    /// Starts `command` (a `decider serve` on port 0) and waits for its start-up line.
    pub fn spawn(mut command: Command) -> Server {
        let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start decider serve");
        let log = Arc::new(Mutex::new(String::new()));
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let sink = log.clone();
        let log_reader = std::thread::spawn(move || {
            let mut line = String::new();
            while stderr.read_line(&mut line).is_ok_and(|n| n > 0) {
                eprint!("{line}");
                sink.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let banner = lines.next().map(|l| l.expect("utf-8"));
        // Keep reading stdout so the server never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        let base = banner
            .and_then(|b| b.split_whitespace().find(|w| w.starts_with("http://")).map(String::from))
            .unwrap_or_default();
        Server { child, base, log, log_reader: Some(log_reader) }
    }

    /// `host:port`.
    pub fn address(&self) -> &str {
        self.base.trim_start_matches("http://")
    }

    pub fn post(&self, path: &str, body: &str) -> (u16, Value) {
        read(ureq::post(&format!("{}{path}", self.base)).set("content-type", "application/json").send_string(body))
    }

    pub fn get(&self, path: &str) -> (u16, Value) {
        read(ureq::get(&format!("{}{path}", self.base)).call())
    }

    /// A memory figure of the server process in bytes ([`crate::process_memory_bytes`]).
    pub fn memory_bytes(&self, field: &str) -> Option<u64> {
        crate::process_memory_bytes(&self.child.id().to_string(), field)
    }

    /// Resets the server's peak resident memory (`VmHWM`) to its resident memory now (Linux:
    /// `/proc/<pid>/clear_refs`), so that a peak read next covers only what ran since.
    pub fn reset_peak_resident(&self) -> std::io::Result<()> {
        std::fs::write(format!("/proc/{}/clear_refs", self.child.id()), "5")
    }

    /// What the server wrote to stderr so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Whether the server's stderr holds `line` within 10 s: a thread collects what the server
    /// writes, so a line written just before an answer may reach the log just after it.
    pub fn logged(&self, line: &str) -> bool {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !self.log().contains(line) {
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        true
    }

    /// Waits for the process to exit; its status and all it wrote to stderr.
    pub fn exit(&mut self) -> (ExitStatus, String) {
        let status = self.child.wait().expect("the server exits");
        if let Some(reader) = self.log_reader.take() {
            let _ = reader.join();
        }
        (status, self.log())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The status and JSON body of a response; a 503 must say when to retry.
pub fn read(response: Result<ureq::Response, ureq::Error>) -> (u16, Value) {
    let response = match response {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("transport error: {e}"),
    };
    let status = response.status();
    if status == 503 {
        assert_eq!(response.header("retry-after"), Some("1"), "a 503 says when to retry");
    }
    let mut text = String::new();
    response.into_reader().read_to_string(&mut text).expect("body");
    (status, parse_deep(&text).unwrap_or_else(|_| panic!("non-JSON body ({status}): {text}")))
}

/// JSON nested deeper than serde_json's default limit of 128: a 422 echoes a body nested as deep
/// as the server reads (`decider::python_json::MAX_DEPTH`).
fn parse_deep(text: &str) -> serde_json::Result<Value> {
    use serde::Deserialize;
    let mut reader = serde_json::Deserializer::from_str(text);
    reader.disable_recursion_limit();
    let value = Value::deserialize(&mut reader)?;
    reader.end()?;
    Ok(value)
}
