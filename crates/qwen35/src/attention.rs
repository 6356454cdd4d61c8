//! Gated full attention (`Qwen3_5Attention` in transformers `models/qwen3_5/modeling_qwen3_5.py`): per-head query/gate split, zero-centred q/k norms, partial
//! RoPE, grouped-query attention and a sigmoid output gate.

use burn::config::Config;
use burn::module::Module;
use burn::tensor::activation::{sigmoid, softmax};
use burn::tensor::{Tensor, TensorData, backend::Backend};

use decider_ops::Q8Matmul;

use crate::cache::KvCache;
use crate::format::WeightFormat;
use crate::projection::{Projection, ProjectionConfig};
use crate::norm::{RmsNorm, RmsNormConfig};
use crate::rope::RotaryEmbedding;

#[derive(Config, Debug)]
pub struct GatedAttentionConfig {
    pub hidden_size: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    #[config(default = 1e-6)]
    pub rms_norm_eps: f64,
    #[config(default = "WeightFormat::F32")]
    pub weights: WeightFormat,
}

/// `self_attn` of the full-attention layers.
#[derive(Module, Debug)]
pub struct GatedAttention<B: Backend> {
    /// `[hidden, heads * 2 * head_dim]`; per head, `head_dim` query columns then `head_dim` gate
    /// columns (interleaved per head, not all queries then all gates).
    pub q_proj: Projection<B>,
    pub k_proj: Projection<B>,
    pub v_proj: Projection<B>,
    pub o_proj: Projection<B>,
    pub q_norm: RmsNorm<B>,
    pub k_norm: RmsNorm<B>,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
}

impl GatedAttentionConfig {
    pub fn init<B: Backend>(&self, device: &B::Device) -> GatedAttention<B> {
        let (heads, kv_heads, hd) = (self.num_attention_heads, self.num_key_value_heads, self.head_dim);
        let linear = |i, o| ProjectionConfig::new(i, o).with_weights(self.weights).init(device);
        let norm = RmsNormConfig::new(hd).with_eps(self.rms_norm_eps);
        GatedAttention {
            q_proj: linear(self.hidden_size, heads * 2 * hd),
            k_proj: linear(self.hidden_size, kv_heads * hd),
            v_proj: linear(self.hidden_size, kv_heads * hd),
            o_proj: linear(heads * hd, self.hidden_size),
            q_norm: norm.init(device),
            k_norm: norm.init(device),
            num_attention_heads: heads,
            num_key_value_heads: kv_heads,
            head_dim: hd,
        }
    }
}

impl<B: Q8Matmul> GatedAttention<B> {
    /// `x`: `[batch, len, hidden]` at positions `past.len..past.len + len`; `cos`/`sin`: RoPE
    /// tables for those positions. Returns the output and the cache extended by these tokens.
    pub fn forward(
        &self,
        x: Tensor<B, 3>,
        past: Option<&KvCache<B>>,
        rope: &RotaryEmbedding,
        cos: &Tensor<B, 2>,
        sin: &Tensor<B, 2>,
    ) -> (Tensor<B, 3>, KvCache<B>) {
        let [batch, len, _] = x.dims();
        let (heads, kv_heads, hd) = (self.num_attention_heads, self.num_key_value_heads, self.head_dim);
        let group = heads / kv_heads;

        let query_gate = self.q_proj.forward(x.clone()).reshape([batch, len, heads, 2 * hd]);
        let query = query_gate.clone().narrow(3, 0, hd);
        let gate = query_gate.narrow(3, hd, hd).reshape([batch, len, heads * hd]);
        let key = self.k_proj.forward(x.clone()).reshape([batch, len, kv_heads, hd]);
        let value = self.v_proj.forward(x).reshape([batch, len, kv_heads, hd]);

        let query = rope.apply(self.q_norm.forward(query).swap_dims(1, 2), cos, sin);
        let key = rope.apply(self.k_norm.forward(key).swap_dims(1, 2), cos, sin);
        let value = value.swap_dims(1, 2);
        let cache = match past {
            Some(past) => KvCache {
                key: Tensor::cat(vec![past.key.clone(), key], 2),
                value: Tensor::cat(vec![past.value.clone(), value], 2),
            },
            None => KvCache { key, value },
        };
        let total = cache.key.dims()[2];

        // Query heads h = kv * group + j share key head kv: group them instead of repeating keys.
        let query = query.reshape([batch, kv_heads, group * len, hd]);
        let scores = query
            .matmul(cache.key.clone().swap_dims(2, 3))
            .mul_scalar((hd as f64).powf(-0.5))
            .reshape([batch, kv_heads, group, len, total]);
        let mask = causal_mask::<B>(len, total, &scores.device()).reshape([1, 1, 1, len, total]);
        let probs = softmax(scores + mask, 4).reshape([batch, kv_heads, group * len, total]);
        let out = probs
            .matmul(cache.value.clone())
            .reshape([batch, heads, len, hd])
            .swap_dims(1, 2)
            .reshape([batch, len, heads * hd]);
        (self.o_proj.forward(out * sigmoid(gate)), cache)
    }
}

/// Additive mask `[len, total]`: query `i` (position `total - len + i`) sees keys up to its own
/// position; later keys get a large negative bias whose softmax weight is exactly 0 in f32 (a
/// finite value, since GPU shading languages do not guarantee infinities).
fn causal_mask<B: Backend>(len: usize, total: usize, device: &B::Device) -> Tensor<B, 2> {
    const MASKED: f32 = -1e30;
    let past = total - len;
    let values: Vec<f32> = (0..len)
        .flat_map(|i| (0..total).map(move |j| if j <= past + i { 0.0 } else { MASKED }))
        .collect();
    Tensor::from_data(TensorData::new(values, [len, total]), device)
}
