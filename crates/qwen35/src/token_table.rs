//! A `[vocab, hidden]` matrix read by token: the embeddings, and the output head (the same
//! matrix when the embeddings are tied).
//!
//! A prompt reads one row of the embeddings per token and a decision only the option labels'
//! rows of the head, so the table is kept in row order in every format, never in a matmul
//! kernel's layout. Rows are dequantized (or widened) to f32 when read, so what is computed with
//! them is exact for the weights the format holds.

use burn::config::Config;
use burn::module::{Module, Param};
use burn::nn::{Embedding, EmbeddingConfig};
use burn::tensor::{Int, Tensor, backend::Backend};
use decider_ops::{BlockInts, Half, Q8_BLOCK, block_scales_f32, q8_values_f32};

use crate::format::{HalfWeight, lazy_q8_params};
use crate::weight_format::{FormatOps, WeightFormat};

/// Rows dequantized at a time by [`TokenTable::logits`]: 4,096 rows of 2,048 values are
/// 64 MiB of f32 (cast, then scaled), where the whole table of decider-2b would be 1.9 GiB.
const LOGIT_ROWS: usize = 4096;

#[derive(Config, Debug)]
pub struct TokenTableConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    #[config(default = "WeightFormat::F32")]
    pub weights: WeightFormat,
}

/// The table in f32 (burn's `Embedding`, `weight [vocab, hidden]`), in Q8_0 blocks, or in 16-bit
/// floats (`[vocab, hidden]`: rows, like a projection's weight `[out, in]`).
#[derive(Module, Debug)]
pub enum TokenTable<B: Backend> {
    Float(Embedding<B>),
    Q8(Q8Rows<B>),
    F16(HalfWeight<B, 2>),
    Bf16(HalfWeight<B, 2>),
}

/// Rows in Q8_0 blocks along `hidden`, in row order (see `decider_ops::q8_rows`).
#[derive(Module, Debug)]
pub struct Q8Rows<B: Backend> {
    /// `[vocab, hidden]` values in `-127..=127`, as the backend holds them (`decider_ops::q8_rows`).
    pub values: Param<Tensor<B, 2, Int>>,
    /// `[vocab, hidden / 32]`: each block's scale, as f16 bits (`decider_ops::block_scales`).
    pub scales: Param<Tensor<B, 2, Int>>,
}

impl TokenTableConfig {
    /// A lazy table: shapes only, filled from a checkpoint or at first use.
    pub fn init<B: FormatOps>(&self, device: &B::Device) -> TokenTable<B> {
        match self.weights.for_input_width(self.hidden_size) {
            WeightFormat::F32 => {
                TokenTable::Float(EmbeddingConfig::new(self.vocab_size, self.hidden_size).init(device))
            }
            // 8-bit in `q4` too: the head's rows are the label logits themselves.
            WeightFormat::Q8 | WeightFormat::Q4 => {
                let (values, scales) = lazy_q8_params([self.vocab_size, self.hidden_size], device);
                TokenTable::Q8(Q8Rows { values, scales })
            }
            WeightFormat::F16 => {
                TokenTable::F16(HalfWeight::init([self.vocab_size, self.hidden_size], Half::F16, device))
            }
            WeightFormat::Bf16 => {
                TokenTable::Bf16(HalfWeight::init([self.vocab_size, self.hidden_size], Half::Bf16, device))
            }
        }
    }
}

impl<B: FormatOps> TokenTable<B> {
    /// `[vocab, hidden]`, whatever the format.
    pub fn dims(&self) -> [usize; 2] {
        match self {
            TokenTable::Float(embedding) => embedding.weight.lazy_shape().dims(),
            TokenTable::Q8(rows) => B::block_storage().ints_shape(BlockInts::Q8Values, rows.values.lazy_shape().dims()),
            TokenTable::F16(rows) | TokenTable::Bf16(rows) => rows.dims(),
        }
    }

    /// The rows of `ids [batch, len]`: `[batch, len, hidden]`.
    pub fn embed(&self, ids: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        match self {
            TokenTable::Float(embedding) => embedding.forward(ids),
            _ => {
                let [batch, len] = ids.dims();
                let [_, hidden] = self.dims();
                self.rows(ids.reshape([batch * len])).reshape([batch, len, hidden])
            }
        }
    }

    /// Rows `index [n]` in f32: `[n, hidden]`.
    pub fn rows(&self, index: Tensor<B, 1, Int>) -> Tensor<B, 2> {
        match self {
            TokenTable::Float(embedding) => embedding.weight.val().select(0, index),
            TokenTable::Q8(rows) => {
                // Cast before the scales are gathered with the same index: with both gathers
                // queued before the cast, burn-fusion 0.21 on wgpu scaled rows by the wrong
                // scales (`tests/weight_formats.rs` checks every backend).
                let values = q8_values_f32(rows.values.val().select(0, index.clone()));
                dequantize(values, rows.scales.val().select(0, index))
            }
            TokenTable::F16(rows) => rows.rows(index, Half::F16),
            TokenTable::Bf16(rows) => rows.rows(index, Half::Bf16),
        }
    }

    /// Every row's dot product with each of `hidden [batch, len, hidden]`: `[batch, len, vocab]`.
    pub fn logits(&self, hidden: Tensor<B, 3>) -> Tensor<B, 3> {
        match self {
            TokenTable::Float(embedding) => hidden.matmul(embedding.weight.val().transpose().unsqueeze::<3>()),
            _ => {
                let [batch, len, width] = hidden.dims();
                let [vocab, _] = self.dims();
                let x = hidden.reshape([batch * len, width]);
                let parts = (0..vocab)
                    .step_by(LOGIT_ROWS)
                    .map(|start| x.clone().matmul(self.row_range(start, LOGIT_ROWS.min(vocab - start)).transpose()))
                    .collect();
                Tensor::cat(parts, 1).reshape([batch, len, vocab])
            }
        }
    }

    /// Rows `start..start + count` in f32.
    fn row_range(&self, start: usize, count: usize) -> Tensor<B, 2> {
        match self {
            TokenTable::Float(embedding) => embedding.weight.val().narrow(0, start, count),
            TokenTable::Q8(rows) => dequantize(
                q8_values_f32(rows.values.val().narrow(0, start, count)),
                rows.scales.val().narrow(0, start, count),
            ),
            TokenTable::F16(rows) => rows.row_range(start, count, Half::F16),
            TokenTable::Bf16(rows) => rows.row_range(start, count, Half::Bf16),
        }
    }
}

/// `values [n, hidden]` (as floats) times their blocks' `scales [n, hidden / 32]` (f16 bits).
fn dequantize<B: FormatOps>(values: Tensor<B, 2>, scales: Tensor<B, 2, Int>) -> Tensor<B, 2> {
    let [rows, hidden] = values.dims();
    let blocks = hidden / Q8_BLOCK;
    (values.reshape([rows, blocks, Q8_BLOCK]) * block_scales_f32(scales, blocks).reshape([rows, blocks, 1]))
        .reshape([rows, hidden])
}
