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

// The kernels, one file per backend; every other backend takes the generic form.
#[cfg(feature = "cpu-kernels")]
pub mod cpu;
#[cfg(feature = "cpu-kernels")]
pub mod few_rows;
#[cfg(feature = "ndarray")]
mod ndarray;
#[cfg(test)]
mod tests;

crate::backends::generic_forms!(DenseMatmul, kernels: ndarray);

/// `x · W` for weights that are read, never copied, where the backend allows.
pub trait DenseMatmul: Backend {
    /// `x`: `[n, in]`; `weight`: `[in, out]`. Returns `[n, out]`.
    fn dense_matmul(x: FloatTensor<Self>, weight: FloatTensor<Self>) -> FloatTensor<Self> {
        generic::dense_matmul::<Self>(x, weight)
    }

    /// `x`: `[rows, in]`, sorted by expert; `weights`: `[experts, in, out]`; `counts`: `[experts]`,
    /// the rows of each expert in order, summing to `rows`. Returns `[rows, out]`, row `r` times
    /// its expert's weight. The default is a [`DenseMatmul::dense_matmul`] per expert with rows
    /// (the counts are read back to the host).
    fn grouped_matmul(x: FloatTensor<Self>, weights: FloatTensor<Self>, counts: IntTensor<Self>) -> FloatTensor<Self> {
        generic::grouped_matmul::<Self>(x, weights, counts)
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

/// The generic f32 matmuls, in burn tensor ops: [`DenseMatmul`]'s defaults, and the per-expert
/// loop every grouped default shares.
pub mod generic {
    use burn::tensor::ops::{FloatTensor, IntTensor};
    use burn::tensor::{Int, Tensor, TensorPrimitive, backend::Backend};

    use super::DenseMatmul;

    /// burn's `matmul`, `x [n, in] · weight [in, out]`.
    pub fn dense_matmul<B: Backend>(x: FloatTensor<B>, weight: FloatTensor<B>) -> FloatTensor<B> {
        let x = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(x));
        let weight = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(weight));
        let [n, _] = x.dims();
        if n == 0 {
            // burn-ndarray 0.21's matmul divides by zero on a 0-row input.
            return Tensor::<B, 2>::zeros([0, weight.dims()[1]], &x.device()).into_primitive().tensor();
        }
        x.matmul(weight).into_primitive().tensor()
    }

    /// [`crate::grouped_matmul`] as a [`DenseMatmul::dense_matmul`] per expert with rows.
    pub fn grouped_matmul<B: DenseMatmul>(
        x: FloatTensor<B>,
        weights: FloatTensor<B>,
        counts: IntTensor<B>,
    ) -> FloatTensor<B> {
        let weights = Tensor::<B, 3>::from_primitive(TensorPrimitive::Float(weights));
        let x = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(x));
        let [_, d_in, d_out] = weights.dims();
        per_expert(x, Tensor::from_primitive(counts), d_out, |x, expert| {
            let weight = weights.clone().narrow(0, expert, 1).reshape([d_in, d_out]);
            Tensor::from_primitive(TensorPrimitive::Float(B::dense_matmul(
                x.into_primitive().tensor(),
                weight.into_primitive().tensor(),
            )))
        })
        .into_primitive()
        .tensor()
    }

    /// Expert `expert`'s matrix of a stack `[experts, rows, cols]`.
    pub(crate) fn expert_of<B: Backend, K: burn::tensor::TensorKind<B> + burn::tensor::BasicOps<B>>(
        stack: &Tensor<B, 3, K>,
        expert: usize,
    ) -> Tensor<B, 2, K> {
        let [_, rows, cols] = stack.dims();
        stack.clone().narrow(0, expert, 1).reshape([rows, cols])
    }

    /// The grouped products as a host loop: `x [rows, _]` cut into the `counts [experts]` rows of
    /// each expert (read back to the host), `product(rows, expert)` for each expert with rows, the
    /// results `[_, d_out]` concatenated in order.
    pub(crate) fn per_expert<B: Backend>(
        x: Tensor<B, 2>,
        counts: Tensor<B, 1, Int>,
        d_out: usize,
        product: impl Fn(Tensor<B, 2>, usize) -> Tensor<B, 2>,
    ) -> Tensor<B, 2> {
        let counts: Vec<i64> = counts.into_data().iter::<i64>().collect();
        let mut outputs = Vec::new();
        let mut start = 0;
        for (expert, &count) in counts.iter().enumerate() {
            let count = usize::try_from(count).expect("expert counts are not negative");
            if count > 0 {
                outputs.push(product(x.clone().narrow(0, start, count), expert));
                start += count;
            }
        }
        let [rows, _] = x.dims();
        assert_eq!(start, rows, "grouped matmul: the expert counts sum to {start}, x has {rows} rows");
        match outputs.is_empty() {
            true => Tensor::zeros([0, d_out], &x.device()),
            false => Tensor::cat(outputs, 0),
        }
    }
}
