//! The gated delta rule (its chunked and recurrent forms in transformers `models/qwen3_5/modeling_qwen3_5.py`), the recurrence at the heart of Gated DeltaNet.
//!
//! Per batch element and value head, with state `S` (`Dk x Dv`, f32) and for each token:
//! `S <- S exp(g)`, `S <- S + k (beta (v - S^T k))^T`, `o = S^T q`.
//! [`gated_delta_rule`] runs the backend's scan over a whole sequence (64 tokens at a time with
//! matmuls and one unit-lower-triangular inverse per chunk, or token by token on CPUs);
//! [`recurrent_gated_delta_rule`] steps token by token in tensor ops (single-token decoding). Both take the projections as the layer produces them:
//! q, k `[batch, len, key_heads, Dk]`, v `[batch, len, value_heads, Dv]`,
//! g (log decay, <= 0) and beta `[batch, len, value_heads]`. Both l2-normalise q and k, scale q
//! by `Dk^-0.5`, and return the output `[batch, len, value_heads, Dv]` and the final state.

use burn::tensor::{Tensor, backend::Backend};
use decider_ops::GatedDeltaRule;

pub use decider_ops::generic::CHUNK_SIZE;

/// The prefill path (any length, optional initial state): the backend's scan
/// ([`decider_ops::GatedDeltaRule`]: in chunks of [`CHUNK_SIZE`] by default, as GPUs want it;
/// token by token on the CPU backends).
pub fn gated_delta_rule<B: GatedDeltaRule>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    g: Tensor<B, 3>,
    beta: Tensor<B, 3>,
    initial_state: Option<Tensor<B, 4>>,
) -> (Tensor<B, 4>, Tensor<B, 4>) {
    let [batch, _, heads, dv] = v.dims();
    let (q, k) = prepare_query_key(q, k, heads);
    let dk = q.dims()[3];
    let state = initial_state.unwrap_or_else(|| Tensor::zeros([batch, heads, dk, dv], &v.device()));
    decider_ops::gated_delta_rule(q, k, v, g, beta, state)
}

/// Recurrent form: one token at a time (the decode path; also the reference for the chunked form).
pub fn recurrent_gated_delta_rule<B: Backend>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    g: Tensor<B, 3>,
    beta: Tensor<B, 3>,
    initial_state: Option<Tensor<B, 4>>,
) -> (Tensor<B, 4>, Tensor<B, 4>) {
    let [batch, len, heads, dv] = v.dims();
    let (q, k) = prepare_query_key(q, k, heads);
    let dk = q.dims()[3];
    let mut state = initial_state.unwrap_or_else(|| Tensor::zeros([batch, heads, dk, dv], &v.device()));
    // Token t as [batch, heads, 1, width].
    let token = |x: &Tensor<B, 4>, t: usize| x.clone().narrow(1, t, 1).swap_dims(1, 2);
    let scalar = |x: &Tensor<B, 3>, t: usize| x.clone().narrow(1, t, 1).reshape([batch, heads, 1, 1]);
    let mut outputs = Vec::with_capacity(len);
    for t in 0..len {
        let k_t = token(&k, t);
        state = state * scalar(&g, t).exp();
        let predicted = k_t.clone().matmul(state.clone()); // (S^T k)^T: [batch, heads, 1, Dv]
        let delta = (token(&v, t) - predicted) * scalar(&beta, t);
        state = state + k_t.swap_dims(2, 3).matmul(delta);
        outputs.push(token(&q, t).matmul(state.clone()));
    }
    (Tensor::cat(outputs, 2).swap_dims(1, 2), state)
}

/// Repeat-interleaves q and k from key heads to `value_heads` (value head `h` reads key head
/// `h / (value_heads / key_heads)`), l2-normalises them and scales q by `Dk^-0.5`.
fn prepare_query_key<B: Backend>(q: Tensor<B, 4>, k: Tensor<B, 4>, value_heads: usize) -> (Tensor<B, 4>, Tensor<B, 4>) {
    let [batch, len, key_heads, dk] = q.dims();
    let group = value_heads / key_heads;
    let repeat = |x: Tensor<B, 4>| {
        if group == 1 {
            x
        } else {
            x.unsqueeze_dim::<5>(3).expand([batch, len, key_heads, group, dk]).reshape([batch, len, value_heads, dk])
        }
    };
    let q = l2_normalize(repeat(q)).mul_scalar((dk as f64).powf(-0.5));
    (q, l2_normalize(repeat(k)))
}

/// `x * rsqrt(sum(x^2, last) + 1e-6)`, as FLA and transformers do (a division, not `recip`,
/// which is approximate on some backends).
fn l2_normalize<B: Backend>(x: Tensor<B, 4>) -> Tensor<B, 4> {
    let sum_square = x.clone().powi_scalar(2).sum_dim(3);
    x / sum_square.add_scalar(1e-6).sqrt()
}
