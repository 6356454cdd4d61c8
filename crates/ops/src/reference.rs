//! Naive implementations in burn tensor ops: a per-bin loop for the count and a per-row forward
//! substitution for the inverse. They are the slow baselines of the benchmarks (the specialised
//! kernels must beat them by 10x on CPU) and a third opinion in the tests. And llama.cpp's own
//! Q4_0 rounding, the baseline [`crate::quantize_q4`] is measured against.

use burn::tensor::{Int, Tensor, backend::Backend};
use half::f16;

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

/// One block of llama.cpp's `quantize_row_q4_0_ref` (ggml/src/ggml-quants.c), written out:
/// `d = m / -8` for the value `m` of largest magnitude (the first of equals), values
/// `min(15, (int8_t)(w / d + 8.5))` rounded with the f32 `1 / d`, `d` stored as f16. Returns the
/// 16 packed bytes (value `j` low, `j + 16` high) and the scale.
pub fn llama_q4_0_block(block: &[f32]) -> (Vec<u8>, f16) {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in block {
        if amax < v.abs() {
            (amax, max) = (v.abs(), v);
        }
    }
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let nibble = |v: f32| ((v * id + 8.5) as i8).min(15) as u8;
    let half = block.len() / 2;
    ((0..half).map(|j| nibble(block[j]) | (nibble(block[j + half]) << 4)).collect(), f16::from_f32(d))
}
