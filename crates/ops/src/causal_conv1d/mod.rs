//! The causal depthwise conv of Gated DeltaNet and its SiLU, over time-major activations
//! (`causal_conv1d_fn(..., activation="silu")` of the `causal-conv1d` package, which transformers
//! `models/qwen3_5/modeling_qwen3_5.py` calls, and its `torch_causal_conv1d_update`).
//!
//! An extension because as burn tensor ops it is a concatenation, `K` slices, `K` products and
//! sums and a SiLU: on burn-ndarray, passes over the whole activations that each copy and run on
//! one thread (15 % of the serial time of a decider-2b decision). A kernel does it in one
//! parallel pass.

use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorPrimitive, backend::Backend};

// The kernels, one file per backend; every other backend takes the generic form.
#[cfg(feature = "cpu-kernels")]
pub mod cpu;
#[cfg(feature = "ndarray")]
mod ndarray;
#[cfg(test)]
mod tests;

crate::backends::generic_forms!(CausalConv1d, kernels: ndarray);

/// The conv over a sequence that continues from a history of its last `K - 1` inputs.
pub trait CausalConv1d: Backend {
    /// `x`: `[batch, len, channels]`; `history`: `[batch, K - 1, channels]`, the inputs before
    /// `x` (zeros for a fresh sequence); `weight`: `[channels, K]`. With `window = history ++ x`
    /// along time, returns `silu(Σ_j window[t + j] · weight[:, j])` for each token `t`
    /// (`[batch, len, channels]`) and the window's last `K - 1` rows (the next call's history).
    /// The default is [`generic::causal_conv1d`].
    fn causal_conv1d(
        x: FloatTensor<Self>,
        history: FloatTensor<Self>,
        weight: FloatTensor<Self>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        by_tensor_ops::<Self>(x, history, weight)
    }

    /// Activations of the output's size a call keeps alive beside its input and output, for
    /// bounds of a model's memory (`qwen35::CallMemory`): the default's window, a product and a
    /// running sum. A kernel that writes its output in one pass keeps none.
    fn causal_conv1d_workspace() -> usize {
        GENERIC_WORKSPACE
    }
}

/// [`CausalConv1d::causal_conv1d_workspace`] of the default.
pub(crate) const GENERIC_WORKSPACE: usize = 3;

/// [`generic::causal_conv1d`] on primitives: the default, and the fallback of the kernels for
/// what they do not take.
pub(crate) fn by_tensor_ops<B: Backend>(
    x: FloatTensor<B>,
    history: FloatTensor<B>,
    weight: FloatTensor<B>,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let float3 = |x| Tensor::<B, 3>::from_primitive(TensorPrimitive::Float(x));
    let weight = Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(weight));
    let (out, history) = generic::causal_conv1d(float3(x), float3(history), weight);
    (out.into_primitive().tensor(), history.into_primitive().tensor())
}

/// See [`CausalConv1d::causal_conv1d`]; the shapes are checked here.
pub fn causal_conv1d<B: CausalConv1d>(
    x: Tensor<B, 3>,
    history: Tensor<B, 3>,
    weight: Tensor<B, 2>,
) -> (Tensor<B, 3>, Tensor<B, 3>) {
    let ([batch, _, channels], [hb, past, hc], [wc, kernel]) = (x.dims(), history.dims(), weight.dims());
    assert!(
        kernel >= 1 && [hb, past, hc] == [batch, kernel - 1, channels] && wc == channels,
        "causal_conv1d: x {:?}, history {:?} and weight {:?} do not match",
        x.dims(),
        history.dims(),
        weight.dims()
    );
    let float = |x: FloatTensor<B>| Tensor::from_primitive(TensorPrimitive::Float(x));
    let (out, history) = B::causal_conv1d(
        x.into_primitive().tensor(),
        history.into_primitive().tensor(),
        weight.into_primitive().tensor(),
    );
    (float(out), float(history))
}

/// The generic conv, in burn tensor ops: [`CausalConv1d::causal_conv1d`]'s default.
pub mod generic {
    use burn::tensor::{Tensor, TensorPrimitive, backend::Backend};

    use crate::gating::generic::silu;

    /// The causal conv as burn tensor ops: the window `history ++ x` along time, then for each tap
    /// `j` the window shifted by `j` times the weight's column `j`, summed; burn's SiLU.
    pub fn causal_conv1d<B: Backend>(
        x: Tensor<B, 3>,
        history: Tensor<B, 3>,
        weight: Tensor<B, 2>,
    ) -> (Tensor<B, 3>, Tensor<B, 3>) {
        let [batch, len, channels] = x.dims();
        let kernel = weight.dims()[1];
        // burn cannot narrow to nothing: no tokens leave the history as it is, and with K = 1 there
        // is none.
        if len == 0 {
            return (x, history);
        }
        let (window, history) = match kernel {
            1 => (x, history),
            _ => {
                let window = Tensor::cat(vec![history, x], 1); // [batch, K - 1 + len, channels]
                (window.clone(), window.narrow(1, len, kernel - 1))
            }
        };
        let mut out = Tensor::zeros([batch, len, channels], &window.device());
        for j in 0..kernel {
            let tap = weight.clone().narrow(1, j, 1).reshape([1, 1, channels]);
            out = out + window.clone().narrow(1, j, len) * tap;
        }
        (Tensor::from_primitive(TensorPrimitive::Float(silu::<B>(out.into_primitive().tensor()))), history)
    }
}
