//! The checkpoint of a model folder as a [`TensorSource`]: where its names and layouts differ
//! from what the modules ask for, and loading a model folder.
//!
//! - [`PREFIXES`]: released checkpoints nest the text model under `model.language_model.`
//!   (their `model.visual.*` and `mtp.*` tensors are ignored), transformers' `save_pretrained`
//!   of the text model under `model.`; `lm_head` is at the root in both.
//! - [`EXPERT_PARTS`]: the per-expert tensors of `save_pretrained` output, where released
//!   checkpoints fuse them into one 3-D tensor.
//!
//! The same source writes quantized folders (`crate::quantize`): each tensor read also goes to
//! the folder being written.

use std::cell::RefCell;
use std::path::Path;

use crate::checkpoint::Checkpoint;
use crate::config::Qwen35Config;
use crate::error::LoadError;
use crate::loader::{Load, TensorSource};
use crate::model::Qwen35Model;
use crate::shards::{ShardWriter, Written};
use crate::weight::{WeightValues, stack_dims};
use crate::weight_choice::WeightChoice;
use crate::weight_format::{FormatOps, WeightFormat, WeightUse};

/// Where the text model's tensors start, in the order tried: released checkpoints, then
/// `save_pretrained` output.
pub const PREFIXES: [&str; 2] = ["model.language_model", "model"];

/// Routed experts: `(weight, the per-expert tensors it fuses, in order along `out`)`.
/// `{..}.experts.gate_up_proj [E, 2I, H]` is `{..}.experts.{e}.gate_proj.weight [I, H]` then
/// `{..}.experts.{e}.up_proj.weight [I, H]` for each expert `e`.
pub const EXPERT_PARTS: [(&str, &[&str]); 2] =
    [("gate_up_proj", &["gate_proj", "up_proj"]), ("down_proj", &["down_proj"])];

/// Loads `config.json` and the safetensors weights of a model folder, in f32.
pub fn load_model<B: FormatOps>(
    dir: impl AsRef<Path>,
    device: &B::Device,
) -> Result<(Qwen35Config, Qwen35Model<B>), LoadError> {
    load_model_with_weights(dir, WeightFormat::F32, device)
}

/// Loads a model folder with its weights in `weights` (a format, or `auto` settled from the
/// checkpoint; each weight as [`crate::weight_format::held_format`] holds it), opening its
/// checkpoint once. The format it was loaded in is the model's [`Qwen35Model::format`].
pub fn load_model_with_weights<B: FormatOps>(
    dir: impl AsRef<Path>,
    weights: impl Into<WeightChoice>,
    device: &B::Device,
) -> Result<(Qwen35Config, Qwen35Model<B>), LoadError> {
    let dir = dir.as_ref();
    let config = Qwen35Config::from_file(dir.join("config.json"))?;
    let checkpoint = Checkpoint::open_dir(dir)?;
    let format = weights.into().for_checkpoint::<B>(&checkpoint, device);
    let model = load_weights(&config, &checkpoint, format, device)?;
    Ok((config, model))
}

/// Builds the model of `config` in `weights` from `checkpoint`.
pub fn load_weights<B: FormatOps>(
    config: &Qwen35Config,
    checkpoint: &Checkpoint,
    weights: WeightFormat,
    device: &B::Device,
) -> Result<Qwen35Model<B>, LoadError> {
    let source = CheckpointSource::new(checkpoint)?;
    let load = Load::from(&source, device, weights);
    let model = config.load(&load.root());
    load.finish(model)
}

/// A checkpoint read by name, each tensor read recorded (and written, for `decider quantize`).
pub struct CheckpointSource<'a> {
    checkpoint: &'a Checkpoint,
    prefix: &'static str,
    /// Every tensor read, in order.
    read: RefCell<Vec<String>>,
    writer: Option<RefCell<&'a mut ShardWriter>>,
}

impl<'a> CheckpointSource<'a> {
    /// The checkpoint as a source; its text model's prefix is the first of [`PREFIXES`] under
    /// which it has the embeddings.
    pub fn new(checkpoint: &'a Checkpoint) -> Result<Self, LoadError> {
        let embeddings = |prefix: &str| format!("{prefix}.embed_tokens.weight");
        let prefix = PREFIXES
            .into_iter()
            .find(|prefix| checkpoint.has_weight(&embeddings(prefix)))
            .ok_or_else(|| LoadError::MissingTensor { name: PREFIXES.map(embeddings).join(" or ") })?;
        Ok(Self { checkpoint, prefix, read: RefCell::default(), writer: None })
    }

    /// This source writing each tensor it reads to `writer` (in the checkpoint's names and
    /// orientation, blocks as blocks).
    pub(crate) fn writing_to(self, writer: &'a mut ShardWriter) -> Self {
        Self { writer: Some(RefCell::new(writer)), ..self }
    }

    /// The names of the tensors read so far, in order.
    pub fn tensors_read(&self) -> Vec<String> {
        self.read.borrow().clone()
    }

    /// Reads tensor `name` of `shape` with `read`.
    fn read<T: Written>(
        &self,
        name: &str,
        shape: &[usize],
        read: impl Fn(&str, &[usize]) -> Result<T, LoadError>,
    ) -> Result<T, LoadError> {
        self.read.borrow_mut().push(name.to_owned());
        let values = read(name, shape)?;
        if let Some(writer) = &self.writer {
            values.write(name, shape, &mut writer.borrow_mut())?;
        }
        Ok(values)
    }
}

impl TensorSource for CheckpointSource<'_> {
    fn text_prefix(&self) -> &str {
        self.prefix
    }

    fn f32(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, LoadError> {
        self.read(name, shape, |name, shape| self.checkpoint.read_f32(name, shape))
    }

    /// The tensor `name`, or routed experts stacked from their per-expert tensors.
    fn weight(
        &self,
        name: &str,
        dims: &[usize],
        format: WeightFormat,
        _usage: WeightUse,
    ) -> Result<WeightValues, LoadError> {
        let read = |name: &str, shape: &[usize]| self.checkpoint.read_weight(name, shape, format);
        let (module, field) = name.rsplit_once('.').unwrap_or(("", name));
        let expert_parts = EXPERT_PARTS.iter().find(|(weight, _)| *weight == field).map(|(_, parts)| *parts);
        match expert_parts {
            Some(parts) if module.ends_with("experts") && !self.checkpoint.has_weight(name) => {
                let (experts, d_out, d_in) = stack_dims(dims);
                let part_out = d_out / parts.len();
                let mut stacked: Option<WeightValues> = None;
                for expert in 0..experts {
                    for part in parts {
                        let values = self.read(&format!("{module}.{expert}.{part}.weight"), &[part_out, d_in], read)?;
                        match &mut stacked {
                            Some(stacked) => stacked.append(values),
                            None => stacked = Some(values.with_room_for(experts * parts.len())),
                        }
                    }
                }
                Ok(stacked.expect("a stack has at least one expert"))
            }
            _ => self.read(name, dims, read),
        }
    }
}
