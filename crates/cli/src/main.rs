//! `decider`: run Qwen3.5 decider models on any burn backend compiled into this build.

mod backend;
mod forward;

use clap::{Parser, Subcommand};

use crate::backend::BackendName;

#[derive(Parser)]
#[command(name = "decider", version, about = "Run Qwen3.5 decider models on burn (ndarray, candle, wgpu)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run token ids through a model as one sequence and write the logits `[T, vocab]` (f32 .npy).
    Forward(forward::ForwardArgs),
    /// List the backends compiled into this build.
    Backends,
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Forward(args) => backend::dispatch(args.backend, &args),
        Command::Backends => {
            for name in BackendName::compiled_in() {
                println!("{name}");
            }
            Ok(())
        }
    }
}
