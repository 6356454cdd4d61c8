//! Gated DeltaNet (transformers `models/qwen3_5/modeling_qwen3_5.py`): the linear-attention mixer of three layers in four.

use burn::config::Config;
use burn::module::{Initializer, Module, Param};
use burn::tensor::{Tensor, backend::Backend};
use decider_ops::GatedDeltaRule;
use decider_ops::{CausalConv1d, Gating, causal_conv1d, reshape, sigmoid};

use crate::cache::DeltaNetState;
use crate::delta_rule::{gated_delta_rule, recurrent_gated_delta_rule};
use crate::loader::{Load, Loader};
use crate::norm::{GatedRmsNorm, RmsNormConfig};
use crate::projection::{Projection, ProjectionConfig, ProjectionOps};
use crate::value_heads::ValueHeadOrder;
use crate::weight_format::{FormatOps, ProjectionInput, WeightFormat};

#[derive(Config, Debug)]
pub struct GatedDeltaNetConfig {
    pub hidden_size: usize,
    /// Hk: heads of q and k.
    pub num_key_heads: usize,
    /// Hv: heads of v, of the gates and of the state (a multiple of Hk).
    pub num_value_heads: usize,
    /// Dk.
    pub key_head_dim: usize,
    /// Dv.
    pub value_head_dim: usize,
    /// K of the causal depthwise conv.
    pub conv_kernel_dim: usize,
    #[config(default = 1e-6)]
    pub rms_norm_eps: f64,
}

/// `linear_attn`: four input projections, a causal depthwise conv over `[q | k | v]`, the gated
/// delta rule, a gated RMSNorm and the output projection.
#[derive(Module, Debug)]
pub struct GatedDeltaNet<B: Backend> {
    /// `[hidden, 2 * Hk * Dk + Hv * Dv]`, output `[q | k | v]`, each head-major.
    pub in_proj_qkv: Projection<B>,
    /// `[hidden, Hv * Dv]`: the output gate of the norm.
    pub in_proj_z: Projection<B>,
    /// `[hidden, Hv]`: beta logits.
    pub in_proj_b: Projection<B>,
    /// `[hidden, Hv]`: decay input.
    pub in_proj_a: Projection<B>,
    /// Depthwise conv kernel `[conv_dim, K]` (the checkpoint's `[conv_dim, 1, K]`), no bias.
    pub conv1d: Param<Tensor<B, 2>>,
    /// `[Hv]`: `log A`; the decay is `g = -exp(A_log) * softplus(a + dt_bias)`.
    pub a_log: Param<Tensor<B, 1>>,
    /// `[Hv]`.
    pub dt_bias: Param<Tensor<B, 1>>,
    /// Gated RMSNorm over Dv, one weight shared by all heads.
    pub norm: GatedRmsNorm<B>,
    /// `[Hv * Dv, hidden]`, its input's value heads in `out_proj_heads`' order.
    pub out_proj: Projection<B>,
    #[module(skip)]
    pub out_proj_heads: ValueHeadOrder,
    pub num_key_heads: usize,
    pub num_value_heads: usize,
    pub key_head_dim: usize,
    pub value_head_dim: usize,
}

impl GatedDeltaNetConfig {
    /// A lazily initialised f32 mixer.
    pub fn init<B: FormatOps>(&self, device: &B::Device) -> GatedDeltaNet<B> {
        self.load(&Load::lazy(device, WeightFormat::F32).root())
    }

    /// The mixer `{at}.*` (`linear_attn` in the checkpoint).
    pub fn load<B: FormatOps>(&self, at: &Loader<B>) -> GatedDeltaNet<B> {
        let (h, hv) = (self.hidden_size, self.num_value_heads);
        let key_dim = self.num_key_heads * self.key_head_dim;
        let value_dim = hv * self.value_head_dim;
        let conv_dim = 2 * key_dim + value_dim;
        let projection = |name, d_in, d_out, input| ProjectionConfig::new(d_in, d_out, input).load(&at.at(name));
        let k = self.conv_kernel_dim;
        let conv_bound = 1.0 / (k as f64).sqrt();
        GatedDeltaNet {
            in_proj_qkv: projection("in_proj_qkv", h, conv_dim, ProjectionInput::Normed),
            in_proj_z: projection("in_proj_z", h, value_dim, ProjectionInput::Normed),
            in_proj_b: projection("in_proj_b", h, hv, ProjectionInput::Normed),
            in_proj_a: projection("in_proj_a", h, hv, ProjectionInput::Normed),
            conv1d: at.param_stored_as(
                "conv1d.weight",
                [conv_dim, k],
                &[conv_dim, 1, k],
                Initializer::Uniform { min: -conv_bound, max: conv_bound },
            ),
            // A ~ U(0, 16) as in transformers' init; dt_bias = 1.
            a_log: at.param("A_log", [hv], Initializer::Uniform { min: 0.0, max: 16f64.ln() }),
            dt_bias: at.param("dt_bias", [hv], Initializer::Ones),
            norm: RmsNormConfig::new(self.value_head_dim).with_eps(self.rms_norm_eps).load_gated(&at.at("norm")),
            out_proj: projection("out_proj", value_dim, h, ProjectionInput::Product),
            out_proj_heads: at.value_head_order("out_proj.weight"),
            num_key_heads: self.num_key_heads,
            num_value_heads: self.num_value_heads,
            key_head_dim: self.key_head_dim,
            value_head_dim: self.value_head_dim,
        }
    }
}

impl<B: GatedDeltaRule + CausalConv1d + ProjectionOps + Gating> GatedDeltaNet<B> {
    /// `x`: `[batch, len, hidden]`, continuing from `past` if given. Returns the output and the
    /// state after these tokens. Like transformers, a single token with a past state takes the
    /// recurrent form and everything else the backend's scan ([`decider_ops::GatedDeltaRule`]).
    pub fn forward(&self, x: Tensor<B, 3>, past: Option<&DeltaNetState<B>>) -> (Tensor<B, 3>, DeltaNetState<B>) {
        let [batch, len, _] = x.dims();
        let (hk, hv, dk, dv) = (self.num_key_heads, self.num_value_heads, self.key_head_dim, self.value_head_dim);

        let mixed = self.in_proj_qkv.forward(x.clone());
        let z = reshape(self.in_proj_z.forward(x.clone()), [batch, len, hv, dv]);
        let b = self.in_proj_b.forward(x.clone());
        let a = self.in_proj_a.forward(x);

        // The conv's window starts with the last `K - 1` inputs of the past (zeros for a fresh
        // sequence); its new state is the last `K - 1` of the window.
        let weight = self.conv1d.val();
        let [conv_dim, kernel] = weight.dims();
        let history = past
            .map(|p| p.conv.clone())
            .unwrap_or_else(|| Tensor::zeros([batch, kernel - 1, conv_dim], &mixed.device()));
        let (mixed, conv_state) = causal_conv1d(mixed, history, weight);
        let q = reshape(mixed.clone().narrow(2, 0, hk * dk), [batch, len, hk, dk]);
        let k = reshape(mixed.clone().narrow(2, hk * dk, hk * dk), [batch, len, hk, dk]);
        let v = reshape(mixed.narrow(2, 2 * hk * dk, hv * dv), [batch, len, hv, dv]);

        let beta = sigmoid(b);
        let a_log = self.a_log.val().unsqueeze::<3>();
        let dt_bias = self.dt_bias.val().unsqueeze::<3>();
        let g = a_log.exp().neg() * softplus(a + dt_bias);

        let initial = past.map(|p| p.recurrent.clone());
        let (out, recurrent) = if len == 1 && initial.is_some() {
            recurrent_gated_delta_rule(q, k, v, g, beta, initial)
        } else {
            gated_delta_rule(q, k, v, g, beta, initial)
        };
        let out = self.norm.forward(out, z);
        let out = match self.out_proj_heads {
            ValueHeadOrder::Grouped => reshape(out, [batch, len, hv * dv]),
            ValueHeadOrder::Tiled => {
                reshape(reshape(out, [batch, len, hk, hv / hk, dv]).swap_dims(2, 3), [batch, len, hv * dv])
            }
        };
        (self.out_proj.forward(out), DeltaNetState { conv: conv_state, recurrent })
    }

    /// f32 values [`Self::forward`] keeps alive at once per token row: the projected `[q | k |
    /// v]`, its convolution and the split heads, and what the backend's conv and delta rule keep
    /// beside them ([`CausalConv1d::causal_conv1d_workspace`],
    /// [`GatedDeltaRule::gated_delta_rule_workspace`]); the gate z, the output and its norm (5 of
    /// the value width); beta and the decay (6 a value head).
    pub fn working_values(&self) -> usize {
        let conv = (3 + B::causal_conv1d_workspace()) * self.conv_dim();
        let scan = B::gated_delta_rule_workspace(self.num_value_heads, self.key_head_dim, self.value_head_dim);
        conv + scan + 5 * self.num_value_heads * self.value_head_dim + 6 * self.num_value_heads
    }
}

impl<B: Backend> GatedDeltaNet<B> {
    /// Channels of the causal conv, `[q | k | v]`.
    fn conv_dim(&self) -> usize {
        self.conv1d.lazy_shape().dims::<2>()[0]
    }

    /// f32 values of one row's state ([`DeltaNetState`]): the delta-rule state `S` and the conv's
    /// last `K - 1` inputs.
    pub fn state_values_per_row(&self) -> usize {
        let [conv, kernel] = self.conv1d.lazy_shape().dims::<2>();
        self.num_value_heads * self.key_head_dim * self.value_head_dim + conv * (kernel - 1)
    }
}

/// `log(1 + exp(x))`, linear above 20 like `torch.nn.functional.softplus` (no overflow).
fn softplus<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    let linear = x.clone().greater_elem(20.0);
    let soft = x.clone().clamp_max(20.0).exp().log1p();
    soft.mask_where(linear, x)
}

#[cfg(test)]
mod tests {
    use burn::backend::NdArray;
    use burn::module::Param;
    use burn::tensor::{Distribution, Int, TensorData};

    use super::*;
    use crate::weight::Held;

    /// A mixer whose `out_proj` columns hold its value heads tiled, told so, gives the output of
    /// the same mixer holding them grouped. With 3 key heads and 6 value heads, where tiling is
    /// not its own inverse (with 2 and 4 it is), so the direction of the reorder is checked.
    #[test]
    fn an_out_proj_of_tiled_heads_gives_the_grouped_output() {
        let device = Default::default();
        let (hk, per_key, dv, hidden) = (3, 2, 4, 16);
        let grouped = GatedDeltaNetConfig::new(hidden, hk, hk * per_key, 4, dv, 4).init::<NdArray>(&device);
        let x = Tensor::<NdArray, 3>::random([2, 5, hidden], Distribution::Normal(0.0, 1.0), &device);
        // Run first, so that the lazy parameters are made before the copy shares them.
        let expected = grouped.forward(x.clone(), None).0.into_data().to_vec::<f32>().unwrap();

        // The converter's order: tiled head `j · Hk + g` is grouped head `g · per_key + j`.
        let order: Vec<i64> = (0..hk * per_key)
            .flat_map(|t| (0..dv).map(move |c| (((t % hk) * per_key + t / hk) * dv + c) as i64))
            .collect();
        let Held::F32(weight) = &grouped.out_proj.weight.held else { panic!("an f32 mixer") };
        // An f32 projection holds `Wᵀ`: its rows are the checkpoint's columns.
        let index = Tensor::<NdArray, 1, Int>::from_data(TensorData::new(order, [hk * per_key * dv]), &device);
        let mut tiled = grouped.clone();
        tiled.out_proj.weight.held = Held::F32(Param::from_tensor(weight.val().select(0, index)));
        tiled.out_proj_heads = ValueHeadOrder::Tiled;
        let output =
            |mixer: &GatedDeltaNet<NdArray>| mixer.forward(x.clone(), None).0.into_data().to_vec::<f32>().unwrap();
        let scale = expected.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = |got: Vec<f32>| got.iter().zip(&expected).fold(0f32, |m, (g, e)| m.max((g - e).abs()));
        let error = worst(output(&tiled));
        assert!(scale > 0.0 && error <= 1e-5 * scale, "tiled against grouped: {error} of {scale}");
        // Not vacuous: the tiled weight read as grouped gives another output.
        tiled.out_proj_heads = ValueHeadOrder::Grouped;
        let error = worst(output(&tiled));
        assert!(error > 1e-2 * scale, "the heads' order changes nothing: {error} of {scale}");
    }
}
