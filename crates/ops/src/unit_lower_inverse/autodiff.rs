//! Autodiff: the inner backend's kernel forward, and the inverse's own backward.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind, unary};
use burn::tensor::backend::Backend;
use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorPrimitive};

use crate::UnitLowerInverse;

/// `X = (I + L)^-1` with `L = strictly_lower(A)`: `dX = -X dL X`, so
/// `dA = -strictly_lower(X^T dX X^T)`.
#[derive(Debug)]
struct UnitLowerInverseBackward;

impl<B: Backend> Backward<B, 1> for UnitLowerInverseBackward {
    /// The forward output `X`.
    type State = FloatTensor<B>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let inverse = Tensor::<B, 3>::from_primitive(TensorPrimitive::Float(ops.state));
        unary::<B, _>(ops.parents, ops.node, grads, |grad| {
            let grad = Tensor::<B, 3>::from_primitive(TensorPrimitive::Float(grad));
            let inverse_t = inverse.swap_dims(1, 2);
            inverse_t.clone().matmul(grad).matmul(inverse_t).tril(-1).neg().into_primitive().tensor()
        });
    }
}

impl<B: UnitLowerInverse, C: CheckpointStrategy> UnitLowerInverse for Autodiff<B, C> {
    fn unit_lower_inverse(a: FloatTensor<Self>) -> FloatTensor<Self> {
        match UnitLowerInverseBackward.prepare::<C>([a.node.clone()]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let inverse = B::unit_lower_inverse(a.primitive);
                prep.finish(inverse.clone(), inverse)
            }
            OpsKind::UnTracked(prep) => prep.finish(B::unit_lower_inverse(a.primitive)),
        }
    }
}
