//! Naive implementations in burn tensor ops: a per-bin loop for the count and a per-row forward
//! substitution for the inverse. They are the slow baselines of the benchmarks (the specialised
//! kernels must beat them by 10x on CPU) and a third opinion in the tests.

use burn::tensor::{Int, Tensor, backend::Backend};

/// One comparison and sum per expert.
pub fn expert_count_per_bin<B: Backend>(ids: Tensor<B, 1, Int>, num_experts: usize) -> Tensor<B, 1, Int> {
    let counts: Vec<Tensor<B, 1, Int>> =
        (0..num_experts).map(|e| ids.clone().equal_elem(e as i64).int().sum()).collect();
    if counts.is_empty() {
        return Tensor::zeros([0], &ids.device());
    }
    Tensor::cat(counts, 0)
}

/// Row `i` of `X` from rows `0..i`: `X[i, :i] = -A[i, :i] X[:i, :i]`, one row at a time, for a
/// batch `[batch, n, n]`.
pub fn unit_lower_inverse_by_rows<B: Backend>(a: Tensor<B, 3>) -> Tensor<B, 3> {
    let [batch, n, _] = a.dims();
    let mut x = Tensor::<B, 2>::eye(n, &a.device()).unsqueeze::<3>().repeat_dim(0, batch);
    for i in 1..n {
        let row = a.clone().slice([0..batch, i..i + 1, 0..i]);
        let block = x.clone().slice([0..batch, 0..i, 0..i]);
        x = x.slice_assign([0..batch, i..i + 1, 0..i], row.matmul(block).neg());
    }
    x
}
