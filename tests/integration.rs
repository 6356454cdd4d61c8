//! The cross-crate suites, one module each, in one test binary: parity with the transformers
//! reference, configs, the loader and its errors, weight formats, quantized folders, the cache,
//! GGUF files, decisions against the reference server's, the fuzzers, and the source layout. Run one with
//! `cargo test -p integration-tests --test integration -- MODULE::`.

mod cache;
mod config;
mod decision_parity;
mod fuzz_checkpoint;
mod fuzz_prompts;
mod gguf;
mod gguf_models;
mod layout;
mod loader;
mod loader_errors;
mod quantized_folders;
mod reference_parity;
mod weight_formats;
