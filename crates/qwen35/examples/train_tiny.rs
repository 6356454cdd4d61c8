//! Reusing the Qwen3.5 layers in a model of your own: a Gated DeltaNet mixer and a sparse MoE
//! feed-forward between an embedding and an output head, trained for a few steps with Adam to
//! predict the next token of a repeating sequence.
//!
//! Run: `cargo run --release -p qwen35 --example train_tiny [--features decider-ops/wgpu]`: it
//! trains on `Autodiff<B>` for every backend compiled in (`decider_ops::for_each_backend!`). The
//! backend only has to implement `qwen35::Qwen35Ops` (the special ops) besides burn's own.

use burn::backend::Autodiff;
use burn::module::{AutodiffModule, Module};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Embedding, EmbeddingConfig, Linear, LinearConfig};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Int, Tensor, TensorData};
use qwen35::Qwen35Ops;
use qwen35::delta_net::{GatedDeltaNet, GatedDeltaNetConfig};
use qwen35::moe::{SparseMoe, SparseMoeConfig};
use qwen35::norm::{RmsNorm, RmsNormConfig};

/// embed -> norm -> DeltaNet (+ residual) -> norm -> MoE (+ residual) -> head.
#[derive(Module, Debug)]
struct TinyModel<B: burn::tensor::backend::Backend> {
    embed: Embedding<B>,
    mixer_norm: RmsNorm<B>,
    mixer: GatedDeltaNet<B>,
    moe_norm: RmsNorm<B>,
    moe: SparseMoe<B>,
    head: Linear<B>,
}

const VOCAB: usize = 16;
const HIDDEN: usize = 32;

impl<B: Qwen35Ops> TinyModel<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            embed: EmbeddingConfig::new(VOCAB, HIDDEN).init(device),
            mixer_norm: RmsNormConfig::new(HIDDEN).init(device),
            mixer: GatedDeltaNetConfig::new(HIDDEN, 2, 4, 8, 8, 4).init(device),
            moe_norm: RmsNormConfig::new(HIDDEN).init(device),
            moe: SparseMoeConfig::new(HIDDEN, 8, 2, 16, 16).init(device),
            head: LinearConfig::new(HIDDEN, VOCAB).init(device),
        }
    }

    fn forward(&self, ids: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        let x = self.embed.forward(ids);
        let (mixed, _state) = self.mixer.forward(self.mixer_norm.forward(x.clone()), None);
        let x = x + mixed;
        let x = x.clone() + self.moe.forward(self.moe_norm.forward(x));
        self.head.forward(x)
    }
}

/// Cross-entropy of next-token prediction on `[batch, len]` ids.
fn loss<B: Qwen35Ops>(model: &TinyModel<B>, ids: &Tensor<B, 2, Int>) -> Tensor<B, 1> {
    let [batch, len] = ids.dims();
    let logits = model.forward(ids.clone().narrow(1, 0, len - 1));
    let targets = ids.clone().narrow(1, 1, len - 1).reshape([batch * (len - 1)]);
    CrossEntropyLossConfig::new().init(&logits.device()).forward(logits.reshape([batch * (len - 1), VOCAB]), targets)
}

/// Trains for `steps` and returns the losses, first to last.
fn train<B: AutodiffBackend + Qwen35Ops>(steps: usize) -> Vec<f32>
where
    B::InnerBackend: Qwen35Ops,
{
    let device = B::Device::default();
    let mut model = TinyModel::<B>::new(&device);
    let mut optimizer = AdamConfig::new().init();
    // A repeating pattern crossing the 64-token chunk of the delta rule.
    let ids: Vec<i64> = (0..2 * 80).map(|i| ((i * 5 + i / 80) % VOCAB) as i64).collect();
    let ids = Tensor::<B, 2, Int>::from_data(TensorData::new(ids, [2, 80]), &device);
    let mut losses = Vec::with_capacity(steps);
    for _ in 0..steps {
        let loss = loss(&model, &ids);
        losses.push(loss.clone().into_data().convert::<f32>().to_vec::<f32>().unwrap()[0]);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optimizer.step(3e-3, model, grads);
    }
    // The trained weights also run without autodiff.
    let _inference = model.valid();
    losses
}

fn report(backend: &str, losses: &[f32]) {
    for (step, loss) in losses.iter().enumerate().step_by(5) {
        println!("{backend} step {step:2}: loss {loss:.4}");
    }
    println!("{backend}: loss {:.4} -> {:.4}", losses[0], losses[losses.len() - 1]);
}

fn main() {
    macro_rules! train_on {
        ($name:ident, $backend:ty, $about:literal) => {
            report(stringify!($name), &train::<Autodiff<$backend>>(30));
        };
    }
    decider_ops::for_each_backend!(train_on);
}
