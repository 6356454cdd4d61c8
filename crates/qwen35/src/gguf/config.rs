//! The model's settings from a GGUF file's metadata: the keys llama.cpp's converter writes for
//! `qwen35` and `qwen35moe` (`{arch}.block_count`, `{arch}.ssm.group_count`, …), read into the
//! fields of a `config.json` and validated by [`Qwen35Config::from_json`], the one place a
//! configuration is checked. `docs/gguf.md` lists the keys.

use serde_json::{Map, Value as Json, json};

use super::file::{Array, GgufFile, Value};
use crate::config::Qwen35Config;
use crate::error::LoadError;

/// The architectures read, with the `model_type` of the flat `config.json` each is.
const ARCHITECTURES: [(&str, &str); 2] = [("qwen35", "qwen3_5_text"), ("qwen35moe", "qwen3_5_moe_text")];

/// The Qwen3.5 configuration of `file`, from its metadata and the shapes of its token tables
/// (the vocabulary is the embeddings' rows; the output head is tied when the file has none).
pub fn config_of(file: &GgufFile) -> Result<Qwen35Config, LoadError> {
    let refuse = |reason: String| LoadError::Gguf { path: file.path().to_path_buf(), reason };
    let keys = Keys { file };
    let arch = keys.string("general.architecture").map_err(refuse)?;
    let Some((_, model_type)) = ARCHITECTURES.iter().find(|(name, _)| *name == arch) else {
        let known: Vec<&str> = ARCHITECTURES.iter().map(|(name, _)| *name).collect();
        return Err(refuse(format!(
            "its architecture is `{arch}`, not Qwen3.5 (this build reads {})",
            known.join(" and ")
        )));
    };
    let key = |name: &str| format!("{arch}.{name}");
    let int = |name: &str| keys.int(&key(name)).map_err(refuse);
    let float = |name: &str| keys.float(&key(name)).map_err(refuse);
    let embeddings = file
        .tensors()
        .get("token_embd.weight")
        .ok_or_else(|| LoadError::MissingTensor { name: "token_embd.weight".into() })?;
    let head_dim = int("attention.key_length")?;
    let value_length = int("attention.value_length")?;
    if value_length != head_dim {
        return Err(refuse(format!(
            "`{}` is {value_length} but `{}` is {head_dim}: Qwen3.5's attention heads have one width",
            key("attention.value_length"),
            key("attention.key_length")
        )));
    }
    let value_heads = int("ssm.time_step_rank")?;
    let inner = int("ssm.inner_size")?;
    if value_heads == 0 || !inner.is_multiple_of(value_heads) {
        return Err(refuse(format!(
            "`{}` ({inner}) is not a whole number of `{}` ({value_heads}) value heads",
            key("ssm.inner_size"),
            key("ssm.time_step_rank")
        )));
    }
    // The converter counts the multi-token-prediction layers in `block_count` (after the
    // model's own, not recurrent) and says how many there are: a decision runs without them.
    let blocks = int("block_count")?;
    let mtp = match file.metadata().contains_key(&key("nextn_predict_layers")) {
        true => int("nextn_predict_layers")?,
        false => 0,
    };
    let Some(layers) = blocks.checked_sub(mtp).filter(|&layers| layers > 0) else {
        return Err(refuse(format!(
            "`{}` is {blocks} but `{}` is {mtp}: no layers are left for the model",
            key("block_count"),
            key("nextn_predict_layers")
        )));
    };
    let recurrent = keys.bools(&key("attention.recurrent_layers")).map_err(refuse)?;
    if recurrent.len() != blocks {
        return Err(refuse(format!(
            "`{}` lists {} layers but `{}` is {blocks}",
            key("attention.recurrent_layers"),
            recurrent.len(),
            key("block_count")
        )));
    }
    let recurrent = &recurrent[..layers];
    let layer_types: Vec<&str> =
        recurrent.iter().map(|&linear| if linear { "linear_attention" } else { "full_attention" }).collect();
    let mut config = json!({
        "model_type": model_type,
        "vocab_size": embeddings.dims.first().copied().unwrap_or(0),
        "hidden_size": int("embedding_length")?,
        "num_hidden_layers": layers,
        "num_attention_heads": int("attention.head_count")?,
        "num_key_value_heads": int("attention.head_count_kv")?,
        "head_dim": head_dim,
        "rms_norm_eps": float("attention.layer_norm_rms_epsilon")?,
        "tie_word_embeddings": !file.tensors().contains_key("output.weight"),
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": float("rope.freq_base")?,
            "partial_rotary_factor": int("rope.dimension_count")? as f64 / head_dim.max(1) as f64,
        },
        "linear_conv_kernel_dim": int("ssm.conv_kernel")?,
        "linear_key_head_dim": int("ssm.state_size")?,
        "linear_value_head_dim": inner / value_heads,
        "linear_num_key_heads": int("ssm.group_count")?,
        "linear_num_value_heads": value_heads,
        "layer_types": layer_types,
    });
    let fields: &mut Map<String, Json> = config.as_object_mut().expect("an object");
    if arch == "qwen35moe" {
        fields.insert("num_experts".into(), int("expert_count")?.into());
        fields.insert("num_experts_per_tok".into(), int("expert_used_count")?.into());
        fields.insert("moe_intermediate_size".into(), int("expert_feed_forward_length")?.into());
        fields.insert("shared_expert_intermediate_size".into(), int("expert_shared_feed_forward_length")?.into());
    } else {
        fields.insert("intermediate_size".into(), int("feed_forward_length")?.into());
    }
    Qwen35Config::from_json(&config.to_string())
        .map_err(|error| refuse(format!("its metadata is not a valid Qwen3.5 configuration: {error}")))
}

/// The metadata of a file, read by key; each read says what is missing or of the wrong type.
struct Keys<'a> {
    file: &'a GgufFile,
}

impl Keys<'_> {
    fn get(&self, key: &str) -> Result<&Value, String> {
        self.file.metadata().get(key).ok_or_else(|| format!("it has no `{key}`"))
    }

    fn wrong(key: &str, value: &Value, expected: &str) -> String {
        format!("`{key}` is a {}, not {expected}", value.type_name())
    }

    fn string(&self, key: &str) -> Result<&str, String> {
        match self.get(key)? {
            Value::String(s) => Ok(s),
            other => Err(Self::wrong(key, other, "a string")),
        }
    }

    /// A count or width: any integer type, not negative.
    fn int(&self, key: &str) -> Result<usize, String> {
        let value = self.get(key)?;
        let wide: Option<i128> = match *value {
            Value::U8(v) => Some(v.into()),
            Value::I8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::I16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::I32(v) => Some(v.into()),
            Value::U64(v) => Some(v.into()),
            Value::I64(v) => Some(v.into()),
            _ => return Err(Self::wrong(key, value, "an integer")),
        };
        wide.and_then(|v| usize::try_from(v).ok()).ok_or_else(|| format!("`{key}` is {value:?}, not a count"))
    }

    /// A float, as the decimal its f32 prints as (`1e-6` stored as an f32 reads as 1e-6, not as
    /// the f32's exact 9.99999997e-7, so a GGUF and its checkpoint give the model the same eps).
    fn float(&self, key: &str) -> Result<f64, String> {
        match *self.get(key)? {
            Value::F32(v) => Ok(v.to_string().parse().expect("an f32 prints as a float")),
            Value::F64(v) => Ok(v),
            ref other => Err(Self::wrong(key, other, "a float")),
        }
    }

    fn bools(&self, key: &str) -> Result<&[bool], String> {
        match self.get(key)? {
            Value::Array(Array::Bool(values)) => Ok(values),
            other => Err(Self::wrong(key, other, "an array of bools")),
        }
    }
}
