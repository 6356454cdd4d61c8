//! The pieces of the `decider` binary that other tools reuse (`cargo xtask jevbench`): the
//! backends of this build and the dispatch to them, `--model` sources (and the guard while a
//! folder is read), the HTTP server, its log (with the progress bar) and the compute threads.

pub mod backend;
pub mod folder_guard;
pub mod logging;
pub mod model_source;
pub mod progress;
pub mod serve;
pub mod threads;
