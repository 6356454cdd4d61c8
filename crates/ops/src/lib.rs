#![doc = include_str!("../README.md")]

pub mod backend_list;
mod backends;
mod block_storage;
pub mod causal_conv1d;
#[cfg(feature = "cpu-kernels")]
pub mod cpu;
pub mod dense_matmul;
pub mod expert_count;
pub mod gated_delta_rule;
pub mod gating;
pub mod generic;
pub mod ggml_type;
pub mod half_matmul;
pub mod instructions;
pub mod q4_matmul;
pub mod q4k_matmul;
pub mod q5k_matmul;
pub mod q6k_matmul;
pub mod q8_matmul;
pub mod reference;
pub mod reshape;
#[cfg(test)]
mod test_support;
pub mod unit_lower_inverse;

pub use block_storage::{BlockInts, BlockStorage};
pub use causal_conv1d::{CausalConv1d, causal_conv1d};
pub use dense_matmul::{DenseMatmul, dense_matmul, grouped_matmul};
pub use expert_count::{ExpertCount, expert_count};
pub use gated_delta_rule::{GatedDeltaRule, gated_delta_rule};
pub use gating::{Gating, sigmoid, silu};
pub use ggml_type::{GgmlType, q5_0_values};
pub(crate) use half_matmul::half_patterns_f32;
pub use half_matmul::{
    Half, HalfMatmul, grouped_half_float_matmul, grouped_half_matmul, half_bits, half_bits_f32, half_float_matmul,
    half_floats, half_matmul, holds_half_floats, round_to_bf16,
};
pub use instructions::{Instructions, instruction_ceiling, limit_instructions};
pub use q4_matmul::{
    Q4_ACTIVATION_BITS, Q4_BLOCK, Q4Matmul, dequantize_q4, grouped_q4_matmul, q4_bytes_f32, q4_matmul, q4_rows,
    q4_values, quantize_q4, quantize_q4_block,
};
pub use q4k_matmul::{
    Q4KMatmul, dequantize_q4k, grouped_q4k_matmul, join_q4_k, q4k_matmul, q4k_shapes, quantize_q4_k, split_q4_k,
};
pub use q5k_matmul::{Q5KMatmul, dequantize_q5k, grouped_q5k_matmul, q5k_matmul, q5k_shapes, split_q5_k};
pub use q6k_matmul::{
    Q6K_BLOCK, Q6KMatmul, dequantize_q6k, grouped_q6k_matmul, q6k_matmul, q6k_shapes, split_q3_k, split_q6_k,
};
pub use q8_matmul::{
    ActivationBits, Q8_BLOCK, Q8Matmul, block_scales, block_scales_f32, dequantize_q8, grouped_q8_matmul, q8_matmul,
    q8_rows, q8_values, q8_values_f32, quantize_q8, quantize_q8_block, round_activations,
};
pub use reshape::{Reshape, reshape};
pub use unit_lower_inverse::{UnitLowerInverse, unit_lower_inverse};
