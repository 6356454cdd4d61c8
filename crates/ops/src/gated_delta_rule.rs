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
    heads * (3 * crate::generic::CHUNK_SIZE + 2 * dk + 2 * dv)
}

/// [`crate::generic::chunked_gated_delta_rule`] on primitives: the default, and the fallback of
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
    let (out, state) = crate::generic::chunked_gated_delta_rule(
        float4(q),
        float4(k),
        float4(v),
        float3(g),
        float3(beta),
        float4(state),
    );
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
