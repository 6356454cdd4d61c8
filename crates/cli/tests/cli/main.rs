//! The `decider` command's suites in one test binary (one build of the library's model beside the
//! binary they run): its commands, `decider forward`, and `decider serve` on loopback. The HTTP
//! fuzzer is a binary of its own (`tests/http_fuzz.rs`), so that its requests do not share the
//! machine with the timing checks of `serve`.

mod commands;
mod container;
mod forward_command;
mod gguf;
mod operations;
mod readme;
mod serve;
mod serve_budget;
