//! The shards of a quantized folder (`crate::quantize`) and the tensors they hold: each tensor the
//! loader reads is added as it is read, and a shard is written once it holds [`SHARD_BYTES`].

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use decider_ops::Half;
use half::f16;
use safetensors::Dtype;
use safetensors::tensor::TensorView;

use crate::checkpoint::{
    FORMAT_KEY, HalfValues, Q4_SCALES, Q4_VALUES, Q8_SCALES, Q8_VALUES, block_part, packed_shape, scales_shape,
};
use crate::error::LoadError;
use crate::weight_format::WeightFormat;

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

    fn add(&mut self, name: String, dtype: Dtype, shape: Vec<usize>, bytes: Vec<u8>) -> Result<(), LoadError> {
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

/// What a checkpoint reader returns, as the tensors of a quantized folder.
pub(crate) trait Written {
    /// Adds the tensor `name` of `shape` (the weight's shape, for blocks) to `writer`.
    fn write(&self, name: &str, shape: &[usize], writer: &mut ShardWriter) -> Result<(), LoadError>;
}

impl Written for Vec<f32> {
    fn write(&self, name: &str, shape: &[usize], writer: &mut ShardWriter) -> Result<(), LoadError> {
        writer.add(name.to_owned(), Dtype::F32, shape.to_vec(), self.iter().flat_map(|v| v.to_le_bytes()).collect())
    }
}

/// Q8_0 blocks: values (I8) and scales (F16).
impl Written for (Vec<i8>, Vec<f16>) {
    fn write(&self, name: &str, shape: &[usize], writer: &mut ShardWriter) -> Result<(), LoadError> {
        let (values, scales) = self;
        writer.add(
            block_part(name, Q8_VALUES),
            Dtype::I8,
            shape.to_vec(),
            values.iter().map(|&v| v as u8).collect(),
        )?;
        write_scales(name, Q8_SCALES, shape, scales, writer)
    }
}

/// Q4_0 blocks: packed values (U8, half the weight's last dimension) and scales (F16).
impl Written for (Vec<u8>, Vec<f16>) {
    fn write(&self, name: &str, shape: &[usize], writer: &mut ShardWriter) -> Result<(), LoadError> {
        let (packed, scales) = self;
        writer.add(block_part(name, Q4_VALUES), Dtype::U8, packed_shape(name, shape)?, packed.clone())?;
        write_scales(name, Q4_SCALES, shape, scales, writer)
    }
}

/// 16-bit floats: the weight under its own name, F16 or BF16.
impl Written for HalfValues {
    fn write(&self, name: &str, shape: &[usize], writer: &mut ShardWriter) -> Result<(), LoadError> {
        let dtype = match self.half {
            Half::F16 => Dtype::F16,
            Half::Bf16 => Dtype::BF16,
        };
        writer.add(name.to_owned(), dtype, shape.to_vec(), self.bits.iter().flat_map(|b| b.to_le_bytes()).collect())
    }
}

/// The scales `{name}.{part}` of weight `name` of `shape`.
fn write_scales(
    name: &str,
    part: &str,
    shape: &[usize],
    scales: &[f16],
    writer: &mut ShardWriter,
) -> Result<(), LoadError> {
    writer.add(
        block_part(name, part),
        Dtype::F16,
        scales_shape(name, shape)?,
        scales.iter().flat_map(|d| d.to_le_bytes()).collect(),
    )
}
