//! Checkpoint names -> modules (spec §11). The functions below read like the weight list of the
//! spec: each module is built from the tensors of the same name.
//!
//! Two layouts are accepted: released checkpoints (`model.language_model.` prefix, fused 3-D
//! experts, `model.visual.*` and `mtp.*` ignored) and transformers' `save_pretrained` of the text
//! model (`model.` prefix, per-expert 2-D tensors). Linear weights are stored `[out, in]` and
//! transposed on the host to burn's `[in, out]` while loading.

use std::path::Path;

use burn::module::Param;
use burn::nn::{Embedding, Linear};
use burn::tensor::{Tensor, TensorData, backend::Backend};

use crate::attention::GatedAttention;
use crate::checkpoint::Checkpoint;
use crate::config::{LayerType, Qwen35Config};
use crate::decoder::{DecoderLayer, FeedForward, TokenMixer};
use crate::delta_net::GatedDeltaNet;
use crate::error::LoadError;
use crate::mlp::Mlp;
use crate::model::Qwen35Model;
use crate::moe::{Experts, SparseMoe};
use crate::norm::{GatedRmsNorm, RmsNorm};

/// Loads `config.json` and the safetensors weights of a model folder.
pub fn load_model<B: Backend>(dir: impl AsRef<Path>, device: &B::Device) -> Result<(Qwen35Config, Qwen35Model<B>), LoadError> {
    let dir = dir.as_ref();
    let config = Qwen35Config::from_file(dir.join("config.json"))?;
    let checkpoint = Checkpoint::open_dir(dir)?;
    let model = load_weights(&config, &checkpoint, device)?;
    Ok((config, model))
}

/// Builds the model of `config` from the tensors of `checkpoint`.
pub fn load_weights<B: Backend>(config: &Qwen35Config, checkpoint: &Checkpoint, device: &B::Device) -> Result<Qwen35Model<B>, LoadError> {
    let prefix = ["model.language_model.", "model."]
        .into_iter()
        .find(|prefix| checkpoint.contains(&format!("{prefix}embed_tokens.weight")))
        .ok_or_else(|| LoadError::MissingTensor {
            name: "model.embed_tokens.weight (or model.language_model.embed_tokens.weight)".into(),
        })?;
    let loader = Loader { checkpoint, config, device };
    let (vocab, hidden) = (config.vocab_size, config.hidden_size);
    let layers = (0..config.num_hidden_layers)
        .map(|i| loader.decoder_layer(&format!("{prefix}layers.{i}"), config.layer_types[i]))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Qwen35Model {
        embed_tokens: Embedding { weight: Param::from_tensor(loader.tensor(&format!("{prefix}embed_tokens.weight"), [vocab, hidden])?) },
        layers,
        norm: loader.rms_norm(&format!("{prefix}norm"), hidden)?,
        lm_head: match config.tie_word_embeddings {
            true => None,
            false => Some(loader.linear("lm_head", hidden, vocab)?),
        },
        rotary_dim: config.rotary_dim(),
        rope_theta: config.rope_theta,
    })
}

struct Loader<'a, B: Backend> {
    checkpoint: &'a Checkpoint,
    config: &'a Qwen35Config,
    device: &'a B::Device,
}

impl<B: Backend> Loader<'_, B> {
    fn decoder_layer(&self, p: &str, kind: LayerType) -> Result<DecoderLayer<B>, LoadError> {
        let hidden = self.config.hidden_size;
        Ok(DecoderLayer {
            input_layernorm: self.rms_norm(&format!("{p}.input_layernorm"), hidden)?,
            mixer: match kind {
                LayerType::LinearAttention => TokenMixer::LinearAttn(self.delta_net(&format!("{p}.linear_attn"))?),
                LayerType::FullAttention => TokenMixer::SelfAttn(self.attention(&format!("{p}.self_attn"))?),
            },
            post_attention_layernorm: self.rms_norm(&format!("{p}.post_attention_layernorm"), hidden)?,
            mlp: match self.config.intermediate_size {
                Some(width) => FeedForward::Dense(self.mlp(&format!("{p}.mlp"), width)?),
                None => FeedForward::Sparse(self.moe(&format!("{p}.mlp"))?),
            },
        })
    }

    fn delta_net(&self, p: &str) -> Result<GatedDeltaNet<B>, LoadError> {
        let c = self.config;
        let (hidden, hv) = (c.hidden_size, c.linear_num_value_heads);
        let (conv_dim, kernel) = (c.linear_conv_dim(), c.linear_conv_kernel_dim);
        Ok(GatedDeltaNet {
            in_proj_qkv: self.linear(&format!("{p}.in_proj_qkv"), hidden, conv_dim)?,
            in_proj_z: self.linear(&format!("{p}.in_proj_z"), hidden, c.linear_value_dim())?,
            in_proj_b: self.linear(&format!("{p}.in_proj_b"), hidden, hv)?,
            in_proj_a: self.linear(&format!("{p}.in_proj_a"), hidden, hv)?,
            conv1d: Param::from_tensor(self.tensor::<3>(&format!("{p}.conv1d.weight"), [conv_dim, 1, kernel])?.reshape([conv_dim, kernel])),
            a_log: Param::from_tensor(self.tensor(&format!("{p}.A_log"), [hv])?),
            dt_bias: Param::from_tensor(self.tensor(&format!("{p}.dt_bias"), [hv])?),
            norm: GatedRmsNorm {
                weight: Param::from_tensor(self.tensor(&format!("{p}.norm.weight"), [c.linear_value_head_dim])?),
                eps: c.rms_norm_eps,
            },
            out_proj: self.linear(&format!("{p}.out_proj"), c.linear_value_dim(), hidden)?,
            num_key_heads: c.linear_num_key_heads,
            num_value_heads: hv,
            key_head_dim: c.linear_key_head_dim,
            value_head_dim: c.linear_value_head_dim,
        })
    }

    fn attention(&self, p: &str) -> Result<GatedAttention<B>, LoadError> {
        let c = self.config;
        let (hidden, heads, kv_heads, hd) = (c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim);
        Ok(GatedAttention {
            q_proj: self.linear(&format!("{p}.q_proj"), hidden, heads * 2 * hd)?,
            k_proj: self.linear(&format!("{p}.k_proj"), hidden, kv_heads * hd)?,
            v_proj: self.linear(&format!("{p}.v_proj"), hidden, kv_heads * hd)?,
            o_proj: self.linear(&format!("{p}.o_proj"), heads * hd, hidden)?,
            q_norm: self.rms_norm(&format!("{p}.q_norm"), hd)?,
            k_norm: self.rms_norm(&format!("{p}.k_norm"), hd)?,
            num_attention_heads: heads,
            num_key_value_heads: kv_heads,
            head_dim: hd,
        })
    }

    fn mlp(&self, p: &str, width: usize) -> Result<Mlp<B>, LoadError> {
        let hidden = self.config.hidden_size;
        Ok(Mlp {
            gate_proj: self.linear(&format!("{p}.gate_proj"), hidden, width)?,
            up_proj: self.linear(&format!("{p}.up_proj"), hidden, width)?,
            down_proj: self.linear(&format!("{p}.down_proj"), width, hidden)?,
        })
    }

    fn moe(&self, p: &str) -> Result<SparseMoe<B>, LoadError> {
        let moe = self.config.moe.as_ref().expect("a model without a dense MLP width is MoE");
        let hidden = self.config.hidden_size;
        Ok(SparseMoe {
            gate: self.linear(&format!("{p}.gate"), hidden, moe.num_experts)?,
            experts: self.experts(&format!("{p}.experts"))?,
            shared_expert: self.mlp(&format!("{p}.shared_expert"), moe.shared_expert_intermediate_size)?,
            shared_expert_gate: self.linear(&format!("{p}.shared_expert_gate"), hidden, 1)?,
            num_experts_per_tok: moe.num_experts_per_tok,
        })
    }

    /// Fused `gate_up_proj [E, 2I, H]` / `down_proj [E, H, I]` if present, else per-expert
    /// `{e}.gate_proj.weight [I, H]`, `{e}.up_proj.weight [I, H]`, `{e}.down_proj.weight [H, I]`.
    fn experts(&self, p: &str) -> Result<Experts<B>, LoadError> {
        let moe = self.config.moe.as_ref().expect("MoE config");
        let (e, h, i) = (moe.num_experts, self.config.hidden_size, moe.moe_intermediate_size);
        let fused = format!("{p}.gate_up_proj");
        let (gate_up, down) = if self.checkpoint.contains(&fused) {
            let gate_up = self.checkpoint.read_f32(&fused, &[e, 2 * i, h])?;
            let down = self.checkpoint.read_f32(&format!("{p}.down_proj"), &[e, h, i])?;
            (transpose_batch(&gate_up, e, 2 * i, h), transpose_batch(&down, e, h, i))
        } else {
            let mut gate_up = Vec::with_capacity(e * h * 2 * i);
            let mut down = Vec::with_capacity(e * i * h);
            for expert in 0..e {
                let gate = self.checkpoint.read_f32(&format!("{p}.{expert}.gate_proj.weight"), &[i, h])?;
                let up = self.checkpoint.read_f32(&format!("{p}.{expert}.up_proj.weight"), &[i, h])?;
                let both: Vec<f32> = gate.into_iter().chain(up).collect(); // [2I, H]
                gate_up.extend(transpose_batch(&both, 1, 2 * i, h));
                down.extend(transpose_batch(&self.checkpoint.read_f32(&format!("{p}.{expert}.down_proj.weight"), &[h, i])?, 1, h, i));
            }
            (gate_up, down)
        };
        Ok(Experts {
            gate_up_proj: Param::from_tensor(Tensor::from_data(TensorData::new(gate_up, [e, h, 2 * i]), self.device)),
            down_proj: Param::from_tensor(Tensor::from_data(TensorData::new(down, [e, i, h]), self.device)),
        })
    }

    /// `{name}.weight` stored `[out, in]`, as a bias-free burn `Linear` (`[in, out]`).
    fn linear(&self, name: &str, d_in: usize, d_out: usize) -> Result<Linear<B>, LoadError> {
        let weight = self.checkpoint.read_f32(&format!("{name}.weight"), &[d_out, d_in])?;
        let weight = transpose_batch(&weight, 1, d_out, d_in);
        Ok(Linear {
            weight: Param::from_tensor(Tensor::from_data(TensorData::new(weight, [d_in, d_out]), self.device)),
            bias: None,
        })
    }

    fn rms_norm(&self, name: &str, size: usize) -> Result<RmsNorm<B>, LoadError> {
        Ok(RmsNorm {
            weight: Param::from_tensor(self.tensor(&format!("{name}.weight"), [size])?),
            eps: self.config.rms_norm_eps,
        })
    }

    fn tensor<const D: usize>(&self, name: &str, shape: [usize; D]) -> Result<Tensor<B, D>, LoadError> {
        let values = self.checkpoint.read_f32(name, &shape)?;
        Ok(Tensor::from_data(TensorData::new(values, shape), self.device))
    }
}

/// Transposes each of `batch` row-major `[rows, cols]` matrices to `[cols, rows]`.
fn transpose_batch(values: &[f32], batch: usize, rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; values.len()];
    for b in 0..batch {
        let (src, dst) = (&values[b * rows * cols..(b + 1) * rows * cols], &mut out[b * rows * cols..(b + 1) * rows * cols]);
        for r in 0..rows {
            for c in 0..cols {
                dst[c * rows + r] = src[r * cols + c];
            }
        }
    }
    out
}
