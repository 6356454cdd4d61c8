//! burn-fusion (`burn::backend::Wgpu` with the `fusion` feature): a custom operation in the
//! fusion stream that runs the inner backend's kernel.

use core::marker::PhantomData;

use burn::tensor::ops::FloatTensor;
use burn_fusion::stream::{Operation, OperationStreams};
use burn_fusion::{Fusion, FusionBackend, FusionRuntime};
use burn_ir::{CustomOpIr, HandleContainer, OperationIr, OperationOutput, TensorIr};

use crate::UnitLowerInverse;

#[derive(Debug)]
struct UnitLowerInverseOp<B> {
    desc: CustomOpIr,
    _backend: PhantomData<B>,
}

impl<B: FusionBackend + UnitLowerInverse> Operation<B::FusionRuntime> for UnitLowerInverseOp<B> {
    fn execute(&self, handles: &mut HandleContainer<<B::FusionRuntime as FusionRuntime>::FusionHandle>) {
        let ([a], [inverse]) = self.desc.as_fixed();
        let a = handles.get_float_tensor::<B>(a);
        let output = B::unit_lower_inverse(a);
        handles.register_float_tensor::<B>(&inverse.id, output);
    }
}

impl<B: FusionBackend + UnitLowerInverse> UnitLowerInverse for Fusion<B> {
    fn unit_lower_inverse(a: FloatTensor<Self>) -> FloatTensor<Self> {
        let client = a.client.clone();
        let streams = OperationStreams::with_inputs([&a]);
        let inverse = TensorIr::uninit(client.create_empty_handle(), a.shape.clone(), a.dtype);
        let desc = CustomOpIr::new("decider_unit_lower_inverse", &[a.into_ir()], &[inverse]);
        let op = UnitLowerInverseOp::<B> { desc: desc.clone(), _backend: PhantomData };
        client.register(streams, OperationIr::Custom(desc), op).output()
    }
}
