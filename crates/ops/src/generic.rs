//! Every op's generic form, written with burn tensor ops: every backend's default, always
//! correct, and the yardstick the specialised kernels are tested and benchmarked against.
//!
//! This module only lists them: each is defined in a `generic` module beside its op's trait
//! (`q8_matmul::generic::q8_matmul` in `q8_matmul/mod.rs`, the chunked scan in
//! `gated_delta_rule/mod.rs`, ...), so that an op's folder holds its trait, wrapper and default
//! and imports no other op's through here.

pub use crate::causal_conv1d::generic::causal_conv1d;
pub use crate::dense_matmul::generic::{dense_matmul, grouped_matmul};
pub use crate::expert_count::generic::expert_count;
pub use crate::gated_delta_rule::generic::{CHUNK_SIZE, chunked_gated_delta_rule};
pub use crate::gating::generic::{sigmoid, silu};
pub use crate::half_matmul::generic::{grouped_half_float_matmul, grouped_half_matmul, half_float_matmul, half_matmul};
pub use crate::q4_matmul::generic::{grouped_q4_matmul, q4_matmul, q4_weight};
pub use crate::q8_matmul::generic::{grouped_q8_matmul, q8_matmul};
pub use crate::reshape::generic::reshape;
pub use crate::unit_lower_inverse::generic::unit_lower_inverse;
