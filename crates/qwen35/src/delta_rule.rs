//! The gated delta rule (its chunked and recurrent forms in transformers `models/qwen3_5/modeling_qwen3_5.py`), the recurrence at the heart of Gated DeltaNet.
//!
//! Per batch element and value head, with state `S` (`Dk x Dv`, f32) and for each token:
//! `S <- S exp(g)`, `S <- S + k (beta (v - S^T k))^T`, `o = S^T q`.
//! [`chunked_gated_delta_rule`] computes the same thing 64 tokens at a time with matmuls and one
//! unit-lower-triangular inverse per chunk; [`recurrent_gated_delta_rule`] steps token by token
//! (single-token decoding). Both take the projections as the layer produces them:
//! q, k `[batch, len, key_heads, Dk]`, v `[batch, len, value_heads, Dv]`,
//! g (log decay, <= 0) and beta `[batch, len, value_heads]`. Both l2-normalise q and k, scale q
//! by `Dk^-0.5`, and return the output `[batch, len, value_heads, Dv]` and the final state.

use burn::tensor::{Tensor, TensorData, backend::Backend};
use decider_ops::{UnitLowerInverse, unit_lower_inverse};

/// Tokens per chunk, as in transformers and FLA.
pub const CHUNK_SIZE: usize = 64;

/// Chunked form: the prefill path (any length, optional initial state).
///
/// Batch and heads are folded into one dimension so every matmul has at most two batch
/// dimensions (candle's limit).
pub fn chunked_gated_delta_rule<B: UnitLowerInverse>(
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
    let device = v.device();
    let c = CHUNK_SIZE;
    let chunks = len.div_ceil(c).max(1);
    let padded = chunks * c;
    let bh = batch * heads;

    // [batch * heads, chunks, C, .], right-padded with zeros: beta = 0 writes nothing and
    // g = 0 keeps the state.
    let to_chunks = |x: Tensor<B, 3>, width: usize| -> Tensor<B, 4> {
        let x = if padded == len { x } else { Tensor::cat(vec![x, Tensor::zeros([bh, padded - len, width], &device)], 1) };
        x.reshape([bh, chunks, c, width])
    };
    let heads_first = |x: Tensor<B, 4>, width: usize| to_chunks(x.swap_dims(1, 2).reshape([bh, len, width]), width);
    let per_token = |x: Tensor<B, 3>| to_chunks(x.swap_dims(1, 2).reshape([bh, len, 1]), 1);
    let q = heads_first(q, dk);
    let k = heads_first(k, dk);
    let v = heads_first(v, dv);
    let beta = per_token(beta); // [bh, chunks, C, 1]
    let gamma = per_token(g).cumsum(2); // cumulative log decay inside each chunk, [bh, chunks, C, 1]
    let v_beta = v * beta.clone();
    let k_beta = k.clone() * beta;

    // decay[i, j] = exp(gamma_i - gamma_j) for j <= i, else 0. The exponent is clamped at 0 (it
    // is <= 0 below the diagonal) and the upper part multiplied by 0: no infinities, which GPU
    // shading languages do not guarantee to handle.
    // Both operands are expanded explicitly: burn-wgpu 0.21 computes a subtraction that
    // broadcasts both sides ([.., C, 1] - [.., 1, C]) wrongly.
    let lower = lower_triangle::<B>(c, &device).reshape([1, 1, c, c]);
    let square = [bh, chunks, c, c];
    let diff = gamma.clone().expand(square) - gamma.clone().swap_dims(2, 3).expand(square);
    let decay = diff.clamp_max(0.0).exp() * lower;

    let gamma_exp = gamma.clone().exp();
    let system = k_beta.clone().matmul(k.clone().swap_dims(2, 3)) * decay.clone();
    let inverse = unit_lower_inverse(system);
    let new_values = inverse.clone().matmul(v_beta); // U = (I + L)^-1 (beta v)
    let k_cumdecay = inverse.matmul(k_beta * gamma_exp.clone()); // W = (I + L)^-1 (beta k exp(gamma))
    let intra = q.clone().matmul(k.clone().swap_dims(2, 3)) * decay;

    let last = gamma.clone().narrow(2, c - 1, 1); // [bh, chunks, 1, 1]
    let q = q * gamma_exp;
    let k = k * (last.clone() - gamma).exp();
    let chunk_decay = last.exp();

    let mut state = match initial_state {
        Some(state) => state.reshape([bh, dk, dv]),
        None => Tensor::zeros([bh, dk, dv], &device),
    };
    let chunk = |x: &Tensor<B, 4>, i: usize| -> Tensor<B, 3> { x.clone().narrow(1, i, 1).squeeze_dim::<3>(1) };
    let mut outputs = Vec::with_capacity(chunks);
    for i in 0..chunks {
        let v_new = chunk(&new_values, i) - chunk(&k_cumdecay, i).matmul(state.clone());
        outputs.push(chunk(&q, i).matmul(state.clone()) + chunk(&intra, i).matmul(v_new.clone()));
        state = state * chunk(&chunk_decay, i) + chunk(&k, i).swap_dims(1, 2).matmul(v_new);
    }
    let out = Tensor::cat(outputs, 1).narrow(1, 0, len).reshape([batch, heads, len, dv]).swap_dims(1, 2);
    (out, state.reshape([batch, heads, dk, dv]))
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
            x.unsqueeze_dim::<5>(3)
                .expand([batch, len, key_heads, group, dk])
                .reshape([batch, len, value_heads, dk])
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

/// `[c, c]`: 1 on and below the diagonal, 0 above.
fn lower_triangle<B: Backend>(c: usize, device: &B::Device) -> Tensor<B, 2> {
    let values: Vec<f32> = (0..c).flat_map(|i| (0..c).map(move |j| if j <= i { 1.0 } else { 0.0 })).collect();
    Tensor::from_data(TensorData::new(values, [c, c]), device)
}
