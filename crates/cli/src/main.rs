//! `decider`: run Qwen3.5 decider models on any burn backend compiled into this build.

mod backends;
mod decide;
mod forward;
mod info;
mod prompt;
mod quantize;

use clap::{CommandFactory, Parser, Subcommand};
use decider_cli::backend::{self, BackendName};
use decider_cli::serve;

#[derive(Parser)]
#[command(name = "decider", version, about = "Run the decider decision models on burn (ndarray, candle, wgpu)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Threads that compute (the CPU kernels and matrix products; one per CPU by default).
    #[arg(long, global = true, env = "DECIDER_THREADS")]
    threads: Option<std::num::NonZeroUsize>,
    /// What the log on stderr shows: error, warn, info (the default), debug, trace, or
    /// RUST_LOG-style directives. Without it, RUST_LOG is read.
    #[arg(long, global = true, env = "DECIDER_LOG_LEVEL")]
    log_level: Option<String>,
    /// The widest instructions this project's CPU kernels may use (by default all this CPU has); a
    /// narrower family runs the fallbacks, to compare them (`matrixmultiply`'s sgemm picks its own).
    #[arg(long, global = true, env = "DECIDER_CPU_KERNELS", value_parser = instructions_parser())]
    cpu_kernels: Option<decider_ops::Instructions>,
}

/// `--cpu-kernels`' parser: the names of [`decider_ops::Instructions::ALL`].
fn instructions_parser() -> impl clap::builder::TypedValueParser<Value = decider_ops::Instructions> {
    use clap::builder::TypedValueParser;
    let names = decider_ops::Instructions::ALL.map(|(name, _)| name);
    clap::builder::PossibleValuesParser::new(names).map(|name| {
        decider_ops::Instructions::ALL
            .into_iter()
            .find(|(n, _)| *n == name)
            .map(|(_, family)| family)
            .expect("a listed name")
    })
}

#[derive(Subcommand)]
enum Command {
    /// Answer typed questions about a state (one /v1/systemone request) and print the answers.
    Decide(decide::DecideArgs),
    /// Print the prompt rows (token ids and answer slots) of a request without running the model.
    Prompt(prompt::PromptArgs),
    /// Serve the HTTP API: POST /v1/systemone and /decide, GET /health and /v1/models.
    Serve(serve::ServeArgs),
    /// Describe a model: architecture, tokenizer, labels, temperatures.
    Info(info::InfoArgs),
    /// Run token ids through a model as one sequence and write the logits `[T, vocab]` (f32 .npy).
    Forward(forward::ForwardArgs),
    /// Write a model folder whose weights are stored in a block format (q8, q4), loaded with no quantizing.
    Quantize(quantize::QuantizeArgs),
    /// List the backends compiled into this build (and, with --kernels, each format's CPU kernel).
    Backends(backends::BackendsArgs),
    /// Print a completion script for SHELL (bash, zsh, fish, elvish, powershell).
    Completions { shell: clap_complete::Shell },
}

/// mimalloc: the start-up of every command reads a tokenizer of a million small strings (see
/// `docs/dependencies.md`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    decider_cli::logging::init(cli.log_level.as_deref())?;
    decider_cli::threads::init(cli.threads)?;
    if let Some(ceiling) = cli.cpu_kernels {
        decider_ops::limit_instructions(ceiling).map_err(anyhow::Error::msg)?;
    }
    match cli.command {
        Command::Decide(args) => backend::dispatch(args.backend, &args),
        Command::Prompt(args) => prompt::run(&args),
        Command::Serve(args) => backend::dispatch(args.backend, &args),
        Command::Info(args) => backend::dispatch(args.backend, &args),
        Command::Forward(args) => backend::dispatch(args.backend, &args),
        Command::Quantize(args) => backend::dispatch(BackendName::default_name(), &args),
        Command::Backends(args) => {
            backends::run(&args);
            Ok(())
        }
        Command::Completions { shell } => {
            // Written whole, so a closed pipe is an error returned rather than clap_complete's panic.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "decider", &mut script);
            std::io::Write::write_all(&mut std::io::stdout(), &script)?;
            Ok(())
        }
    }
}
