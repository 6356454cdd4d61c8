//! State carried between calls of an incremental forward (the cache of transformers `models/qwen3_5/modeling_qwen3_5.py`).
//!
//! Running a prompt as `prefix` then `rest` with one cache gives the same output as one pass;
//! a cache is cheap to clone (tensors are reference-counted), so a shared prefix can be run once
//! and forked for every continuation.

use burn::tensor::{Tensor, backend::Backend};

/// Keys and values of one full-attention layer: one block per call that extended it, in
/// position order. Blocks are never concatenated, so a long prompt run in segments is not
/// copied again with every segment, and a block of batch 1 is shared by every row of a later
/// batch (a state's prefix is held once, however many question rows continue it).
#[derive(Debug, Clone, Default)]
pub struct KvCache<B: Backend> {
    pub blocks: Vec<KvBlock<B>>,
}

/// The keys and values of one call's tokens, `[kv_heads, batch, seq, head_dim]` (kv-head major, so
/// that the rows of a batch fold into one matmul over a shared block). Keys are stored after
/// `k_norm` and RoPE. `batch` is the batch of the call, or 1 for a block every row shares.
#[derive(Debug, Clone)]
pub struct KvBlock<B: Backend> {
    pub key: Tensor<B, 4>,
    pub value: Tensor<B, 4>,
}

impl<B: Backend> KvCache<B> {
    /// Positions held.
    pub fn len(&self) -> usize {
        self.blocks.iter().map(|b| b.key.dims()[2]).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// This cache continued by `n` rows per row: blocks of batch 1 stay shared, others are
    /// repeated along the batch.
    fn repeat_batch(&self, n: usize) -> Self {
        let repeat = |x: &Tensor<B, 4>| if x.dims()[1] == 1 { x.clone() } else { x.clone().repeat_dim(1, n) };
        Self { blocks: self.blocks.iter().map(|b| KvBlock { key: repeat(&b.key), value: repeat(&b.value) }).collect() }
    }
}

/// State of one Gated DeltaNet layer.
#[derive(Debug, Clone)]
pub struct DeltaNetState<B: Backend> {
    /// The last `K - 1` pre-conv inputs, `[batch, K - 1, conv_dim]` (time-major).
    pub conv: Tensor<B, 3>,
    /// The delta-rule state `S`, `[batch, value_heads, key_head_dim, value_head_dim]`, f32.
    pub recurrent: Tensor<B, 4>,
}

/// The state a layer's token mixer keeps between calls, by its kind ([`crate::TokenMixerKind`]).
#[derive(Debug, Clone)]
pub enum TokenMixerState<B: Backend> {
    LinearAttn(DeltaNetState<B>),
    SelfAttn(KvCache<B>),
}

/// The state of every layer after the tokens seen so far.
#[derive(Debug, Clone)]
pub struct ModelCache<B: Backend> {
    pub(crate) layers: Vec<Option<TokenMixerState<B>>>,
    pub(crate) seq_len: usize,
}

impl<B: Backend> ModelCache<B> {
    /// An empty cache for a model of `num_layers` layers.
    pub fn new(num_layers: usize) -> Self {
        Self { layers: vec![None; num_layers], seq_len: 0 }
    }

    /// Tokens already run through the model (the position of the next token).
    pub fn seq_len(&self) -> usize {
        self.seq_len
    }

    /// The state of layer `index`, if that layer has run.
    pub fn layer(&self, index: usize) -> Option<&TokenMixerState<B>> {
        self.layers.get(index).and_then(Option::as_ref)
    }

    /// This cache repeated `n` times along the batch: `n` different continuations of one prefix
    /// run as one batch. Attention blocks of batch 1 are shared, not copied.
    pub fn repeat_batch(&self, n: usize) -> Self {
        let layers = self
            .layers
            .iter()
            .map(|layer| {
                layer.as_ref().map(|state| match state {
                    TokenMixerState::SelfAttn(kv) => TokenMixerState::SelfAttn(kv.repeat_batch(n)),
                    TokenMixerState::LinearAttn(dn) => TokenMixerState::LinearAttn(DeltaNetState {
                        conv: dn.conv.clone().repeat_dim(0, n),
                        recurrent: dn.recurrent.clone().repeat_dim(0, n),
                    }),
                })
            })
            .collect();
        Self { layers, seq_len: self.seq_len }
    }
}
