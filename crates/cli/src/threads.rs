//! `--threads`: how many threads compute. The CPU kernels run on rayon's global pool, candle's
//! matrix products read `RAYON_NUM_THREADS` and ndarray's (matrixmultiply) `MATMUL_NUM_THREADS`;
//! all three are set here, once, before any of them starts a thread.

use std::num::NonZeroUsize;

/// The variables the matrix-product crates read their thread count from.
const THREAD_VARIABLES: [&str; 2] = ["RAYON_NUM_THREADS", "MATMUL_NUM_THREADS"];

/// Sizes the compute pools to `threads` (one per CPU without it). Call it first in `main`,
/// while no other thread runs.
pub fn init(threads: Option<NonZeroUsize>) -> anyhow::Result<()> {
    let Some(threads) = threads else { return Ok(()) };
    for variable in THREAD_VARIABLES {
        // SAFETY: called at the start of `main`, before any thread is spawned, so no other thread
        // reads or writes the environment meanwhile.
        unsafe { std::env::set_var(variable, threads.to_string()) };
    }
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads.get())
        .thread_name(|i| format!("compute-{i}"))
        .build_global()
        .map_err(|e| anyhow::anyhow!("starting {threads} compute threads: {e}"))
}
