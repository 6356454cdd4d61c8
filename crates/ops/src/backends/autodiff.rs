//! Autodiff: the forward runs the inner backend's kernel; the inverse has its own backward.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind, unary};
use burn::tensor::backend::Backend;
use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{Tensor, TensorPrimitive};

use crate::{ExpertCount, UnitLowerInverse};

/// Counts carry no gradient: the inner backend's kernel, as is.
impl<B: ExpertCount, C: CheckpointStrategy> ExpertCount for Autodiff<B, C> {
    fn expert_count(ids: IntTensor<Self>, num_experts: usize) -> IntTensor<Self> {
        B::expert_count(ids, num_experts)
    }
}

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

/// The generic form through autodiff's own ops: the gradient reaches `x` (straight through the
/// activations' rounding); the weights (int values and the bits of their scales) have none.
impl<B: crate::Q8Matmul, C: CheckpointStrategy> crate::Q8Matmul for Autodiff<B, C> {
    fn block_storage() -> crate::BlockStorage {
        B::block_storage()
    }
    // The values stay in their order (the default `q8_layout`): the generic form reads them so,
    // whatever order the inner backend's own kernel reads.
}

/// The generic form through autodiff's own ops: the gradient reaches `x`; the weight's bits have
/// none.
impl<B: crate::HalfMatmul, C: CheckpointStrategy> crate::HalfMatmul for Autodiff<B, C> {
    fn half_bits_dtype() -> burn::tensor::DType {
        B::half_bits_dtype()
    }
}

// The generic forms and burn's ops through autodiff's own ops, so that gradients pass: to `x`
// through Q4_0's product (straight through the rounding, the packed bytes kept in Q4_0's order),
// to both operands of the f32 products, to every input of the chunked delta rule (with the
// inverse's own backward) and of the conv, through the gates and the reshape.
generic_forms!(autodiff: crate::Q4Matmul, crate::DenseMatmul, crate::GatedDeltaRule, crate::Gating, crate::Reshape, crate::CausalConv1d);
