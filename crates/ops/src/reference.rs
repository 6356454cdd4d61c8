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

/// Row `i` of `X` from rows `0..i`: `X[i, ..] = e_i - A[i, :i] X[:i, ..]`, one row at a time,
/// for a batch `[batch, n, n]` (rows are concatenated, not assigned in place).
pub fn unit_lower_inverse_by_rows<B: Backend>(a: Tensor<B, 3>) -> Tensor<B, 3> {
    let [batch, n, _] = a.dims();
    let identity = Tensor::<B, 2>::eye(n, &a.device()).unsqueeze::<3>().repeat_dim(0, batch);
    let mut rows = Vec::with_capacity(n);
    for i in 0..n {
        let unit = identity.clone().slice([0..batch, i..i + 1, 0..n]);
        let row = if i == 0 {
            unit
        } else {
            let done = Tensor::cat(rows.clone(), 1); // [batch, i, n]
            unit - a.clone().slice([0..batch, i..i + 1, 0..i]).matmul(done)
        };
        rows.push(row);
    }
    if rows.is_empty() {
        return Tensor::zeros([batch, 0, 0], &a.device());
    }
    Tensor::cat(rows, 1)
}
