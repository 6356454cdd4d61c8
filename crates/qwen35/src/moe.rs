//! The sparse MoE block of Qwen3.5-MoE (transformers `models/qwen3_5_moe/modeling_qwen3_5_moe.py`): softmax router, top-k, always renormalised,
//! routed SwiGLU experts, plus a shared expert behind a sigmoid gate.

use burn::config::Config;
use burn::module::Module;
use burn::tensor::activation::softmax;
use burn::tensor::{IndexingUpdateOp, Int, Tensor, backend::Backend};
use decider_ops::{ExpertCount, Gating, expert_count, reshape, sigmoid, silu};

use crate::loader::{Load, Loader};
use crate::mlp::{Mlp, MlpConfig};
use crate::projection::{Projection, ProjectionConfig, ProjectionOps};
use crate::weight::Weight;
use crate::weight_format::{FormatOps, ProjectionInput, WeightFormat, WeightUse};

#[derive(Config, Debug)]
pub struct SparseMoeConfig {
    pub hidden_size: usize,
    pub num_experts: usize,
    pub num_experts_per_tok: usize,
    pub moe_intermediate_size: usize,
    pub shared_expert_intermediate_size: usize,
}

/// The routed experts, stacked (`{name}.experts.*`): expert `e` is
/// `down(silu(x W_gate) * (x W_up))`.
#[derive(Module, Debug)]
pub struct Experts<B: Backend> {
    /// `[E, 2I, hidden]`: rows `0..I` the gate projection, `I..2I` the up projection.
    pub gate_up_proj: Weight<B, 3>,
    /// `[E, hidden, I]`.
    pub down_proj: Weight<B, 3>,
}

/// `mlp` of every Qwen3.5-MoE layer.
#[derive(Module, Debug)]
pub struct SparseMoe<B: Backend> {
    /// The router `[E, hidden]`.
    pub gate: Projection<B>,
    pub experts: Experts<B>,
    pub shared_expert: Mlp<B>,
    /// `[1, hidden]`: the shared expert's per-token sigmoid gate.
    pub shared_expert_gate: Projection<B>,
    pub num_experts_per_tok: usize,
}

impl SparseMoeConfig {
    /// A lazily initialised f32 block.
    pub fn init<B: FormatOps>(&self, device: &B::Device) -> SparseMoe<B> {
        self.load(&Load::lazy(device, WeightFormat::F32).root())
    }

    /// The block `{at}.*`.
    pub fn load<B: FormatOps>(&self, at: &Loader<B>) -> SparseMoe<B> {
        let (e, h, i) = (self.num_experts, self.hidden_size, self.moe_intermediate_size);
        let experts = at.at("experts");
        SparseMoe {
            gate: ProjectionConfig::new(h, e, ProjectionInput::Normed).load(&at.at("gate")),
            experts: Experts {
                gate_up_proj: experts.weight("gate_up_proj", [e, 2 * i, h], WeightUse::Matmul(ProjectionInput::Normed)),
                down_proj: experts.weight("down_proj", [e, h, i], WeightUse::Matmul(ProjectionInput::Product)),
            },
            shared_expert: MlpConfig::new(h, self.shared_expert_intermediate_size).load(&at.at("shared_expert")),
            shared_expert_gate: ProjectionConfig::new(h, 1, ProjectionInput::Normed).load(&at.at("shared_expert_gate")),
            num_experts_per_tok: self.num_experts_per_tok,
        }
    }
}

impl<B: ExpertCount + ProjectionOps + Gating> SparseMoe<B> {
    /// `x`: `[batch, len, hidden]`.
    pub fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let [batch, len, hidden] = x.dims();
        let tokens = reshape(x, [batch * len, hidden]);
        let routed = self.routed(tokens.clone());
        let shared = self.shared_expert.forward(tokens.clone()) * sigmoid(self.shared_expert_gate.forward(tokens));
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

        let probs = softmax(self.gate.forward(tokens.clone()), 1);
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
        let [hidden, experts] = self.gate.dims();
        let (_, width) = self.experts.dims();
        2 * experts
            + 4 * self.num_experts_per_tok * hidden
            + 3 * width
            + self.shared_expert.working_values()
            + 2 * hidden
    }
}

impl<B: Backend> Experts<B> {
    /// `(E, I)`: the number of experts and each one's SwiGLU width.
    pub fn dims(&self) -> (usize, usize) {
        let [e, _, i] = self.down_proj.dims;
        (e, i)
    }
}

impl<B: ProjectionOps + Gating> Experts<B> {
    /// `x [rows, hidden] -> [rows, 2I]`, sorted by expert with `counts [E]` rows each: each row's
    /// expert's gate and up projections side by side.
    fn gate_up(&self, x: Tensor<B, 2>, counts: Tensor<B, 1, Int>) -> Tensor<B, 2> {
        self.gate_up_proj.grouped_matmul(x, counts)
    }

    /// `h [rows, I] -> [rows, hidden]`, sorted as for [`Experts::gate_up`]: the down projections.
    fn down(&self, h: Tensor<B, 2>, counts: Tensor<B, 1, Int>) -> Tensor<B, 2> {
        self.down_proj.grouped_matmul(h, counts)
    }
}
