//! Autodiff: counts carry no gradient, so the inner backend's kernel runs as is.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::tensor::ops::IntTensor;

use crate::ExpertCount;

/// Counts carry no gradient: the inner backend's kernel, as is.
impl<B: ExpertCount, C: CheckpointStrategy> ExpertCount for Autodiff<B, C> {
    fn expert_count(ids: IntTensor<Self>, num_experts: usize) -> IntTensor<Self> {
        B::expert_count(ids, num_experts)
    }
}
