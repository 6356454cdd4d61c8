//! burn-fusion (`burn::backend::Wgpu` with the `fusion` feature): a custom operation in the
//! fusion stream that runs the inner backend's kernel.

use core::marker::PhantomData;

use burn::tensor::Element;
use burn::tensor::ops::IntTensor;
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, OperationOutput, TensorIr};

use crate::ExpertCount;

#[derive(Debug)]
struct ExpertCountOp<B> {
    desc: CustomOpIr,
    num_experts: usize,
    _backend: PhantomData<B>,
}

impl<B: FusionBackend + ExpertCount> Operation<B::FusionRuntime> for ExpertCountOp<B> {
    fn execute(&self, handles: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>) {
        let ([ids], [counts]) = self.desc.as_fixed();
        let ids = handles.get_int_tensor::<B>(ids);
        let output = B::expert_count(ids, self.num_experts);
        handles.register_int_tensor::<B>(&counts.id, output);
    }
}

impl<B: FusionBackend + ExpertCount> ExpertCount for Fusion<B> {
    fn expert_count(ids: IntTensor<Self>, num_experts: usize) -> IntTensor<Self> {
        let client = ids.client.clone();
        let streams = OperationStreams::with_inputs([&ids]);
        // The inner kernel (and the generic default) count in the backend's int dtype.
        let counts = TensorIr::uninit(client.create_empty_handle(), [num_experts].into(), B::IntElem::dtype());
        let desc = CustomOpIr::new("decider_expert_count", &[ids.into_ir()], &[counts]);
        let op = ExpertCountOp::<B> { desc: desc.clone(), num_experts, _backend: PhantomData };
        client.register(streams, OperationIr::Custom(desc), op).output()
    }
}
