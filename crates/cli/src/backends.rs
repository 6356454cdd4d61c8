//! `decider backends`: the backends of this build and, with `--kernels`, the product each weight
//! format runs on this CPU under the `--cpu-kernels` ceiling.

use decider_cli::backend::BackendName;
use qwen35::WeightFormat;

#[derive(clap::Args)]
pub struct BackendsArgs {
    /// Also print, for each `--weights` format, the kernel its products run on the CPU backends
    /// on this machine.
    #[arg(long)]
    kernels: bool,
}

pub fn run(args: &BackendsArgs) {
    for name in BackendName::compiled_in() {
        println!("{name}");
    }
    if args.kernels {
        let ceiling = decider_ops::instruction_ceiling().name();
        println!("\nproducts on the CPU backends (this CPU, --cpu-kernels {ceiling}):");
        for (name, format) in WeightFormat::ALL {
            println!("  {name:<5} {}", cpu_kernel(format));
        }
    }
}

/// The kernel `format`'s products run on the CPU backends of this build on this CPU.
#[cfg(any(feature = "ndarray", feature = "candle"))]
fn cpu_kernel(format: WeightFormat) -> String {
    use decider_ops::{cpu, dense_matmul, half_matmul};
    match format {
        WeightFormat::F32 => dense_matmul::cpu::dense_kernel(),
        WeightFormat::Bf16 | WeightFormat::F16 => {
            half_matmul::cpu::half_kernel(format.half().expect("a 16-bit format has its half"))
        }
        WeightFormat::Q8 | WeightFormat::Q4 | WeightFormat::Q4K | WeightFormat::Q5K | WeightFormat::Q6K => {
            cpu::block_kernel().to_string()
        }
    }
}

#[cfg(not(any(feature = "ndarray", feature = "candle")))]
fn cpu_kernel(_: WeightFormat) -> String {
    "no CPU backend in this build".to_string()
}
