//! SwiGLU feed-forward (spec §8): the dense MLP and the MoE shared expert.

use burn::config::Config;
use burn::module::Module;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::activation::silu;
use burn::tensor::{Tensor, backend::Backend};

#[derive(Config, Debug)]
pub struct MlpConfig {
    pub hidden_size: usize,
    pub intermediate_size: usize,
}

/// `down_proj(silu(gate_proj(x)) * up_proj(x))`, no biases.
#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    pub gate_proj: Linear<B>,
    pub up_proj: Linear<B>,
    pub down_proj: Linear<B>,
}

impl MlpConfig {
    pub fn init<B: Backend>(&self, device: &B::Device) -> Mlp<B> {
        let linear = |i, o| LinearConfig::new(i, o).with_bias(false).init(device);
        Mlp {
            gate_proj: linear(self.hidden_size, self.intermediate_size),
            up_proj: linear(self.hidden_size, self.intermediate_size),
            down_proj: linear(self.intermediate_size, self.hidden_size),
        }
    }
}

impl<B: Backend> Mlp<B> {
    pub fn forward<const D: usize>(&self, x: Tensor<B, D>) -> Tensor<B, D> {
        let gate = silu(self.gate_proj.forward(x.clone()));
        self.down_proj.forward(gate * self.up_proj.forward(x))
    }
}
