//! Which backends get which implementation. Every backend here uses the generic default for now;
//! a specialised kernel is an override of the trait method in that backend's `impl`.

#[cfg(feature = "ndarray")]
mod ndarray {
    use crate::{ExpertCount, UnitLowerInverse};
    use burn::backend::NdArray;
    use burn::backend::ndarray::{FloatNdArrayElement, IntNdArrayElement, NdArrayTensor, QuantElement, SharedArray};

    impl<E: FloatNdArrayElement, I: IntNdArrayElement, Q: QuantElement> ExpertCount for NdArray<E, I, Q>
    where
        NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
    {
    }

    impl<E: FloatNdArrayElement, I: IntNdArrayElement, Q: QuantElement> UnitLowerInverse for NdArray<E, I, Q>
    where
        NdArrayTensor: From<SharedArray<E>> + From<SharedArray<I>>,
    {
    }
}

#[cfg(feature = "autodiff")]
mod autodiff {
    use crate::{ExpertCount, UnitLowerInverse};
    use burn::backend::Autodiff;
    use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;

    /// Counts carry no gradient: delegate to the inner backend's kernel.
    impl<B: ExpertCount, C: CheckpointStrategy> ExpertCount for Autodiff<B, C> {
        fn expert_count(
            ids: burn::tensor::ops::IntTensor<Self>,
            num_experts: usize,
        ) -> burn::tensor::ops::IntTensor<Self> {
            B::expert_count(ids, num_experts)
        }
    }

    /// The generic default is built from differentiable tensor ops.
    impl<B: UnitLowerInverse, C: CheckpointStrategy> UnitLowerInverse for Autodiff<B, C> {}
}
