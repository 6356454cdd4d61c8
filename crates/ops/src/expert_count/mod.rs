//! Tokens per expert: the histogram of the router's expert ids.

use burn::tensor::ops::IntTensor;
use burn::tensor::{Int, Tensor, backend::Backend};

// The kernels, one file per backend; every other backend takes the generic form.
#[cfg(feature = "autodiff")]
mod autodiff;
#[cfg(feature = "candle")]
mod candle;
#[cfg(feature = "cpu-kernels")]
pub mod cpu;
#[cfg(feature = "wgpu")]
mod cube;
#[cfg(feature = "wgpu")]
mod fusion;
#[cfg(feature = "ndarray")]
mod ndarray;
#[cfg(test)]
mod tests;

crate::backends::generic_forms!(ExpertCount, kernels: ndarray, candle, cube, fusion, autodiff);

/// Counts how many routed (token, slot) pairs go to each expert.
pub trait ExpertCount: Backend {
    /// `ids`: `[N]` expert ids; returns `[num_experts]` counts. Ids outside `0..num_experts` are
    /// dropped (expert-parallel sentinels), as `torch.histc(ids, bins = E, min = 0, max = E - 1)`
    /// does.
    fn expert_count(ids: IntTensor<Self>, num_experts: usize) -> IntTensor<Self> {
        generic::expert_count::<Self>(Tensor::from_primitive(ids), num_experts).into_primitive()
    }
}

/// `[N]` expert ids -> `[num_experts]` counts, dropping ids outside `0..num_experts`.
pub fn expert_count<B: ExpertCount>(ids: Tensor<B, 1, Int>, num_experts: usize) -> Tensor<B, 1, Int> {
    Tensor::from_primitive(B::expert_count(ids.into_primitive(), num_experts))
}

/// The generic count, in burn tensor ops: [`ExpertCount::expert_count`]'s default.
pub mod generic {
    use burn::tensor::{Int, Tensor, backend::Backend};

    /// The generic count: each id compared with every expert index, summed over the ids, a chunk of
    /// ids at a time so memory stays bounded (`CHUNK x E`). Ids outside `0..E` match no index.
    ///
    /// The natural scatter-add form is not used: burn-wgpu 0.21's scatter-add (and `select_assign`
    /// with `Add`) loses an update on 65,536 ids into 256 bins, which the kernel tests caught.
    pub fn expert_count<B: Backend>(ids: Tensor<B, 1, Int>, num_experts: usize) -> Tensor<B, 1, Int> {
        const CHUNK: usize = 4096;
        let device = ids.device();
        let [n] = ids.dims();
        let mut counts = Tensor::<B, 1, Int>::zeros([num_experts], &device);
        if num_experts == 0 {
            return counts;
        }
        let experts = Tensor::<B, 1, Int>::arange(0..num_experts as i64, &device).unsqueeze::<2>(); // [1, E]
        for start in (0..n).step_by(CHUNK) {
            let len = CHUNK.min(n - start);
            let chunk = ids.clone().narrow(0, start, len).unsqueeze_dim::<2>(1).expand([len, num_experts]);
            let matches = chunk.equal(experts.clone().expand([len, num_experts])).int();
            counts = counts + matches.sum_dim(0).squeeze_dim::<1>(0);
        }
        counts
    }
}
