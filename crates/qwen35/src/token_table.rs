//! A `[vocab, hidden]` matrix read by token: the embeddings, and the output head (the same
//! matrix when the embeddings are tied).
//!
//! A prompt reads one row of the embeddings per token and a decision only the option labels'
//! rows of the head, so the table is held in row order in every format ([`WeightUse::Rows`]),
//! never in a matmul kernel's layout. Rows are widened to f32 when read, so what is computed with
//! them is exact for the weights the format holds.

use burn::config::Config;
use burn::module::Module;
use burn::tensor::{Int, Tensor, backend::Backend};
use decider_ops::DenseMatmul;

use crate::loader::{Load, Loader};
use crate::weight::Weight;
use crate::weight_format::{FormatOps, WeightFormat, WeightUse};

#[derive(Config, Debug)]
pub struct TokenTableConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
}

/// The table `{name}.weight [vocab, hidden]`.
#[derive(Module, Debug)]
pub struct TokenTable<B: Backend> {
    pub weight: Weight<B, 2>,
}

impl TokenTableConfig {
    /// A lazily initialised f32 table.
    pub fn init<B: FormatOps>(&self, device: &B::Device) -> TokenTable<B> {
        self.load(&Load::lazy(device, WeightFormat::F32).root())
    }

    /// The table `{at}.weight`.
    pub fn load<B: FormatOps>(&self, at: &Loader<B>) -> TokenTable<B> {
        TokenTable { weight: at.weight("weight", [self.vocab_size, self.hidden_size], WeightUse::Rows) }
    }
}

impl<B: Backend> TokenTable<B> {
    /// `[vocab, hidden]`.
    pub fn dims(&self) -> [usize; 2] {
        self.weight.dims
    }
}

impl<B: FormatOps + DenseMatmul> TokenTable<B> {
    /// The rows of `ids [batch, len]`: `[batch, len, hidden]`.
    pub fn embed(&self, ids: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        let [batch, len] = ids.dims();
        let [_, hidden] = self.dims();
        self.rows(ids.reshape([batch * len])).reshape([batch, len, hidden])
    }

    /// Rows `index [n]` in f32: `[n, hidden]`.
    pub fn rows(&self, index: Tensor<B, 1, Int>) -> Tensor<B, 2> {
        self.weight.rows(index)
    }

    /// Every row's dot product with each of `hidden [batch, len, hidden]`: `[batch, len, vocab]`.
    pub fn logits(&self, hidden: Tensor<B, 3>) -> Tensor<B, 3> {
        let [batch, len, width] = hidden.dims();
        let [vocab, _] = self.dims();
        self.weight.row_products(hidden.reshape([batch * len, width])).reshape([batch, len, vocab])
    }
}
