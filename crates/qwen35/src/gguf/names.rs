//! Where llama.cpp's converter (`convert_hf_to_gguf.py`, its `Qwen3_5TextModel` and
//! `Qwen3_5MoeTextModel` classes) puts each tensor of a Qwen3.5 checkpoint in a GGUF file, and what
//! it does to the values on the way ([`RULES`]); `docs/gguf.md` has the table.
//!
//! The checkpoint's names are those of `save_pretrained` output (text model under `model.`, the
//! output head `lm_head` at the root); a layer's tensors are under `blk.{i}.` in the file. Files
//! converted without `--no-mtp` also hold the multi-token-prediction layers, after the model's
//! own (counted in `{arch}.block_count`, their number in `{arch}.nextn_predict_layers`); a
//! decision reads no draft tokens, so the settings leave them out and they are never asked for.

/// What the converter did to a tensor's values, undone when it is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transform {
    /// Stored as it is.
    AsIs,
    /// An RMSNorm weight `w` (the model scales by `1 + w`) stored as `1 + w`, the scale llama.cpp
    /// multiplies by: read back as `stored - 1`.
    PlusOne,
    /// `A_log` stored as `-exp(A_log)`, the decay rate llama.cpp uses: read back as `ln(-stored)`.
    NegExp,
}

/// How the converter reordered a DeltaNet tensor's value heads. A checkpoint lists the value
/// heads grouped by the key head they read (`[k0: v0 v1 | k1: v0 v1]`); where there are more value
/// than key heads, the converter writes them tiled (`[k0 v0, k1 v0 | k0 v1, k1 v1]`), for ggml's
/// broadcast. Read back grouped, except `out_proj`'s columns where a head is not whole blocks
/// ([`crate::value_heads::ValueHeadOrder`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heads {
    /// No value heads.
    None,
    /// The rows are value heads (`per_head` rows each: the head width, or 1 for a per-head
    /// scalar), after `after_qk` rows of query and key channels (which stay).
    Rows { per_head: HeadRows, after_qk: bool },
    /// The columns (the input) are value heads of the head width.
    Columns,
}

/// Rows a value head takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadRows {
    /// `linear_value_head_dim` rows.
    Width,
    /// One row (a gate or a per-head scalar).
    One,
}

/// Where a checkpoint tensor is in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// The file's tensors it is made of: one, or the routed experts' gate and up projections,
    /// which the checkpoint fuses along `out` (each expert's gate rows, then its up rows).
    pub names: Vec<String>,
    /// The one tensor that holds those parts already fused as the checkpoint has them, in files
    /// converted with `--fuse-gate-up-exps`; read instead of them where the file has it.
    pub fused: Option<String>,
    pub transform: Transform,
    pub heads: Heads,
}

/// One rule: a checkpoint tensor (its name in a layer, or in the text model, or at the root) and
/// the file's names for it (under `blk.{i}.` for a layer's).
struct Rule {
    checkpoint: &'static str,
    file: &'static [&'static str],
    fused: Option<&'static str>,
    transform: Transform,
    heads: Heads,
}

const fn rule(checkpoint: &'static str, file: &'static [&'static str]) -> Rule {
    Rule { checkpoint, file, fused: None, transform: Transform::AsIs, heads: Heads::None }
}

const fn norm(checkpoint: &'static str, file: &'static [&'static str]) -> Rule {
    Rule { transform: Transform::PlusOne, ..rule(checkpoint, file) }
}

const fn heads(checkpoint: &'static str, file: &'static [&'static str], heads: Heads) -> Rule {
    Rule { heads, ..rule(checkpoint, file) }
}

const V_ROWS: Heads = Heads::Rows { per_head: HeadRows::Width, after_qk: false };
const V_SCALARS: Heads = Heads::Rows { per_head: HeadRows::One, after_qk: false };

/// The tensors of the text model outside the layers (names after `model.`), and the output head.
const MODEL: [Rule; 3] = [
    rule("embed_tokens.weight", &["token_embd.weight"]),
    norm("norm.weight", &["output_norm.weight"]),
    rule("lm_head.weight", &["output.weight"]),
];

/// The tensors of a layer (names after `model.layers.{i}.`, and after `blk.{i}.` in the file).
const LAYER: [Rule; 27] = [
    norm("input_layernorm.weight", &["attn_norm.weight"]),
    norm("post_attention_layernorm.weight", &["post_attention_norm.weight"]),
    // Gated DeltaNet.
    heads(
        "linear_attn.in_proj_qkv.weight",
        &["attn_qkv.weight"],
        Heads::Rows { per_head: HeadRows::Width, after_qk: true },
    ),
    heads("linear_attn.in_proj_z.weight", &["attn_gate.weight"], V_ROWS),
    heads("linear_attn.in_proj_a.weight", &["ssm_alpha.weight"], V_SCALARS),
    heads("linear_attn.in_proj_b.weight", &["ssm_beta.weight"], V_SCALARS),
    heads("linear_attn.out_proj.weight", &["ssm_out.weight"], Heads::Columns),
    rule("linear_attn.norm.weight", &["ssm_norm.weight"]),
    Rule { transform: Transform::NegExp, ..heads("linear_attn.A_log", &["ssm_a"], V_SCALARS) },
    heads("linear_attn.dt_bias", &["ssm_dt.bias"], V_SCALARS),
    // The conv's channels are `[q | k | v]`, one row of taps each.
    heads(
        "linear_attn.conv1d.weight",
        &["ssm_conv1d.weight"],
        Heads::Rows { per_head: HeadRows::Width, after_qk: true },
    ),
    // Gated attention.
    rule("self_attn.q_proj.weight", &["attn_q.weight"]),
    rule("self_attn.k_proj.weight", &["attn_k.weight"]),
    rule("self_attn.v_proj.weight", &["attn_v.weight"]),
    rule("self_attn.o_proj.weight", &["attn_output.weight"]),
    norm("self_attn.q_norm.weight", &["attn_q_norm.weight"]),
    norm("self_attn.k_norm.weight", &["attn_k_norm.weight"]),
    // Dense MLP.
    rule("mlp.gate_proj.weight", &["ffn_gate.weight"]),
    rule("mlp.up_proj.weight", &["ffn_up.weight"]),
    rule("mlp.down_proj.weight", &["ffn_down.weight"]),
    // Sparse MoE.
    rule("mlp.gate.weight", &["ffn_gate_inp.weight"]),
    Rule {
        fused: Some("ffn_gate_up_exps.weight"),
        ..rule("mlp.experts.gate_up_proj", &["ffn_gate_exps.weight", "ffn_up_exps.weight"])
    },
    rule("mlp.experts.down_proj", &["ffn_down_exps.weight"]),
    rule("mlp.shared_expert.gate_proj.weight", &["ffn_gate_shexp.weight"]),
    rule("mlp.shared_expert.up_proj.weight", &["ffn_up_shexp.weight"]),
    rule("mlp.shared_expert.down_proj.weight", &["ffn_down_shexp.weight"]),
    rule("mlp.shared_expert_gate.weight", &["ffn_gate_inp_shexp.weight"]),
];

/// Where checkpoint tensor `name` (`model.layers.3.linear_attn.A_log`, `lm_head.weight`) is in a
/// GGUF file written by llama.cpp's converter; `None` for a name it does not write.
pub fn stored(name: &str) -> Option<Stored> {
    let found = |rules: &[Rule], within: &str, prefix: &str| {
        let rule = rules.iter().find(|rule| rule.checkpoint == within)?;
        Some(Stored {
            names: rule.file.iter().map(|file| format!("{prefix}{file}")).collect(),
            fused: rule.fused.map(|fused| format!("{prefix}{fused}")),
            transform: rule.transform,
            heads: rule.heads,
        })
    };
    if name == "lm_head.weight" {
        return found(&MODEL, name, "");
    }
    let text = name.strip_prefix("model.")?;
    match text.strip_prefix("layers.") {
        Some(layer) => {
            let (index, within) = layer.split_once('.')?;
            let index: usize = index.parse().ok()?;
            found(&LAYER, within, &format!("blk.{index}."))
        }
        None => found(&MODEL, text, ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_as_the_converter_writes_them() {
        let one = |name: &str| stored(name).map(|s| s.names);
        assert_eq!(one("model.embed_tokens.weight"), Some(vec!["token_embd.weight".into()]));
        assert_eq!(one("lm_head.weight"), Some(vec!["output.weight".into()]));
        assert_eq!(one("model.layers.12.linear_attn.A_log"), Some(vec!["blk.12.ssm_a".into()]));
        assert_eq!(
            one("model.layers.3.mlp.experts.gate_up_proj"),
            Some(vec!["blk.3.ffn_gate_exps.weight".into(), "blk.3.ffn_up_exps.weight".into()])
        );
        assert_eq!(
            stored("model.layers.3.mlp.experts.gate_up_proj").unwrap().fused.as_deref(),
            Some("blk.3.ffn_gate_up_exps.weight")
        );
        assert_eq!(stored("model.layers.0.input_layernorm.weight").unwrap().transform, Transform::PlusOne);
        assert_eq!(stored("model.layers.0.linear_attn.norm.weight").unwrap().transform, Transform::AsIs);
        for unknown in ["model.layers.x.mlp.gate.weight", "model.visual.x", "mtp.fc.weight", "model.layers.0.", ""] {
            assert_eq!(stored(unknown), None, "{unknown}");
        }
    }
}
