//! A bias-free linear projection: one [`Weight`], in whatever format the load gave it.

use burn::config::Config;
use burn::module::Module;
use burn::tensor::{Tensor, backend::Backend};
use decider_ops::{DenseMatmul, Reshape, reshape};

use crate::loader::{Load, Loader};
use crate::weight::Weight;
use crate::weight_format::{FormatOps, ProjectionInput, WeightFormat, WeightUse};

#[derive(Config, Debug)]
pub struct ProjectionConfig {
    pub d_input: usize,
    pub d_output: usize,
    /// What the input is (no default: it sets a q8 weight's rounding of it).
    pub input: ProjectionInput,
}

/// `x Wᵀ` without bias, `W [out, in]` (the checkpoint's `{name}.weight`).
#[derive(Module, Debug)]
pub struct Projection<B: Backend> {
    pub weight: Weight<B, 2>,
}

impl ProjectionConfig {
    /// A lazily initialised f32 projection.
    pub fn init<B: FormatOps>(&self, device: &B::Device) -> Projection<B> {
        self.load(&Load::lazy(device, WeightFormat::F32).root())
    }

    /// The projection whose weight is `{at}.weight`.
    pub fn load<B: FormatOps>(&self, at: &Loader<B>) -> Projection<B> {
        Projection { weight: at.weight("weight", [self.d_output, self.d_input], WeightUse::Matmul(self.input)) }
    }
}

/// What a [`Projection`] computes with: its weight's products, its input and output reshaped in
/// place where the backend can ([`Reshape`]).
pub trait ProjectionOps: DenseMatmul + FormatOps + Reshape {}

impl<B: DenseMatmul + FormatOps + Reshape> ProjectionOps for B {}

impl<B: ProjectionOps> Projection<B> {
    /// Projects the last dimension of `x`.
    pub fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        let mut dims = x.dims();
        let rows = dims[..D - 1].iter().product();
        let out = self.weight.matmul(reshape(x, [rows, dims[D - 1]]));
        dims[D - 1] = out.dims()[1];
        reshape(out, dims)
    }
}

impl<B: Backend> Projection<B> {
    /// The weight's shape `[in, out]`.
    pub fn dims(&self) -> [usize; 2] {
        let [d_out, d_in] = self.weight.dims;
        [d_in, d_out]
    }
}
