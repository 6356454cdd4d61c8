//! The memory of a model: its weights ([`Qwen35Model::weight_bytes`], sized from the shapes
//! alone), and what a call takes beyond them, bounded from above before it runs, so that a
//! server can refuse a request that would not fit instead of being killed by it.
//!
//! A call ([`Qwen35Model::hidden_states`]) holds three things at its peak: the cache it adds
//! (keys and values of its tokens, the recurrent states of its rows), its output, and the
//! largest working set of one layer on one segment ([`PrefillBlocks`]), attention's scores of
//! one key block included. Each layer counts the f32 values it keeps alive per token row at once
//! beside its own `forward` (`working_values`); this file only composes them. `tests/working_memory.rs`
//! checks the bound against the bytes really allocated, at several widths and shapes.

use burn::tensor::backend::Backend;

use crate::Qwen35Ops;
use crate::attention;
use crate::decoder::{DecoderLayer, TokenMixer};
use crate::model::{PrefillBlocks, Qwen35Model};

/// Bytes of an f32 activation.
const F32: usize = 4;

/// The sizes of a model that set the memory of its calls; no tensors, so any thread can size a
/// request while the model runs on another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallMemory {
    hidden: usize,
    blocks: PrefillBlocks,
    /// f32 values each position adds to the cache of a row (keys and values of every attention layer).
    cache_per_token: usize,
    /// f32 values of a row's recurrent and convolution states (every DeltaNet layer).
    state_per_row: usize,
    /// Per layer: the f32 values alive at once per token row, and the attention heads scoring keys.
    layers: Vec<(usize, usize)>,
}

impl<B: Qwen35Ops> Qwen35Model<B> {
    /// What sets the memory of this model's calls: each layer's own count, composed.
    pub fn call_memory(&self) -> CallMemory {
        let [_, hidden] = self.embed_tokens.dims();
        let (mut cache_per_token, mut state_per_row) = (0, 0);
        for layer in &self.layers {
            match &layer.mixer {
                TokenMixer::SelfAttn(attention) => cache_per_token += attention.cache_values_per_token(),
                TokenMixer::LinearAttn(delta_net) => state_per_row += delta_net.state_values_per_row(),
            }
        }
        let layers = self.layers.iter().map(layer_widths).collect();
        CallMemory { hidden, blocks: self.blocks, cache_per_token, state_per_row, layers }
    }
}

impl<B: Backend> Qwen35Model<B> {
    /// The bytes of this model's parameters in their formats on their backend, counted from
    /// their shapes and dtypes as the model was built ([`crate::loader::WeightSizes`]): of a
    /// lazily built model too (`Qwen35Config::init_with_weights`), so that the weights of a model
    /// larger than this machine can be sized in any format.
    pub fn weight_bytes(&self) -> usize {
        self.sizes.bytes
    }

    /// The number of weights, whatever their format.
    pub fn parameters(&self) -> usize {
        self.sizes.parameters
    }
}

/// The f32 values `layer` keeps alive at once per token row ([`DecoderLayer::working_values`]),
/// and its attention heads (0 for a DeltaNet layer).
fn layer_widths<B: Qwen35Ops>(layer: &DecoderLayer<B>) -> (usize, usize) {
    let heads = match &layer.mixer {
        TokenMixer::SelfAttn(attention) => attention.num_attention_heads,
        TokenMixer::LinearAttn(_) => 0,
    };
    (layer.working_values(), heads)
}

impl CallMemory {
    /// The model's hidden width.
    pub fn hidden(&self) -> usize {
        self.hidden
    }

    /// Bytes of the cache of `batch` rows after `tokens` positions.
    pub fn cache_bytes(&self, batch: usize, tokens: usize) -> usize {
        F32 * batch * (self.state_per_row + self.cache_per_token * tokens)
    }

    /// An upper bound of the bytes [`Qwen35Model::hidden_states`] allocates for `batch` rows of
    /// `tokens` tokens after a cache of `past` positions: the cache it adds (and the recurrent
    /// states it replaces, alive beside it), its output (segments and their concatenation), and
    /// the largest working set of one layer on one segment.
    pub fn call_bytes(&self, batch: usize, tokens: usize, past: usize) -> usize {
        let segment_rows = batch * tokens.min(self.blocks.segment);
        let keys = self.blocks.key_block.min(past + tokens);
        let layer = self
            .layers
            .iter()
            .map(|&(width, heads)| F32 * segment_rows * width + attention::SCORE_BYTES * segment_rows * heads * keys)
            .max()
            .unwrap_or(0);
        let output = 2 * F32 * batch * tokens * self.hidden;
        self.cache_bytes(batch, tokens) + self.cache_bytes(batch, 0) + output + layer
    }
}
