//! The repository's `Dockerfile`, built and run by a container engine (Docker or Podman): the
//! image starts `decider serve`, runs it as a non-root user, reports healthy through its
//! `HEALTHCHECK` once the model is loaded, and answers `/v1/systemone` on its published port.
//!
//! A build compiles the CLI in release from scratch (about a quarter of an hour on two cores), so
//! the test runs only with `DECIDER_CONTAINER_TESTS=1`, on a machine whose engine runs containers
//! and has (or can pull) the base images; `docs/deploy.md` says where it was last run.
//! `DECIDER_CONTAINER_ENGINE` picks the engine (else the first of `docker`, `podman` that
//! answers), `DECIDER_CONTAINER_BUILD_ARGS` adds `--build-arg`s (`RUST_VERSION=1.95`).

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// `engine args…`, which must succeed: its standard output.
fn run(engine: &str, args: &[&str]) -> String {
    let output = Command::new(engine).args(args).output().unwrap_or_else(|e| panic!("{engine}: {e}"));
    assert!(output.status.success(), "{engine} {}: {}", args.join(" "), text(&output, true));
    text(&output, false)
}

fn text(output: &Output, stderr: bool) -> String {
    String::from_utf8_lossy(if stderr { &output.stderr } else { &output.stdout }).trim().to_owned()
}

/// The engine to use: the one named, else the first that answers `info`.
fn engine() -> String {
    if let Ok(engine) = std::env::var("DECIDER_CONTAINER_ENGINE") {
        return engine;
    }
    ["docker", "podman"]
        .into_iter()
        .find(|engine| Command::new(engine).arg("info").output().is_ok_and(|o| o.status.success()))
        .expect("DECIDER_CONTAINER_TESTS=1, but neither docker nor podman runs here")
        .to_owned()
}

/// Removes the container when the test ends, passed or not.
struct Container<'a> {
    engine: &'a str,
    name: String,
}

impl Drop for Container<'_> {
    fn drop(&mut self) {
        let _ = Command::new(self.engine).args(["rm", "-f", &self.name]).output();
    }
}

#[test]
fn the_image_serves_as_a_non_root_user_and_reports_its_health() {
    if std::env::var_os("DECIDER_CONTAINER_TESTS").is_none_or(|value| value != "1") {
        println!("the container image is built only with DECIDER_CONTAINER_TESTS=1");
        return;
    }
    let engine = engine();
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let tag = "decider-test:latest";
    let mut build = vec!["build".to_owned(), "-t".into(), tag.into()];
    if engine.ends_with("podman") {
        // Podman writes OCI images by default, which have no HEALTHCHECK.
        build.extend(["--format".into(), "docker".into()]);
    }
    for arg in std::env::var("DECIDER_CONTAINER_BUILD_ARGS").unwrap_or_default().split_whitespace() {
        build.extend(["--build-arg".into(), arg.to_owned()]);
    }
    build.push(root.into());
    let started = Instant::now();
    run(&engine, &build.iter().map(String::as_str).collect::<Vec<_>>());
    println!("{engine} build: {:.0} s", started.elapsed().as_secs_f64());

    // The demo model (random weights, no files) in place of a mounted folder; every other setting
    // is the image's own.
    let name = format!("decider-test-{}", std::process::id());
    let container = Container { engine: &engine, name: name.clone() };
    run(&engine, &["run", "-d", "--name", &name, "-p", "127.0.0.1::8000", "-e", "DECIDER_MODEL=demo", tag]);
    let port = run(&engine, &["port", &name, "8000"]);
    let address = port.lines().next().expect("a published port").replace("0.0.0.0", "127.0.0.1");
    let base = format!("http://{address}");

    let deadline = Instant::now() + Duration::from_secs(120);
    while !ureq::get(&format!("{base}/health")).call().is_ok_and(|r| r.status() == 200) {
        assert!(Instant::now() < deadline, "no healthy /health in two minutes: {}", run(&engine, &["logs", &name]));
        std::thread::sleep(Duration::from_millis(500));
    }
    let body = json!({"model": "decider", "state": {"ticket": "Charged twice"}, "questions": {
        "team": {"type": "choice", "instructions": "Which team?", "options": ["billing", "technical", "sales"]}
    }});
    let response: Value = ureq::post(&format!("{base}/v1/systemone")).send_json(body).unwrap().into_json().unwrap();
    let probabilities = response["answers"]["team"]["probabilities"].as_object().expect("probabilities");
    let sum: f64 = probabilities.values().map(|p| p.as_f64().unwrap()).sum();
    assert!(probabilities.len() == 3 && (sum - 1.0).abs() < 1e-6, "{response}");

    assert_eq!(run(&engine, &["exec", &name, "id", "-u"]), "10001", "the server runs as the image's own user");
    // The image's HEALTHCHECK, run now rather than at its interval.
    match engine.ends_with("podman") {
        true => {
            run(&engine, &["healthcheck", "run", &name]);
        }
        false => {
            let deadline = Instant::now() + Duration::from_secs(60);
            let health = || run(&engine, &["inspect", "--format", "{{.State.Health.Status}}", &name]);
            while health() != "healthy" {
                assert!(Instant::now() < deadline, "the HEALTHCHECK never passed: {}", health());
                std::thread::sleep(Duration::from_secs(1));
            }
        }
    }
    let size = run(&engine, &["image", "inspect", "--format", "{{.Size}}", tag]);
    println!("{engine}: image {tag} of {size} bytes answered as user 10001 and passed its HEALTHCHECK");
    drop(container);
}
