//! Gated full attention (`Qwen3_5Attention` in transformers `models/qwen3_5/modeling_qwen3_5.py`): per-head query/gate split, zero-centred q/k norms, partial
//! RoPE, grouped-query attention and a sigmoid output gate.

use burn::config::Config;
use burn::module::Module;
use burn::tensor::{Bool, Int, Tensor, backend::Backend};
use decider_ops::{Gating, reshape, sigmoid};

use crate::cache::{KvBlock, KvCache};
use crate::loader::{Load, Loader};
use crate::norm::{RmsNorm, RmsNormConfig};
use crate::projection::{Projection, ProjectionConfig, ProjectionOps};
use crate::rope::RotaryEmbedding;
use crate::weight_format::{FormatOps, ProjectionInput, WeightFormat};

#[derive(Config, Debug)]
pub struct GatedAttentionConfig {
    pub hidden_size: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    #[config(default = 1e-6)]
    pub rms_norm_eps: f64,
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
    /// A lazily initialised f32 mixer.
    pub fn init<B: FormatOps>(&self, device: &B::Device) -> GatedAttention<B> {
        self.load(&Load::lazy(device, WeightFormat::F32).root())
    }

    /// The mixer `{at}.*` (`self_attn` in the checkpoint).
    pub fn load<B: FormatOps>(&self, at: &Loader<B>) -> GatedAttention<B> {
        let (h, heads, kv_heads, hd) =
            (self.hidden_size, self.num_attention_heads, self.num_key_value_heads, self.head_dim);
        let projection = |name, d_in, d_out, input| ProjectionConfig::new(d_in, d_out, input).load(&at.at(name));
        let norm = RmsNormConfig::new(hd).with_eps(self.rms_norm_eps);
        GatedAttention {
            q_proj: projection("q_proj", h, heads * 2 * hd, ProjectionInput::Normed),
            k_proj: projection("k_proj", h, kv_heads * hd, ProjectionInput::Normed),
            v_proj: projection("v_proj", h, kv_heads * hd, ProjectionInput::Normed),
            o_proj: projection("o_proj", heads * hd, h, ProjectionInput::Product),
            q_norm: norm.load(&at.at("q_norm")),
            k_norm: norm.load(&at.at("k_norm")),
            num_attention_heads: heads,
            num_key_value_heads: kv_heads,
            head_dim: hd,
        }
    }
}

impl<B: ProjectionOps + Gating> GatedAttention<B> {
    /// `x`: `[batch, len, hidden]` at positions `past.len()..past.len() + len`; `cos`/`sin`: RoPE
    /// tables for those positions; `key_block`: keys per step of the online softmax. Returns
    /// the output and the cache extended by these tokens (one more block).
    pub fn forward(
        &self,
        x: Tensor<B, 3>,
        past: Option<&KvCache<B>>,
        rope: &RotaryEmbedding,
        cos: &Tensor<B, 2>,
        sin: &Tensor<B, 2>,
        key_block: usize,
    ) -> (Tensor<B, 3>, KvCache<B>) {
        let [batch, len, _] = x.dims();
        let (heads, kv_heads, hd) = (self.num_attention_heads, self.num_key_value_heads, self.head_dim);
        let group = heads / kv_heads;

        let query_gate = reshape(self.q_proj.forward(x.clone()), [batch, len, heads, 2 * hd]);
        let query = query_gate.clone().narrow(3, 0, hd);
        let gate = query_gate.narrow(3, hd, hd).reshape([batch, len, heads * hd]);
        let key = reshape(self.k_proj.forward(x.clone()), [batch, len, kv_heads, hd]);
        let value = reshape(self.v_proj.forward(x), [batch, len, kv_heads, hd]);

        // [batch, heads, len, hd] for the norms and RoPE, then kv-head major: query heads
        // h = kv * group + j share key head kv, so they are grouped, not the keys repeated.
        let query = rope.apply(self.q_norm.forward(query).swap_dims(1, 2), cos, sin);
        let key = rope.apply(self.k_norm.forward(key).swap_dims(1, 2), cos, sin);
        let query =
            query.reshape([batch, kv_heads, group * len, hd]).swap_dims(0, 1).mul_scalar((hd as f64).powf(-0.5));
        let block = KvBlock { key: key.swap_dims(0, 1), value: value.swap_dims(1, 2).swap_dims(0, 1) };
        let mut cache = past.cloned().unwrap_or_default();
        cache.blocks.push(block);

        let out = attend(query, &cache, len, key_block)
            .reshape([kv_heads, batch, group, len, hd])
            .permute([1, 3, 0, 2, 4])
            .reshape([batch, len, heads * hd]);
        (self.o_proj.forward(out * sigmoid(gate)), cache)
    }
}

impl<B: Backend> GatedAttention<B> {
    /// f32 values [`Self::forward`] keeps alive at once per token row, beside the scores of one
    /// key block (`crate::memory` counts those per head): the query and gate projected, the query
    /// normed, rotated and scaled, the output permuted and gated (9 of the query width); the keys
    /// and values projected, normed and rotated (4 of the key width).
    pub fn working_values(&self) -> usize {
        let (query, key) = (self.num_attention_heads * self.head_dim, self.num_key_value_heads * self.head_dim);
        9 * query + 4 * key
    }

    /// f32 values each token adds to this layer's cache: its key and value in every KV head.
    pub fn cache_values_per_token(&self) -> usize {
        2 * self.num_key_value_heads * self.head_dim
    }
}

/// Bytes per query row, head and key of one step of [`attend`]: the scores, their masked copy and
/// their exponentials in f32, and the causal mask.
pub const SCORE_BYTES: usize = 3 * 4 + 1;

/// Causal attention of the last `len` positions of `cache` (whose last block holds them) over
/// every position of `cache`, by key blocks of at most `key_block` with an online softmax (the
/// flash-attention recurrence: a running maximum `m`, denominator `l` and weighted sum `acc`,
/// rescaled by `exp(m_old - m_new)` at each block). The working memory is
/// `rows x key_block`, never `rows x positions`, so a 32,768-token state fits.
///
/// `query`: `[kv_heads, batch, group * len, head_dim]`, scaled, rows `j * len + i` for query head
/// `j` of the group and token `i`. Returns the attention output in the same layout.
pub fn attend<B: Backend>(query: Tensor<B, 4>, cache: &KvCache<B>, len: usize, key_block: usize) -> Tensor<B, 4> {
    let [kv_heads, batch, rows, hd] = query.dims();
    let device = query.device();
    let own = cache.blocks.len() - 1;
    // The batch's rows as one matrix, for blocks every row shares (batch 1); made once.
    let folded = (batch > 1).then(|| query.clone().reshape([kv_heads, 1, batch * rows, hd]));
    let mut state: Option<(Tensor<B, 4>, Tensor<B, 4>, Tensor<B, 4>)> = None;
    for (index, block) in cache.blocks.iter().enumerate() {
        let [_, block_batch, block_len, _] = block.key.dims();
        assert!(
            block_batch == batch || block_batch == 1,
            "a cache block of batch {block_batch} cannot serve a batch of {batch}"
        );
        let mut start = 0;
        while start < block_len {
            let width = key_block.min(block_len - start);
            let key = block.key.clone().narrow(2, start, width);
            let value = block.value.clone().narrow(2, start, width);
            // A shared block (batch 1) serves every row of the batch in one matmul.
            let scores = match &folded {
                Some(folded) if block_batch == 1 => {
                    folded.clone().matmul(key.swap_dims(2, 3)).reshape([kv_heads, batch, rows, width])
                }
                _ => query.clone().matmul(key.swap_dims(2, 3)),
            };
            // Only the call's own block can hold keys after a query's position.
            let scores = if index == own {
                let mask =
                    causal_mask::<B>(len, rows / len, start, width, &device).expand([kv_heads, batch, rows, width]);
                scores.mask_fill(mask, MASKED)
            } else {
                scores
            };
            let block_max = scores.clone().max_dim(3);
            let maximum = match &state {
                Some((m, _, _)) => m.clone().max_pair(block_max),
                None => block_max,
            };
            let weights = (scores - maximum.clone()).exp();
            let block_sum = weights.clone().sum_dim(3);
            let block_out = if folded.is_some() && block_batch == 1 {
                weights.reshape([kv_heads, 1, batch * rows, width]).matmul(value).reshape([kv_heads, batch, rows, hd])
            } else {
                weights.matmul(value)
            };
            state = Some(match state {
                Some((m, l, acc)) => {
                    let rescale = (m - maximum.clone()).exp();
                    (maximum, l * rescale.clone() + block_sum, acc * rescale + block_out)
                }
                None => (maximum, block_sum, block_out),
            });
            start += width;
        }
    }
    let (_, l, acc) = state.expect("the cache holds the call's own block");
    acc / l
}

/// A score that softmax turns into exactly 0 in f32, finite since GPU shading languages do not
/// guarantee infinities.
const MASKED: f32 = -1e30;

/// `[1, 1, group * len, width]`, true where a key of the call's own block (keys
/// `start..start + width` of it) lies after the query row's token (row `j * len + i` is token
/// `i`). Made on the device from two ranges, never as a `[len, positions]` host array.
fn causal_mask<B: Backend>(
    len: usize,
    group: usize,
    start: usize,
    width: usize,
    device: &B::Device,
) -> Tensor<B, 4, Bool> {
    // Compared by broadcasting: only the boolean result has the full shape.
    let token = Tensor::<B, 1, Int>::arange(0..len as i64, device).reshape([1, len, 1]);
    let key = Tensor::<B, 1, Int>::arange(start as i64..(start + width) as i64, device).reshape([1, 1, width]);
    key.greater(token).expand([group, len, width]).reshape([1, 1, group * len, width])
}
