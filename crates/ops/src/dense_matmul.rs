//! Matmul with stored f32 weights: `x [n, in] · W [in, out]` for every f32 projection of the
//! model, and the grouped form `x · W[expert of each row]` for the routed experts of an MoE layer.
//!
//! It is an extension, not burn's `matmul`, because of what burn-ndarray 0.21's `matmul` does to
//! its operands: it reshapes both to rank 3, and its reshape copies even a contiguous array
//! (`to_shape(..).into_shared()`), so each projection copied its whole weight into fresh
//! memory before multiplying, twice through `Linear` (which first adds a leading 1). At 64 tokens
//! those copies and their page faults were a third of a forward's time.
//!
//! The grouped form is llama.cpp's `mul_mat_id`: the rows arrive sorted by expert with a count
//! per expert ([`crate::expert_count`]), and one call multiplies every expert's rows, so a
//! backend can run the whole layer as one kernel instead of a host loop of 256 small products.

use burn::tensor::ops::{FloatTensor, IntTensor};
use burn::tensor::{Int, Tensor, TensorPrimitive, backend::Backend};

/// `x · W` for weights that are read, never copied, where the backend allows.
pub trait DenseMatmul: Backend {
    /// `x`: `[n, in]`; `weight`: `[in, out]`. Returns `[n, out]`.
    fn dense_matmul(x: FloatTensor<Self>, weight: FloatTensor<Self>) -> FloatTensor<Self> {
        crate::generic::dense_matmul::<Self>(x, weight)
    }

    /// `x`: `[rows, in]`, sorted by expert; `weights`: `[experts, in, out]`; `counts`: `[experts]`,
    /// the rows of each expert in order, summing to `rows`. Returns `[rows, out]`, row `r` times
    /// its expert's weight. The default is a [`DenseMatmul::dense_matmul`] per expert with rows
    /// (the counts are read back to the host).
    fn grouped_matmul(x: FloatTensor<Self>, weights: FloatTensor<Self>, counts: IntTensor<Self>) -> FloatTensor<Self> {
        crate::generic::grouped_matmul::<Self>(x, weights, counts)
    }
}

/// `x [n, in] · W [in, out] -> [n, out]`.
pub fn dense_matmul<B: DenseMatmul>(x: Tensor<B, 2>, weight: Tensor<B, 2>) -> Tensor<B, 2> {
    let ([_, d_in], [w_in, _]) = (x.dims(), weight.dims());
    assert_eq!(d_in, w_in, "dense_matmul: x has {d_in} columns, the weight {w_in} rows");
    Tensor::from_primitive(TensorPrimitive::Float(B::dense_matmul(
        x.into_primitive().tensor(),
        weight.into_primitive().tensor(),
    )))
}

/// `x [rows, in]`, sorted by expert with `counts [experts]` rows each, times each row's expert's
/// weight of `weights [experts, in, out]`: `[rows, out]`. The counts must sum to `rows` (checked
/// where a kernel reads them; not checked here, which would read them back from the device).
pub fn grouped_matmul<B: DenseMatmul>(
    x: Tensor<B, 2>,
    weights: Tensor<B, 3>,
    counts: Tensor<B, 1, Int>,
) -> Tensor<B, 2> {
    let ([_, d_in], [experts, w_in, _], [c]) = (x.dims(), weights.dims(), counts.dims());
    assert!(
        d_in == w_in && c == experts,
        "grouped_matmul: x [_, {d_in}], weights [{experts}, {w_in}, _] and counts [{c}] do not match"
    );
    Tensor::from_primitive(TensorPrimitive::Float(B::grouped_matmul(
        x.into_primitive().tensor(),
        weights.into_primitive().tensor(),
        counts.into_primitive(),
    )))
}
