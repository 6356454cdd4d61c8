//! SwiGLU feed-forward (transformers `models/qwen3_5/modeling_qwen3_5.py`): the dense MLP and the MoE shared expert.

use crate::projection::ProjectionOps;
use burn::config::Config;
use burn::module::Module;
use burn::tensor::{Tensor, backend::Backend};
use decider_ops::{Gating, silu};

use crate::format::ProjectionInput;
use crate::projection::{Projection, ProjectionConfig};
use crate::weight_format::{FormatOps, WeightFormat};

#[derive(Config, Debug)]
pub struct MlpConfig {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    #[config(default = "WeightFormat::F32")]
    pub weights: WeightFormat,
}

/// `down_proj(silu(gate_proj(x)) * up_proj(x))`, no biases.
#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    pub gate_proj: Projection<B>,
    pub up_proj: Projection<B>,
    pub down_proj: Projection<B>,
}

impl MlpConfig {
    pub fn init<B: FormatOps>(&self, device: &B::Device) -> Mlp<B> {
        let linear = |i, o, input| ProjectionConfig::new(i, o, input).with_weights(self.weights).init(device);
        Mlp {
            gate_proj: linear(self.hidden_size, self.intermediate_size, ProjectionInput::Normed),
            up_proj: linear(self.hidden_size, self.intermediate_size, ProjectionInput::Normed),
            down_proj: linear(self.intermediate_size, self.hidden_size, ProjectionInput::Product),
        }
    }
}

impl<B: ProjectionOps + Gating> Mlp<B> {
    pub fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        let gate = silu(self.gate_proj.forward(x.clone()));
        self.down_proj.forward(gate * self.up_proj.forward(x))
    }
}

impl<B: FormatOps> Mlp<B> {
    /// f32 values [`Self::forward`] keeps alive at once per token row: the gate and up
    /// projections, the gate's activation and the product (4 of the SwiGLU width).
    pub fn working_values(&self) -> usize {
        4 * self.gate_proj.dims()[1]
    }
}
