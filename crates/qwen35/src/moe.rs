//! The sparse MoE block of Qwen3.5-MoE (transformers `models/qwen3_5_moe/modeling_qwen3_5_moe.py`): softmax router, top-k, always renormalised,
//! routed SwiGLU experts, plus a shared expert behind a sigmoid gate.

use burn::config::Config;
use burn::module::{Initializer, Module, Param};
use burn::nn::{Linear, LinearConfig};
use burn::tensor::activation::softmax;
use burn::tensor::{IndexingUpdateOp, Int, Tensor, backend::Backend};
use decider_ops::{ExpertCount, Half, expert_count, grouped_matmul};
use decider_ops::{Gating, reshape, sigmoid, silu};

use crate::projection::{ProjectionOps, linear};

use crate::format::{HalfWeight, ProjectionInput, Q4Weight, Q8Weight};
use crate::mlp::{Mlp, MlpConfig};
use crate::weight_format::{FormatOps, WeightFormat};

#[derive(Config, Debug)]
pub struct SparseMoeConfig {
    pub hidden_size: usize,
    pub num_experts: usize,
    pub num_experts_per_tok: usize,
    pub moe_intermediate_size: usize,
    pub shared_expert_intermediate_size: usize,
    /// Format of the routed and shared experts; the router and the shared expert's gate stay f32.
    #[config(default = "WeightFormat::F32")]
    pub weights: WeightFormat,
}

/// The routed experts, stacked: expert `e` is `down(silu(x W_gate) * (x W_up))`.
#[derive(Module, Debug)]
pub enum Experts<B: Backend> {
    Float(FloatExperts<B>),
    Q8(Q8Experts<B>),
    Q4(Q4Experts<B>),
    F16(HalfExperts<B>),
    Bf16(HalfExperts<B>),
}

/// The experts in Q8_0 blocks, in the checkpoint's orientation.
#[derive(Module, Debug)]
pub struct Q8Experts<B: Backend> {
    /// `[E, 2I, hidden]`: rows `0..I` the gate projection, `I..2I` the up projection.
    pub gate_up_proj: Q8Weight<B, 3>,
    /// `[E, hidden, I]`.
    pub down_proj: Q8Weight<B, 3>,
}

/// The experts in Q4_0 blocks, as [`Q8Experts`].
#[derive(Module, Debug)]
pub struct Q4Experts<B: Backend> {
    /// `[E, 2I, hidden]`: rows `0..I` the gate projection, `I..2I` the up projection.
    pub gate_up_proj: Q4Weight<B, 3>,
    /// `[E, hidden, I]`.
    pub down_proj: Q4Weight<B, 3>,
}

/// The experts in 16-bit floats, as [`Q8Experts`].
#[derive(Module, Debug)]
pub struct HalfExperts<B: Backend> {
    /// `[E, 2I, hidden]`: rows `0..I` the gate projection, `I..2I` the up projection.
    pub gate_up_proj: HalfWeight<B, 3>,
    /// `[E, hidden, I]`.
    pub down_proj: HalfWeight<B, 3>,
}

/// The experts in f32, each weight `[in, out]`.
#[derive(Module, Debug)]
pub struct FloatExperts<B: Backend> {
    /// `[E, hidden, 2 * I]`: columns `0..I` are the gate projection, `I..2I` the up projection
    /// (the checkpoint's fused `[E, 2I, hidden]`, transposed per expert).
    pub gate_up_proj: Param<Tensor<B, 3>>,
    /// `[E, I, hidden]` (the checkpoint's `[E, hidden, I]`, transposed per expert).
    pub down_proj: Param<Tensor<B, 3>>,
}

/// `mlp` of every Qwen3.5-MoE layer.
#[derive(Module, Debug)]
pub struct SparseMoe<B: Backend> {
    /// Router `[hidden, E]`.
    pub gate: Linear<B>,
    pub experts: Experts<B>,
    pub shared_expert: Mlp<B>,
    /// `[hidden, 1]`: the shared expert's per-token sigmoid gate.
    pub shared_expert_gate: Linear<B>,
    pub num_experts_per_tok: usize,
}

impl SparseMoeConfig {
    pub fn init<B: FormatOps>(&self, device: &B::Device) -> SparseMoe<B> {
        let (e, h, i) = (self.num_experts, self.hidden_size, self.moe_intermediate_size);
        let linear = |i, o| LinearConfig::new(i, o).with_bias(false).init(device);
        let normal = |fan_in: usize| Initializer::Normal { mean: 0.0, std: 1.0 / (fan_in as f64).sqrt() };
        SparseMoe {
            gate: linear(h, e),
            experts: match self.weights.for_input_width(h).for_input_width(i) {
                WeightFormat::F32 => Experts::Float(FloatExperts {
                    gate_up_proj: normal(h).init([e, h, 2 * i], device),
                    down_proj: normal(i).init([e, i, h], device),
                }),
                WeightFormat::Q8 => Experts::Q8(Q8Experts {
                    gate_up_proj: Q8Weight::init([e, 2 * i, h], ProjectionInput::Normed, device),
                    down_proj: Q8Weight::init([e, h, i], ProjectionInput::Product, device),
                }),
                WeightFormat::Q4 => Experts::Q4(Q4Experts {
                    gate_up_proj: Q4Weight::init([e, 2 * i, h], device),
                    down_proj: Q4Weight::init([e, h, i], device),
                }),
                WeightFormat::F16 => Experts::F16(half_experts(e, h, i, Half::F16, device)),
                WeightFormat::Bf16 => Experts::Bf16(half_experts(e, h, i, Half::Bf16, device)),
            },
            shared_expert: MlpConfig::new(h, self.shared_expert_intermediate_size)
                .with_weights(self.weights)
                .init(device),
            shared_expert_gate: linear(h, 1),
            num_experts_per_tok: self.num_experts_per_tok,
        }
    }
}

/// Lazy 16-bit experts in `half`: `e` experts of SwiGLU width `i` on `h`.
fn half_experts<B: Backend>(e: usize, h: usize, i: usize, half: Half, device: &B::Device) -> HalfExperts<B> {
    HalfExperts {
        gate_up_proj: HalfWeight::init([e, 2 * i, h], half, device),
        down_proj: HalfWeight::init([e, h, i], half, device),
    }
}

impl<B: ExpertCount + ProjectionOps + Gating> SparseMoe<B> {
    /// `x`: `[batch, len, hidden]`.
    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let [batch, len, hidden] = x.dims();
        let tokens = reshape(x, [batch * len, hidden]);
        let routed = self.routed(tokens.clone());
        let shared = self.shared_expert.forward(tokens.clone()) * sigmoid(linear(&self.shared_expert_gate, tokens));
        reshape(routed + shared, [batch, len, hidden])
    }

    /// Routes each of the `[n, hidden]` tokens to its top-k experts and sums their outputs,
    /// weighted by the renormalised router probabilities.
    ///
    /// The `n * k` (token, slot) pairs are sorted by expert and counted per expert; the grouped
    /// matmuls then run every expert on its contiguous rows in one call per projection, and the
    /// results are weighted and added back to their tokens.
    fn routed(&self, tokens: Tensor<B, 2>) -> Tensor<B, 2> {
        let [n, hidden] = tokens.dims();
        let k = self.num_experts_per_tok;
        let (num_experts, intermediate) = self.experts.dims();
        let device = tokens.device();
        if n == 0 {
            return Tensor::zeros([0, hidden], &device);
        }

        let probs = softmax(linear(&self.gate, tokens.clone()), 1);
        let (weights, experts) = probs.topk_with_indices(k, 1);
        let weights = weights.clone() / weights.sum_dim(1);

        // Pairs in expert order; `order[p]` is the flat (token * k + slot) index of pair p.
        let (sorted_experts, order) = experts.reshape([n * k]).sort_with_indices(0);
        let counts = expert_count(sorted_experts, num_experts);
        // Token of flat pair p is p / k, gathered instead of divided (candle has no int division).
        let token_of_flat =
            Tensor::<B, 1, Int>::arange(0..n as i64, &device).unsqueeze_dim::<2>(1).expand([n, k]).reshape([n * k]);
        let token_of_pair = token_of_flat.select(0, order.clone());
        let pair_weights = weights.reshape([n * k]).select(0, order).reshape([n * k, 1]);
        let rows = tokens.select(0, token_of_pair.clone());

        let h = self.experts.gate_up(rows, counts.clone());
        let h = silu(h.clone().narrow(1, 0, intermediate)) * h.narrow(1, intermediate, intermediate);
        let expert_out = self.experts.down(h, counts) * pair_weights;
        Tensor::zeros([n, hidden], &device).select_assign(0, token_of_pair, expert_out, IndexingUpdateOp::Add)
    }
}

impl<B: FormatOps> SparseMoe<B> {
    /// f32 values [`Self::forward`] keeps alive at once per token row: the router's logits and
    /// probabilities (2 an expert); each token's k rows gathered, their outputs, joined and
    /// weighted (4 k of the hidden width); one expert's SwiGLU, on every token at worst (3 of its
    /// width); the shared expert; the scattered sum (2 of the hidden width).
    pub fn working_values(&self) -> usize {
        let [hidden, experts] = self.gate.weight.lazy_shape().dims::<2>();
        let (_, width) = self.experts.dims();
        2 * experts
            + 4 * self.num_experts_per_tok * hidden
            + 3 * width
            + self.shared_expert.working_values()
            + 2 * hidden
    }
}

impl<B: FormatOps> Experts<B> {
    /// `(E, I)`: the number of experts and each one's SwiGLU width.
    pub fn dims(&self) -> (usize, usize) {
        match self {
            Experts::Float(experts) => {
                let [e, i, _] = experts.down_proj.lazy_shape().dims::<3>();
                (e, i)
            }
            Experts::Q8(experts) => {
                let [e, _, i] = experts.down_proj.weight_dims();
                (e, i)
            }
            Experts::Q4(experts) => {
                let [e, _, i] = experts.down_proj.weight_dims();
                (e, i)
            }
            Experts::F16(experts) | Experts::Bf16(experts) => {
                let [e, _, i] = experts.down_proj.dims();
                (e, i)
            }
        }
    }
}

impl<B: ProjectionOps + Gating> Experts<B> {
    /// `x [rows, hidden] -> [rows, 2I]`, sorted by expert with `counts [E]` rows each: each row's
    /// expert's gate and up projections side by side.
    fn gate_up(&self, x: Tensor<B, 2>, counts: Tensor<B, 1, Int>) -> Tensor<B, 2> {
        match self {
            Experts::Float(experts) => grouped_matmul(x, experts.gate_up_proj.val(), counts),
            Experts::Q8(experts) => experts.gate_up_proj.grouped_matmul(x, counts),
            Experts::Q4(experts) => experts.gate_up_proj.grouped_matmul(x, counts),
            Experts::F16(experts) => experts.gate_up_proj.grouped_matmul(x, counts, Half::F16),
            Experts::Bf16(experts) => experts.gate_up_proj.grouped_matmul(x, counts, Half::Bf16),
        }
    }

    /// `h [rows, I] -> [rows, hidden]`, sorted as for [`Experts::gate_up`]: the down projections.
    fn down(&self, h: Tensor<B, 2>, counts: Tensor<B, 1, Int>) -> Tensor<B, 2> {
        match self {
            Experts::Float(experts) => grouped_matmul(h, experts.down_proj.val(), counts),
            Experts::Q8(experts) => experts.down_proj.grouped_matmul(h, counts),
            Experts::Q4(experts) => experts.down_proj.grouped_matmul(h, counts),
            Experts::F16(experts) => experts.down_proj.grouped_matmul(h, counts, Half::F16),
            Experts::Bf16(experts) => experts.down_proj.grouped_matmul(h, counts, Half::Bf16),
        }
    }
}
