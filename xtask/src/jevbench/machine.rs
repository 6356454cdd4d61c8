//! The machine a run was measured on, for results.json and the report: accuracy depends on the
//! weight format, and latency on the CPU and its threads too.

use serde_json::{Value, json};

/// The CPU's name (`model name` of /proc/cpuinfo, where there is one), its logical CPUs, the
/// compute threads of this process (rayon's pool: `--threads`/`RAYON_NUM_THREADS`, else one per
/// CPU), and the OS and architecture.
pub fn describe() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|info| {
        info.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            (key.trim() == "model name").then(|| value.trim().to_string())
        })
    });
    json!({
        "cpu": cpu.unwrap_or_else(|| std::env::consts::ARCH.to_string()),
        "logical_cpus": std::thread::available_parallelism().map_or(1, |n| n.get()),
        "threads": rayon::current_num_threads(),
        "os": std::env::consts::OS,
        "arch": std::env::consts::ARCH,
    })
}
