//! The gated delta rule's scan over a sequence: the recurrence at the heart of Gated DeltaNet.
//!
//! Per batch element and head, with state `S` (`dk x dv`) and for each token:
//! `S <- S exp(g)`, `S <- S + k (beta (v - S^T k))^T`, `o = S^T q`
//! (`torch_recurrent_gated_delta_rule` in transformers `models/qwen3_5/modeling_qwen3_5.py`).
//! GPUs want it in chunks of 64 tokens, as matmuls around one unit-lower-triangular inverse per
//! chunk (`torch_chunk_gated_delta_rule` there; the generic form here); CPUs are faster stepping
//! token by token with the state in cache, as llama.cpp and MLX do on CPUs and Apple GPUs.

use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorPrimitive};

use crate::UnitLowerInverse;

// The kernels, one file per backend; every other backend takes the generic form.
#[cfg(feature = "candle")]
mod candle;
#[cfg(feature = "cpu-kernels")]
pub mod cpu;
#[cfg(feature = "ndarray")]
mod ndarray;
#[cfg(test)]
mod tests;

crate::backends::generic_forms!(GatedDeltaRule, kernels: ndarray, candle);

/// The scan of the gated delta rule over a whole sequence.
pub trait GatedDeltaRule: UnitLowerInverse {
    /// `q`, `k`: `[batch, len, heads, dk]` (l2-normalised, `q` scaled by `dk^-0.5`, one per value
    /// head); `v`: `[batch, len, heads, dv]`; `g` (log decay, `<= 0`) and `beta`: `[batch, len,
    /// heads]`; `state`: `[batch, heads, dk, dv]`, the state before the first token. Returns the
    /// outputs `[batch, len, heads, dv]` and the state after the last token.
    fn gated_delta_rule(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        g: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        state: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        chunked::<Self>(q, k, v, g, beta, state)
    }

    /// f32 values per token a call keeps alive beside its inputs and outputs, for `heads` heads
    /// of `dk` keys and `dv` values: for bounds of a model's memory (`qwen35::CallMemory`). The
    /// default's are its per-chunk matrices and decayed copies; a scan token by token keeps
    /// only its state, which the caller holds anyway.
    fn gated_delta_rule_workspace(heads: usize, dk: usize, dv: usize) -> usize {
        chunked_workspace(heads, dk, dv)
    }
}

/// [`GatedDeltaRule::gated_delta_rule_workspace`] of the chunked form: per head and token, a
/// chunk's three `[C, C]` matrices' rows and two copies of its keys and of its values.
pub(crate) fn chunked_workspace(heads: usize, dk: usize, dv: usize) -> usize {
    heads * (3 * generic::CHUNK_SIZE + 2 * dk + 2 * dv)
}

/// [`generic::chunked_gated_delta_rule`] on primitives: the default, and the fallback of
/// the kernels for what they do not take.
pub(crate) fn chunked<B: UnitLowerInverse>(
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    g: FloatTensor<B>,
    beta: FloatTensor<B>,
    state: FloatTensor<B>,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let float4 = |x| Tensor::<B, 4>::from_primitive(TensorPrimitive::Float(x));
    let float3 = |x| Tensor::<B, 3>::from_primitive(TensorPrimitive::Float(x));
    let (out, state) =
        generic::chunked_gated_delta_rule(float4(q), float4(k), float4(v), float3(g), float3(beta), float4(state));
    (out.into_primitive().tensor(), state.into_primitive().tensor())
}

/// See [`GatedDeltaRule::gated_delta_rule`]; the shapes are checked here.
pub fn gated_delta_rule<B: GatedDeltaRule>(
    q: Tensor<B, 4>,
    k: Tensor<B, 4>,
    v: Tensor<B, 4>,
    g: Tensor<B, 3>,
    beta: Tensor<B, 3>,
    state: Tensor<B, 4>,
) -> (Tensor<B, 4>, Tensor<B, 4>) {
    let ([batch, len, heads, dk], [vb, vl, vh, dv]) = (q.dims(), v.dims());
    assert!(
        k.dims() == [batch, len, heads, dk]
            && [vb, vl, vh] == [batch, len, heads]
            && g.dims() == [batch, len, heads]
            && beta.dims() == [batch, len, heads]
            && state.dims() == [batch, heads, dk, dv],
        "gated_delta_rule: q {:?}, k {:?}, v {:?}, g {:?}, beta {:?} and state {:?} do not match",
        q.dims(),
        k.dims(),
        v.dims(),
        g.dims(),
        beta.dims(),
        state.dims()
    );
    let float = |x: Tensor<B, 4>| x.into_primitive().tensor();
    let (out, state) = B::gated_delta_rule(
        float(q),
        float(k),
        float(v),
        g.into_primitive().tensor(),
        beta.into_primitive().tensor(),
        float(state),
    );
    let wrap = |x| Tensor::<B, 4>::from_primitive(TensorPrimitive::Float(x));
    (wrap(out), wrap(state))
}

/// The generic scan, in chunks as GPUs want it, in burn tensor ops: [`GatedDeltaRule`]'s default.
pub mod generic {
    use burn::tensor::{Tensor, TensorData, backend::Backend};

    use crate::UnitLowerInverse;

    /// Tokens per chunk of [`chunked_gated_delta_rule`], as in transformers and FLA.
    pub const CHUNK_SIZE: usize = 64;

    /// The gated delta rule in chunks of [`CHUNK_SIZE`] tokens (transformers'
    /// `torch_chunk_gated_delta_rule`): per chunk, the intra-chunk part as matmuls around one
    /// unit-lower-triangular inverse, then the state carried from chunk to chunk. Inputs and outputs
    /// as [`crate::GatedDeltaRule::gated_delta_rule`].
    ///
    /// Batch and heads are folded into one dimension so every matmul has at most two batch
    /// dimensions (candle's limit).
    pub fn chunked_gated_delta_rule<B: UnitLowerInverse>(
        q: Tensor<B, 4>,
        k: Tensor<B, 4>,
        v: Tensor<B, 4>,
        g: Tensor<B, 3>,
        beta: Tensor<B, 3>,
        initial_state: Tensor<B, 4>,
    ) -> (Tensor<B, 4>, Tensor<B, 4>) {
        let [batch, len, heads, dv] = v.dims();
        let dk = q.dims()[3];
        let device = v.device();
        if len == 0 {
            // Nothing to scan (and burn's reshape reads a 0 in a shape as "keep this dimension").
            return (Tensor::zeros([batch, 0, heads, dv], &device), initial_state);
        }
        let c = CHUNK_SIZE;
        let chunks = len.div_ceil(c);
        let padded = chunks * c;
        let bh = batch * heads;

        // [batch * heads, chunks, C, .], right-padded with zeros: beta = 0 writes nothing and
        // g = 0 keeps the state.
        let to_chunks = |x: Tensor<B, 3>, width: usize| -> Tensor<B, 4> {
            let x = if padded == len {
                x
            } else {
                Tensor::cat(vec![x, Tensor::zeros([bh, padded - len, width], &device)], 1)
            };
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
        let inverse = crate::unit_lower_inverse(system);
        let new_values = inverse.clone().matmul(v_beta); // U = (I + L)^-1 (beta v)
        let k_cumdecay = inverse.matmul(k_beta * gamma_exp.clone()); // W = (I + L)^-1 (beta k exp(gamma))
        let intra = q.clone().matmul(k.clone().swap_dims(2, 3)) * decay;

        let last = gamma.clone().narrow(2, c - 1, 1); // [bh, chunks, 1, 1]
        let q = q * gamma_exp;
        let k = k * (last.clone() - gamma).exp();
        let chunk_decay = last.exp();

        let mut state = initial_state.reshape([bh, dk, dv]);
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

    /// `[c, c]`: 1 on and below the diagonal, 0 above.
    fn lower_triangle<B: Backend>(c: usize, device: &B::Device) -> Tensor<B, 2> {
        let values: Vec<f32> = (0..c).flat_map(|i| (0..c).map(move |j| if j <= i { 1.0 } else { 0.0 })).collect();
        Tensor::from_data(TensorData::new(values, [c, c]), device)
    }
}
