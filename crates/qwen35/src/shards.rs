//! The shards of a quantized folder (`crate::quantize`) and the tensors they hold: each tensor the
//! loader reads is added as it is read, and a shard is written once it holds [`SHARD_BYTES`].

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use safetensors::Dtype;
use safetensors::tensor::TensorView;

use crate::error::LoadError;
use crate::weight_format::WeightFormat;

/// The safetensors metadata key under which a quantized folder's shards name their format.
pub const FORMAT_KEY: &str = "decider.weights";

/// Bytes a shard holds before it is written: quantizing holds at most this plus one tensor.
const SHARD_BYTES: usize = 1 << 30;

/// The shards of a quantized folder, written as they fill.
pub(crate) struct ShardWriter {
    out: PathBuf,
    /// Shards written so far.
    shards: usize,
    weights: WeightFormat,
    /// Tensors of the next shard: name, dtype, shape, little-endian bytes.
    pending: Vec<(String, Dtype, Vec<usize>, Vec<u8>)>,
    pending_bytes: usize,
    /// Each tensor written, by the shard file that holds it.
    weight_map: BTreeMap<String, String>,
}

impl ShardWriter {
    /// A writer of the shards of a folder `out` whose weights are in `weights`.
    pub(crate) fn new(out: &Path, weights: WeightFormat) -> Self {
        ShardWriter {
            out: out.to_path_buf(),
            shards: 0,
            weights,
            pending: Vec::new(),
            pending_bytes: 0,
            weight_map: BTreeMap::new(),
        }
    }

    /// Adds tensor `name` of `dtype` and `shape` (its little-endian `bytes`).
    pub(crate) fn add(
        &mut self,
        name: String,
        dtype: Dtype,
        shape: Vec<usize>,
        bytes: Vec<u8>,
    ) -> Result<(), LoadError> {
        self.pending_bytes += bytes.len();
        self.pending.push((name, dtype, shape, bytes));
        if self.pending_bytes >= SHARD_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn metadata(&self) -> HashMap<String, String> {
        HashMap::from([(FORMAT_KEY.to_owned(), self.weights.to_string())])
    }

    /// Writes the pending tensors as the next shard.
    fn flush(&mut self) -> Result<(), LoadError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        self.shards += 1;
        let file = format!("model-{:05}.safetensors", self.shards);
        let path = self.out.join(&file);
        let views = self.pending.iter().map(|(name, dtype, shape, bytes)| {
            (
                name.as_str(),
                TensorView::new(*dtype, shape.clone(), bytes).expect("the bytes of a tensor read match its shape"),
            )
        });
        safetensors::serialize_to_file(views, Some(self.metadata()), &path)
            .map_err(|e| LoadError::Write { path: path.clone(), cause: std::io::Error::other(e) })?;
        for (name, ..) in self.pending.drain(..) {
            self.weight_map.insert(name, file.clone());
        }
        self.pending_bytes = 0;
        Ok(())
    }

    /// Writes the last shard and the index; returns the number of tensors written.
    pub(crate) fn finish(mut self) -> Result<usize, LoadError> {
        self.flush()?;
        let path = self.out.join("model.safetensors.index.json");
        let index = serde_json::json!({"metadata": self.metadata(), "weight_map": self.weight_map});
        std::fs::write(&path, serde_json::to_string_pretty(&index).expect("an index is JSON"))
            .map_err(|cause| LoadError::Write { path, cause })?;
        Ok(self.weight_map.len())
    }
}

/// Values a quantized folder holds (`crate::checkpoint` says how each is stored).
pub(crate) trait Written {
    /// Adds the tensor `name` of `shape` (the weight's shape, for blocks) to `writer`.
    fn write(&self, name: &str, shape: &[usize], writer: &mut ShardWriter) -> Result<(), LoadError>;
}
