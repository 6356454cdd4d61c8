//! Autodiff: the generic form through autodiff's own ops, on the inner backend's storage.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;

/// The generic form through autodiff's own ops: the gradient reaches `x`; the weight's bits have
/// none.
impl<B: crate::HalfMatmul, C: CheckpointStrategy> crate::HalfMatmul for Autodiff<B, C> {
    fn half_bits_dtype() -> burn::tensor::DType {
        B::half_bits_dtype()
    }
}
