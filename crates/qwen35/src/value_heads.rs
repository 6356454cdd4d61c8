//! The order of a Gated DeltaNet's value heads in a weight's columns: its own file, as both the
//! loader (which reports it) and the mixer (which follows it) name it.

/// The order of the value heads in `out_proj`'s input. A checkpoint lists them grouped by the
/// key head they read (`[k0: v0 v1 | k1: v0 v1]`). llama.cpp's converter writes them tiled
/// (`[k0 v0, k1 v0 | k0 v1, k1 v1]`) where there are more value heads than key heads; the GGUF
/// loader puts them back in grouped order, except in an `out_proj` of k-quant blocks, which span
/// two 128-wide heads and cannot move without rounding again (`gguf/heads.rs`): that one is held
/// tiled, and the mixer (`delta_net.rs`) puts its output in the tiled order instead.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ValueHeadOrder {
    #[default]
    Grouped,
    Tiled,
}
