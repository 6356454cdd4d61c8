//! Tokens per expert: the histogram of the router's expert ids.

use burn::tensor::ops::IntTensor;
use burn::tensor::{Int, Tensor, backend::Backend};

/// Counts how many routed (token, slot) pairs go to each expert.
pub trait ExpertCount: Backend {
    /// `ids`: `[N]` expert ids; returns `[num_experts]` counts. Ids outside `0..num_experts` are
    /// dropped (expert-parallel sentinels), as `torch.histc(ids, bins = E, min = 0, max = E - 1)`
    /// does.
    fn expert_count(ids: IntTensor<Self>, num_experts: usize) -> IntTensor<Self> {
        crate::generic::expert_count::<Self>(Tensor::from_primitive(ids), num_experts).into_primitive()
    }
}

/// `[N]` expert ids -> `[num_experts]` counts, dropping ids outside `0..num_experts`.
pub fn expert_count<B: ExpertCount>(ids: Tensor<B, 1, Int>, num_experts: usize) -> Tensor<B, 1, Int> {
    Tensor::from_primitive(B::expert_count(ids.into_primitive(), num_experts))
}
