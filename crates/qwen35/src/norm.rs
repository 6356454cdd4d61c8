//! The two RMSNorms of Qwen3.5 (transformers `models/qwen3_5/modeling_qwen3_5.py`).

use burn::config::Config;
use burn::module::{Initializer, Module, Param};
use burn::tensor::{Tensor, backend::Backend};
use decider_ops::{Gating, silu};

use crate::loader::Loader;
use crate::weight_format::FormatOps;

/// Configuration of both norm kinds: the normalised width and epsilon.
#[derive(Config, Debug)]
pub struct RmsNormConfig {
    /// Size of the last dimension, which is normalised.
    pub size: usize,
    /// Added to the mean square (`rms_norm_eps`).
    #[config(default = 1e-6)]
    pub eps: f64,
}

/// Zero-centred RMSNorm: `x / rms(x) * (1 + weight)`. Used for the layer norms, the final norm
/// and the attention q/k norms. The checkpoint stores `weight` (near 0), never `1 + weight`.
#[derive(Module, Debug)]
pub struct RmsNorm<B: Backend> {
    /// `[size]`, initialised to zeros (the identity scale).
    pub weight: Param<Tensor<B, 1>>,
    pub eps: f64,
}

/// Gated RMSNorm of the DeltaNet output: `weight * x / rms(x) * silu(gate)`, weight used as-is.
#[derive(Module, Debug)]
pub struct GatedRmsNorm<B: Backend> {
    /// `[size]`, initialised to ones.
    pub weight: Param<Tensor<B, 1>>,
    pub eps: f64,
}

impl RmsNormConfig {
    /// A zero-centred norm with `weight = 0`.
    pub fn init<B: Backend>(&self, device: &B::Device) -> RmsNorm<B> {
        RmsNorm { weight: Initializer::Zeros.init([self.size], device), eps: self.eps }
    }

    /// A gated norm with `weight = 1`.
    pub fn init_gated<B: Backend>(&self, device: &B::Device) -> GatedRmsNorm<B> {
        GatedRmsNorm { weight: Initializer::Ones.init([self.size], device), eps: self.eps }
    }

    /// The zero-centred norm `{at}.weight`.
    pub fn load<B: FormatOps>(&self, at: &Loader<B>) -> RmsNorm<B> {
        RmsNorm { weight: at.param("weight", [self.size], Initializer::Zeros), eps: self.eps }
    }

    /// The gated norm `{at}.weight`.
    pub fn load_gated<B: FormatOps>(&self, at: &Loader<B>) -> GatedRmsNorm<B> {
        GatedRmsNorm { weight: at.param("weight", [self.size], Initializer::Ones), eps: self.eps }
    }
}

/// `x * rsqrt(mean(x^2, last) + eps)`, as a division: ndarray's SIMD `recip` is an
/// approximation (5e-5 relative error), far above the reference's f32 precision.
fn normalize<B: Backend, const D: usize>(x: Tensor<B, D>, eps: f64) -> Tensor<B, D> {
    let mean_square = x.clone().powi_scalar(2).mean_dim(D - 1);
    x / mean_square.add_scalar(eps).sqrt()
}

impl<B: Backend> RmsNorm<B> {
    /// Normalises the last dimension.
    pub fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        let scale = self.weight.val().add_scalar(1.0).unsqueeze::<D>();
        normalize(x, self.eps) * scale
    }
}

impl<B: Gating> GatedRmsNorm<B> {
    /// Normalises the last dimension of `x` and gates it with `silu(gate)` (same shape).
    pub fn forward<const D: usize>(&self, x: Tensor<B, D>, gate: Tensor<B, D>) -> Tensor<B, D> {
        normalize(x, self.eps) * self.weight.val().unsqueeze::<D>() * silu(gate)
    }
}
