//! The Qwen3.5 text model (transformers `models/qwen3_5/modeling_qwen3_5.py`): embeddings, decoder layers, final norm, output head.

use crate::Qwen35Ops;
use burn::module::Module;
use burn::tensor::{Int, Tensor, backend::Backend};

use crate::attention::GatedAttentionConfig;
use crate::cache::ModelCache;
use crate::config::{FeedForwardType, Qwen35Config, TokenMixerKind};
use crate::decoder::{CallInputs, DecoderLayer, DecoderLayerConfig, FeedForwardConfig, TokenMixerConfig};
use crate::delta_net::GatedDeltaNetConfig;
use crate::loader::{Load, Loader, WeightSizes};
use crate::mlp::MlpConfig;
use crate::moe::SparseMoeConfig;
use crate::norm::{RmsNorm, RmsNormConfig};
use crate::rope::RotaryEmbedding;
use crate::token_table::{TokenTable, TokenTableConfig};
use crate::weight_format::{FormatOps, WeightFormat};

#[derive(Module, Debug)]
pub struct Qwen35Model<B: Backend> {
    /// `[vocab, hidden]`.
    pub embed_tokens: TokenTable<B>,
    pub layers: Vec<DecoderLayer<B>>,
    /// Final zero-centred RMSNorm.
    pub norm: RmsNorm<B>,
    /// `[vocab, hidden]`; `None` when the embeddings are tied (the head is `embed_tokens`).
    pub lm_head: Option<TokenTable<B>>,
    /// The rotary frequencies, computed once (the tables of a call's positions are made per call).
    #[module(skip)]
    pub rope: RotaryEmbedding,
    /// How a long call is split to keep its working memory bounded.
    #[module(skip)]
    pub blocks: PrefillBlocks,
    /// The size of the weights, counted as they were built.
    #[module(skip)]
    pub sizes: WeightSizes,
    /// The format the model was built in (each weight's own is
    /// [`crate::weight_format::held_format`]'s).
    #[module(skip)]
    pub format: WeightFormat,
}

/// How a call over many tokens is split so that its working memory is bounded by these sizes,
/// not by the number of tokens: the tokens run through all layers one segment at a time (the
/// cache carries the state from one to the next, as for a prompt sent in parts), and attention
/// reads the keys one block at a time with an online softmax. The result is that of one pass
/// within float rounding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefillBlocks {
    /// Tokens per segment. A multiple of the delta rule's chunk ([`crate::delta_rule::CHUNK_SIZE`])
    /// puts its chunks where one pass would.
    pub segment: usize,
    /// Keys per step of the attention's online softmax.
    pub key_block: usize,
}

impl Default for PrefillBlocks {
    /// 1,024 tokens per segment and per key block: a decision prompt of usual length runs as one
    /// segment and one key block; a 32,768-token state needs per attention layer
    /// `heads x 1024 x 1024` scores (4 MiB per head) instead of `heads x 32768 x 32768` (4 GiB).
    fn default() -> Self {
        Self { segment: 1024, key_block: 1024 }
    }
}

/// Every intermediate of one forward, for layer-by-layer comparison with a reference.
pub struct ForwardTrace<B: Backend> {
    /// `[batch, len, hidden]` token embeddings.
    pub embeddings: Tensor<B, 3>,
    /// One entry per decoder layer.
    pub layers: Vec<LayerTrace<B>>,
    /// Output of the final norm.
    pub norm: Tensor<B, 3>,
    /// `[batch, len, vocab]`.
    pub logits: Tensor<B, 3>,
}

/// Outputs of one decoder layer: its mixer block, its feed-forward block, the residual stream.
pub struct LayerTrace<B: Backend> {
    pub mixer: Tensor<B, 3>,
    pub mlp: Tensor<B, 3>,
    pub hidden: Tensor<B, 3>,
}

impl Qwen35Config {
    /// The configuration of decoder layer `index`.
    pub fn layer_config(&self, index: usize) -> DecoderLayerConfig {
        let h = self.hidden_size;
        let mixer = match self.layer_types[index] {
            TokenMixerKind::LinearAttn => TokenMixerConfig::LinearAttn(
                GatedDeltaNetConfig::new(
                    h,
                    self.linear_num_key_heads,
                    self.linear_num_value_heads,
                    self.linear_key_head_dim,
                    self.linear_value_head_dim,
                    self.linear_conv_kernel_dim,
                )
                .with_rms_norm_eps(self.rms_norm_eps),
            ),
            TokenMixerKind::SelfAttn => TokenMixerConfig::SelfAttn(
                GatedAttentionConfig::new(h, self.num_attention_heads, self.num_key_value_heads, self.head_dim)
                    .with_rms_norm_eps(self.rms_norm_eps),
            ),
        };
        let mlp = match &self.feed_forward {
            FeedForwardType::Moe(moe) => FeedForwardConfig::Sparse(SparseMoeConfig::new(
                h,
                moe.num_experts,
                moe.num_experts_per_tok,
                moe.moe_intermediate_size,
                moe.shared_expert_intermediate_size,
            )),
            FeedForwardType::Dense { intermediate_size } => {
                FeedForwardConfig::Dense(MlpConfig::new(h, *intermediate_size))
            }
        };
        DecoderLayerConfig::new(h, mixer, mlp).with_rms_norm_eps(self.rms_norm_eps)
    }

    /// A model with freshly initialised (random) f32 weights, e.g. for benchmarks and training.
    /// Parameters are initialised lazily: shapes are known at once, memory is taken on first use.
    pub fn init<B: FormatOps>(&self, device: &B::Device) -> Qwen35Model<B> {
        self.init_with_weights(WeightFormat::F32, device)
    }

    /// The model with its weights in `weights` ([`crate::weight_format::held_format`]), lazily
    /// initialised: shapes only, so that a model larger than memory can be sized
    /// ([`Qwen35Model::weight_bytes`]). Block formats initialise to zero weights.
    pub fn init_with_weights<B: FormatOps>(&self, weights: WeightFormat, device: &B::Device) -> Qwen35Model<B> {
        self.load(&Load::lazy(device, weights).root())
    }

    /// The model, each tensor from `root`'s source under its checkpoint name.
    pub fn load<B: FormatOps>(&self, root: &Loader<B>) -> Qwen35Model<B> {
        let h = self.hidden_size;
        let text = root.text_model();
        let table = TokenTableConfig::new(self.vocab_size, h);
        let embed_tokens = table.load(&text.at("embed_tokens"));
        let layers = (0..self.num_hidden_layers)
            .map(|i| {
                let layer = self.layer_config(i).load(&text.at("layers").at(i));
                root.layers_built(i + 1, self.num_hidden_layers);
                layer
            })
            .collect();
        let norm = RmsNormConfig::new(h).with_eps(self.rms_norm_eps).load(&text.at("norm"));
        let lm_head = (!self.tie_word_embeddings).then(|| table.load(&root.at("lm_head")));
        Qwen35Model {
            embed_tokens,
            layers,
            norm,
            lm_head,
            rope: RotaryEmbedding::new(self.rotary_dim(), self.rope_theta),
            blocks: PrefillBlocks::default(),
            sizes: root.sizes(),
            format: root.requested(),
        }
    }
}

impl<B: Backend> Qwen35Model<B> {
    /// The output head's table: `lm_head`, or the embeddings when they are tied.
    pub fn head(&self) -> &TokenTable<B> {
        self.lm_head.as_ref().unwrap_or(&self.embed_tokens)
    }
}

impl<B: Qwen35Ops> Qwen35Model<B> {
    /// Logits `[batch, len, vocab]` of a fresh sequence.
    pub fn forward(&self, ids: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        let mut cache = self.new_cache();
        self.forward_cached(ids, &mut cache)
    }

    /// Logits of `ids` continuing the sequence in `cache`, which is extended by these tokens.
    pub fn forward_cached(&self, ids: Tensor<B, 2, Int>, cache: &mut ModelCache<B>) -> Tensor<B, 3> {
        let hidden = self.hidden_states(ids, cache);
        self.output_head(hidden)
    }

    /// Final-norm hidden states `[batch, len, hidden]` of `ids` continuing `cache`. A caller that
    /// needs only some logits (a decision reads a few label rows) projects these itself.
    /// `ids` must be below `vocab_size` and `cache` must come from this model.
    pub fn hidden_states(&self, ids: Tensor<B, 2, Int>, cache: &mut ModelCache<B>) -> Tensor<B, 3> {
        join(self.segments(ids).map(|ids| self.run(self.embed_tokens.embed(ids), cache, None)).collect())
    }

    /// Every intermediate of a forward over a fresh sequence (run in segments like any call,
    /// the segments' outputs joined).
    pub fn trace(&self, ids: Tensor<B, 2, Int>) -> ForwardTrace<B> {
        let mut cache = self.new_cache();
        let (mut embeddings, mut norms, mut layers) = (Vec::new(), Vec::new(), Vec::new());
        for ids in self.segments(ids) {
            let embedded = self.embed_tokens.embed(ids);
            let mut segment_layers = Vec::with_capacity(self.layers.len());
            norms.push(self.run(embedded.clone(), &mut cache, Some(&mut segment_layers)));
            embeddings.push(embedded);
            layers.push(segment_layers);
        }
        let layers = (0..self.layers.len())
            .map(|i| {
                let part = |part: fn(&LayerTrace<B>) -> &Tensor<B, 3>| {
                    join(layers.iter().map(|s| part(&s[i]).clone()).collect())
                };
                LayerTrace { mixer: part(|t| &t.mixer), mlp: part(|t| &t.mlp), hidden: part(|t| &t.hidden) }
            })
            .collect();
        let norm = join(norms);
        ForwardTrace { embeddings: join(embeddings), layers, logits: self.output_head(norm.clone()), norm }
    }

    /// This model splitting long calls by `blocks` (both sizes at least 1).
    pub fn with_blocks(mut self, blocks: PrefillBlocks) -> Self {
        assert!(blocks.segment > 0 && blocks.key_block > 0, "prefill blocks must be non-empty: {blocks:?}");
        self.blocks = blocks;
        self
    }

    /// `ids` in segments of `blocks.segment` tokens (one, possibly empty, for a short call).
    fn segments(&self, ids: Tensor<B, 2, Int>) -> impl Iterator<Item = Tensor<B, 2, Int>> {
        let len = ids.dims()[1];
        let segment = self.blocks.segment;
        (0..len.div_ceil(segment).max(1)).map(move |i| {
            let start = i * segment;
            ids.clone().narrow(1, start, segment.min(len - start))
        })
    }

    /// An empty cache for this model.
    pub fn new_cache(&self) -> ModelCache<B> {
        ModelCache::new(self.layers.len())
    }

    /// Projects hidden states onto the vocabulary (the tied embeddings or `lm_head`).
    pub fn output_head(&self, hidden: Tensor<B, 3>) -> Tensor<B, 3> {
        self.head().logits(hidden)
    }

    /// Runs the decoder layers and the final norm over one segment of embedded tokens, extending `cache`;
    /// pushes each layer's outputs to `trace` if given.
    fn run(
        &self,
        embeddings: Tensor<B, 3>,
        cache: &mut ModelCache<B>,
        mut trace: Option<&mut Vec<LayerTrace<B>>>,
    ) -> Tensor<B, 3> {
        let [_, len, _] = embeddings.dims();
        let mut hidden = embeddings;
        let (cos, sin) = self.rope.tables(cache.seq_len, len, &hidden.device());
        let call = CallInputs { rope: &self.rope, cos, sin, key_block: self.blocks.key_block };
        for (index, layer) in self.layers.iter().enumerate() {
            let out = layer.forward(hidden, cache.layers[index].as_ref(), &call);
            cache.layers[index] = Some(out.state);
            if let Some(trace) = trace.as_deref_mut() {
                trace.push(LayerTrace { mixer: out.mixer, mlp: out.mlp, hidden: out.hidden.clone() });
            }
            hidden = out.hidden;
        }
        cache.seq_len += len;
        self.norm.forward(hidden)
    }
}

/// The segments' outputs along the sequence; one segment (a usual call) is returned as it is,
/// since a concatenation copies.
fn join<B: Backend>(mut outputs: Vec<Tensor<B, 3>>) -> Tensor<B, 3> {
    if outputs.len() == 1 { outputs.pop().expect("one output") } else { Tensor::cat(outputs, 1) }
}
