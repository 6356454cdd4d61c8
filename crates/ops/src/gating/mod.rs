//! The gates of the Qwen3.5 layers, `sigmoid(x)` and `silu(x) = x · sigmoid(x)`, applied to
//! whole activations in every layer (SwiGLU's `[tokens, 6144]` gate in each of decider-2b's).
//!
//! An extension because burn 0.21's default `sigmoid` (`ActivationOps::sigmoid`) is `exp(-log(1
//! + exp(-x)))`: three transcendental functions in five passes over the tensor, and burn-ndarray
//! runs each pass on one thread, so on two cores the other idled through 6 % of a decider-2b
//! decision. A kernel does it in one parallel pass with one `exp` a value.

use burn::tensor::ops::FloatTensor;
use burn::tensor::{Tensor, TensorPrimitive, backend::Backend};

// The kernels, one file per backend; every other backend takes the generic form.
#[cfg(feature = "cpu-kernels")]
pub mod cpu;
#[cfg(feature = "ndarray")]
mod ndarray;
#[cfg(test)]
mod tests;

crate::backends::generic_forms!(Gating, kernels: ndarray);

/// `sigmoid` and `silu`, elementwise, any shape.
pub trait Gating: Backend {
    /// `1 / (1 + exp(-x))`. The default is [`generic::sigmoid`], burn's.
    fn sigmoid(x: FloatTensor<Self>) -> FloatTensor<Self> {
        generic::sigmoid::<Self>(x)
    }

    /// `x · sigmoid(x)`. The default is [`generic::silu`], burn's `x * sigmoid(x)`.
    fn silu(x: FloatTensor<Self>) -> FloatTensor<Self> {
        generic::silu::<Self>(x)
    }
}

/// `1 / (1 + exp(-x))`, elementwise.
pub fn sigmoid<B: Gating, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(<B as Gating>::sigmoid(x.into_primitive().tensor())))
}

/// `x · sigmoid(x)` (SiLU, swish), elementwise.
pub fn silu<B: Gating, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(<B as Gating>::silu(x.into_primitive().tensor())))
}

/// The generic gates, burn's: [`Gating`]'s defaults.
pub mod generic {
    use burn::tensor::backend::Backend;
    use burn::tensor::ops::{ActivationOps, FloatTensor};

    /// burn's `sigmoid` (`ActivationOps::sigmoid`).
    pub fn sigmoid<B: Backend>(x: FloatTensor<B>) -> FloatTensor<B> {
        <B as ActivationOps<B>>::sigmoid(x)
    }

    /// burn's `x * sigmoid(x)`.
    pub fn silu<B: Backend>(x: FloatTensor<B>) -> FloatTensor<B> {
        B::float_mul(x.clone(), sigmoid::<B>(x))
    }
}
