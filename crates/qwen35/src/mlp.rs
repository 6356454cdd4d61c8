//! SwiGLU feed-forward (transformers `models/qwen3_5/modeling_qwen3_5.py`): the dense MLP and the MoE shared expert.

use crate::projection::ProjectionOps;
use burn::config::Config;
use burn::module::Module;
use burn::tensor::{Tensor, backend::Backend};
use decider_ops::{Gating, silu};

use crate::loader::{Load, Loader};
use crate::projection::{Projection, ProjectionConfig};
use crate::weight_format::{FormatOps, ProjectionInput, WeightFormat};

#[derive(Config, Debug)]
pub struct MlpConfig {
    pub hidden_size: usize,
    pub intermediate_size: usize,
}

/// `down_proj(silu(gate_proj(x)) * up_proj(x))`, no biases.
#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    pub gate_proj: Projection<B>,
    pub up_proj: Projection<B>,
    pub down_proj: Projection<B>,
}

impl MlpConfig {
    /// A lazily initialised f32 MLP.
    pub fn init<B: FormatOps>(&self, device: &B::Device) -> Mlp<B> {
        self.load(&Load::lazy(device, WeightFormat::F32).root())
    }

    /// The MLP `{at}.*`.
    pub fn load<B: FormatOps>(&self, at: &Loader<B>) -> Mlp<B> {
        let (h, i) = (self.hidden_size, self.intermediate_size);
        let projection = |name, d_in, d_out, input| ProjectionConfig::new(d_in, d_out, input).load(&at.at(name));
        Mlp {
            gate_proj: projection("gate_proj", h, i, ProjectionInput::Normed),
            up_proj: projection("up_proj", h, i, ProjectionInput::Normed),
            down_proj: projection("down_proj", i, h, ProjectionInput::Product),
        }
    }
}

impl<B: ProjectionOps + Gating> Mlp<B> {
    pub fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        let gate = silu(self.gate_proj.forward(x.clone()));
        self.down_proj.forward(gate * self.up_proj.forward(x))
    }
}

impl<B: Backend> Mlp<B> {
    /// f32 values [`Self::forward`] keeps alive at once per token row: the gate and up
    /// projections, the gate's activation and the product (4 of the SwiGLU width).
    pub fn working_values(&self) -> usize {
        4 * self.gate_proj.dims()[1]
    }
}
