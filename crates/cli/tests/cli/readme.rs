//! The README's commands cannot go stale: every line of its `sh` blocks is either run here (the
//! `decider` commands, with this build's binary, and the server block: `decider serve ... &`, its
//! `curl` and `kill %1`), run by CI (`.ci/run`), or listed below with why it is not run in a test.
//! A command added to the README without one of the three fails.

use std::path::Path;
use std::process::{Child, Command, Stdio};

const DECIDER: &str = env!("CARGO_BIN_EXE_decider");

/// The lines `.ci/run` runs itself.
const RUN_BY_CI: [&str; 4] = ["cargo test-all", "cargo test-docs", "cargo clippy-all", "cargo fmt --all -- --check"];

/// Lines not run by a test, and why.
const NOT_RUN: [(&str, &str); 6] = [
    ("cargo test --workspace", "the ndarray-only part of `cargo test-all`, which CI runs"),
    (
        "cargo install --path crates/cli --locked",
        "a release build of the whole tree (about 10 minutes on 2 cores); the binary it builds is the one tested here",
    ),
    ("cargo xtask bench", "the criterion benches run for tens of minutes, alone on the machine"),
    ("perf/run.sh", "the side-by-side harness needs llama.cpp and transformers and runs for tens of minutes"),
    ("python3 perf/summarize.py", "tabulates what perf/run.sh measured"),
    ("docker ", "no container engine on the CI machine (docs/deploy.md)"),
];

/// How the README calls the binary: these prefixes become this build's `decider`.
const BINARY_PREFIXES: [&str; 3] = [
    "cargo run --release -p decider-cli --features candle,wgpu --",
    "cargo run --release -p decider-cli --",
    "decider ",
];

/// The address the README serves on; the test serves on a free port instead.
const README_ADDR: &str = "127.0.0.1:8000";

/// The README's server, started in the background (`... &`) and stopped by its `kill %1`, or when
/// the test ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The commands of the README's `sh` blocks: continuation lines joined, comments dropped.
fn readme_commands(readme: &str) -> Vec<String> {
    let mut commands = Vec::new();
    let mut in_sh = false;
    let mut pending = String::new();
    for line in readme.lines() {
        if line.starts_with("```") {
            in_sh = line == "```sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(start) => pending.push_str(start),
            None => {
                pending.push_str(line);
                // A trailing comment: `  # ...` after the command (no README command has a `#` of its own).
                let command = pending.split("  #").next().unwrap().trim().to_string();
                commands.push(command);
                pending.clear();
            }
        }
    }
    commands
}

#[test]
fn every_readme_command_is_run_by_a_test_or_by_ci() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
    let commands = readme_commands(&readme);
    assert!(commands.len() >= 10, "{commands:?}");
    // Run where the README's relative paths resolve, without writing into the repository.
    let work = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(root.join("tests").canonicalize().unwrap(), work.path().join("tests")).unwrap();
    let built_in = String::from_utf8(Command::new(DECIDER).arg("backends").output().unwrap().stdout).unwrap();
    let addr = {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        free.local_addr().unwrap().to_string()
    };
    let bash = |line: &str| {
        let mut command = Command::new("bash");
        command.args(["-c", line]).env("DECIDER", DECIDER).current_dir(work.path());
        command
    };
    let mut server: Option<Server> = None;
    let mut ran = 0;
    for command in &commands {
        let command = &command.replace(README_ADDR, &addr);
        if command.starts_with("curl ") {
            assert!(server.is_some(), "README's `{command}` runs without a server started before it");
            let out = bash(command).output().unwrap();
            assert!(out.status.success(), "`{command}` failed: {}", String::from_utf8_lossy(&out.stderr));
            let response: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
                panic!("`{command}` printed no JSON ({e}): {}", String::from_utf8_lossy(&out.stdout))
            });
            let noul = response["answers"]["urgent"]["noul"].as_f64();
            assert!(noul.is_some_and(|p| (0.0..=1.0).contains(&p)), "`{command}` answered {response}");
            ran += 1;
            continue;
        }
        if command == "kill %1" {
            drop(server.take().expect("README's `kill %1` stops the server it started"));
            continue;
        }
        if RUN_BY_CI.contains(&command.as_str()) {
            assert!(
                ci.lines().any(|l| l.contains(command.as_str())),
                "README says CI runs `{command}`, but .ci/run does not"
            );
            continue;
        }
        if NOT_RUN.iter().any(|(prefix, _)| command.starts_with(prefix)) {
            continue;
        }
        let prefix = BINARY_PREFIXES
            .iter()
            .find(|prefix| command.starts_with(*prefix))
            .unwrap_or_else(|| panic!("README command `{command}` is neither run here, by CI, nor listed in NOT_RUN"));
        let line = format!("\"$DECIDER\" {}", &command[prefix.len()..].trim());
        if let Some(background) = line.strip_suffix(" &") {
            let child =
                bash(&format!("exec {background}")).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
            server = Some(Server(child));
            ran += 1;
            continue;
        }
        let out = bash(&line).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let backend = command.split("--backend ").nth(1).and_then(|rest| rest.split_whitespace().next());
        match backend {
            // A backend this build lacks: the README's own build line adds it; here the refusal says how.
            Some(name) if !built_in.lines().any(|b| b == name) => {
                assert!(!out.status.success() && stderr.contains("--features"), "`{command}`: {stderr}");
            }
            _ => assert!(out.status.success(), "README command `{command}` failed: {stderr}"),
        }
        ran += 1;
    }
    assert!(server.is_none(), "README starts a server it does not stop");
    assert!(ran >= 6, "the README's decider commands ran: {ran}");
}
