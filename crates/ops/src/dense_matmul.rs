//! Matmul with a stored weight, `x [n, in] · W [in, out]`: every f32 projection of the model.
//!
//! It is an extension, not burn's `matmul`, because of what burn-ndarray 0.21's `matmul` does to
//! its operands: it reshapes both to rank 3, and its reshape copies even a contiguous array
//! (`to_shape(..).into_shared()`), so each projection copied its whole weight into fresh
//! memory before multiplying, twice through `Linear` (which first adds a leading 1). At 64 tokens
//! those copies and their page faults were a third of a forward's time.

use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorPrimitive, backend::Backend};

/// `x · W` for a weight that is read, never copied, where the backend allows: a projection's
/// `W [in, out]`, or one expert's slice of stacked expert weights `[experts, in, out]`.
pub trait DenseMatmul: Backend {
    /// `x`: `[n, in]`; `weights`: `[in, out]` (then `index` is 0) or `[experts, in, out]`.
    /// Returns `x · weights[index]`, `[n, out]`.
    fn dense_matmul(x: FloatTensor<Self>, weights: FloatTensor<Self>, index: usize) -> FloatTensor<Self> {
        crate::generic::dense_matmul::<Self>(x, weights, index)
    }
}

/// `x [n, in] · W [in, out] -> [n, out]`.
pub fn dense_matmul<B: DenseMatmul>(x: Tensor<B, 2>, weight: Tensor<B, 2>) -> Tensor<B, 2> {
    let ([_, d_in], [w_in, _]) = (x.dims(), weight.dims());
    assert_eq!(d_in, w_in, "dense_matmul: x has {d_in} columns, the weight {w_in} rows");
    Tensor::from_primitive(TensorPrimitive::Float(B::dense_matmul(x.into_primitive().tensor(), weight.into_primitive().tensor(), 0)))
}

/// `x [n, in] · W[index] -> [n, out]` for stacked expert weights `W [experts, in, out]`.
pub fn expert_matmul<B: DenseMatmul>(x: Tensor<B, 2>, weights: Tensor<B, 3>, index: usize) -> Tensor<B, 2> {
    let ([_, d_in], [experts, w_in, _]) = (x.dims(), weights.dims());
    assert!(d_in == w_in && index < experts, "expert_matmul: x [_, {d_in}] with expert {index} of weights [{experts}, {w_in}, _]");
    Tensor::from_primitive(TensorPrimitive::Float(B::dense_matmul(x.into_primitive().tensor(), weights.into_primitive().tensor(), index)))
}
