//! A bias-free linear projection whose weight is held in the format chosen at load.

use burn::config::Config;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::{Tensor, backend::Backend};
use decider_ops::{DenseMatmul, Reshape, dense_matmul, reshape};

use decider_ops::Half;

use crate::format::{HalfWeight, ProjectionInput, Q4Weight, Q8Weight};
use crate::weight_format::{FormatOps, WeightFormat};

#[derive(Config, Debug)]
pub struct ProjectionConfig {
    pub d_input: usize,
    pub d_output: usize,
    /// What the input is (no default: it sets a q8 weight's rounding of it).
    pub input: ProjectionInput,
    #[config(default = "WeightFormat::F32")]
    pub weights: WeightFormat,
}

/// `x W` without bias: burn's `Linear` (`[in, out]`) in f32, Q8_0 or Q4_0 blocks, or 16-bit
/// floats (`[out, in]`).
#[derive(Module, Debug)]
pub enum Projection<B: Backend> {
    Float(Linear<B>),
    Q8(Q8Weight<B, 2>),
    Q4(Q4Weight<B, 2>),
    F16(HalfWeight<B, 2>),
    Bf16(HalfWeight<B, 2>),
}

impl ProjectionConfig {
    pub fn init<B: FormatOps>(&self, device: &B::Device) -> Projection<B> {
        match self.weights.for_input_width(self.d_input) {
            WeightFormat::F32 => {
                Projection::Float(LinearConfig::new(self.d_input, self.d_output).with_bias(false).init(device))
            }
            WeightFormat::Q8 => Projection::Q8(Q8Weight::init([self.d_output, self.d_input], self.input, device)),
            WeightFormat::Q4 => Projection::Q4(Q4Weight::init([self.d_output, self.d_input], device)),
            WeightFormat::F16 => Projection::F16(HalfWeight::init([self.d_output, self.d_input], Half::F16, device)),
            WeightFormat::Bf16 => Projection::Bf16(HalfWeight::init([self.d_output, self.d_input], Half::Bf16, device)),
        }
    }
}

/// What a [`Projection`] computes with: an f32 weight through [`DenseMatmul`] (read in place),
/// the other formats through [`FormatOps`]; its input and output reshaped in place where the
/// backend can ([`Reshape`]).
pub trait ProjectionOps: DenseMatmul + FormatOps + Reshape {}

impl<B: DenseMatmul + FormatOps + Reshape> ProjectionOps for B {}

impl<B: ProjectionOps> Projection<B> {
    /// Projects the last dimension of `x`.
    pub fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        by_rows(x, |x| match self {
            Projection::Float(linear) => dense_matmul(x, linear.weight.val()),
            Projection::Q8(weight) => weight.matmul(x),
            Projection::Q4(weight) => weight.matmul(x),
            Projection::F16(weight) => weight.matmul(x, Half::F16),
            Projection::Bf16(weight) => weight.matmul(x, Half::Bf16),
        })
    }
}

/// burn's bias-free `Linear` as a [`Projection`] computes with f32 weights (burn's own `forward`
/// reshapes, and on ndarray copies, its input and output).
pub fn linear<B: ProjectionOps, const D: usize>(linear: &Linear<B>, x: Tensor<B, D>) -> Tensor<B, D> {
    by_rows(x, |x| dense_matmul(x, linear.weight.val()))
}

/// `product` of `x`'s rows `[rows, last]`, reshaped back to `x`'s leading dimensions.
fn by_rows<B: ProjectionOps, const D: usize>(
    x: Tensor<B, D>,
    product: impl FnOnce(Tensor<B, 2>) -> Tensor<B, 2>,
) -> Tensor<B, D> {
    let mut dims = x.dims();
    let rows = dims[..D - 1].iter().product();
    let out = product(reshape(x, [rows, dims[D - 1]]));
    dims[D - 1] = out.dims()[1];
    reshape(out, dims)
}

impl<B: FormatOps> Projection<B> {
    /// The weight's shape `[in, out]`, whatever its format.
    pub fn dims(&self) -> [usize; 2] {
        match self {
            Projection::Float(linear) => linear.weight.lazy_shape().dims::<2>(),
            Projection::Q8(weight) => {
                let [out, d_in] = weight.weight_dims();
                [d_in, out]
            }
            Projection::Q4(weight) => {
                let [out, d_in] = weight.weight_dims();
                [d_in, out]
            }
            Projection::F16(weight) | Projection::Bf16(weight) => {
                let [out, d_in] = weight.dims();
                [d_in, out]
            }
        }
    }
}
