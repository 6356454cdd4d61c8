//! A safetensors checkpoint on disk: one file or shards listed by `model.safetensors.index.json`,
//! memory-mapped, read one tensor at a time as f32 or straight into Q8_0, Q4_0 or Q4_K blocks
//! (converted in parallel).
//!
//! Nothing is copied into RAM until a tensor is read, and then only that tensor: a checkpoint
//! larger than memory can be opened, and loading holds the model plus one tensor in flight.

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::path::{Component, Path, PathBuf};

use half::{bf16, f16};
use memmap2::Mmap;
use rayon::prelude::*;
use safetensors::SafeTensors;
use safetensors::tensor::{Dtype, TensorInfo};
use serde::Deserialize;

use decider_ops::ggml_type::QK_K;
use decider_ops::{
    GgmlType, Half, Q4_BLOCK, Q8_BLOCK, dequantize_q4, dequantize_q4k, dequantize_q8, join_q4_k, quantize_q4_block,
    quantize_q4_k, quantize_q8_block,
};

use crate::error::LoadError;
use crate::model_file::{INDEX_BYTES, check_regular, read_bounded_text};
pub use crate::shards::FORMAT_KEY;
use crate::shards::{ShardWriter, Written};
use crate::weight::WeightValues;
use crate::weight_format::WeightFormat;

/// The tensors of a checkpoint, by name.
pub struct Checkpoint {
    shards: Vec<Shard>,
    tensors: HashMap<String, (usize, TensorInfo)>,
    /// The format a quantized folder's shards name, if they name one.
    format: Option<WeightFormat>,
}

struct Shard {
    path: PathBuf,
    map: Mmap,
    /// Offset of the data section (after the 8-byte length and the JSON header).
    data_start: usize,
}

#[derive(Deserialize)]
struct ShardIndex {
    weight_map: HashMap<String, String>,
}

impl Checkpoint {
    /// Opens the weights of a model folder: `model.safetensors.index.json` and its shards if
    /// present, else `model.safetensors`.
    pub fn open_dir(dir: impl AsRef<Path>) -> Result<Self, LoadError> {
        let dir = dir.as_ref();
        let index_path = dir.join("model.safetensors.index.json");
        if index_path.exists() {
            return Self::open_index(&index_path);
        }
        let single = dir.join("model.safetensors");
        if single.exists() {
            return Self::open_files(&[single]);
        }
        Err(LoadError::NoWeights(dir.to_path_buf()))
    }

    /// Opens a sharded checkpoint from its index; every tensor the index lists must be in the
    /// shard it names.
    pub fn open_index(index_path: &Path) -> Result<Self, LoadError> {
        let text = read_bounded_text(index_path, INDEX_BYTES)
            .map_err(|cause| LoadError::Io { path: index_path.to_path_buf(), cause })?;
        let index: ShardIndex = serde_json::from_str(&text)
            .map_err(|e| LoadError::Index { path: index_path.to_path_buf(), reason: e.to_string() })?;
        let dir = index_path.parent().unwrap_or(Path::new("."));
        let files: BTreeSet<&String> = index.weight_map.values().collect();
        // Shards are files of the folder (or of its subfolders): no absolute path, no `..`.
        let confined =
            |file: &str| !file.is_empty() && Path::new(file).components().all(|c| matches!(c, Component::Normal(_)));
        if let Some(outside) = files.iter().find(|file| !confined(file)) {
            return Err(LoadError::Index {
                path: index_path.to_path_buf(),
                reason: format!(
                    "shard `{outside}` is outside the model folder (a shard is a relative path without `..`)"
                ),
            });
        }
        let paths: Vec<PathBuf> = files.iter().map(|file| dir.join(file)).collect();
        let checkpoint = Self::open_files(&paths)?;
        for (name, file) in &index.weight_map {
            let listed = dir.join(file);
            match checkpoint.tensors.get(name) {
                Some((shard, _)) if checkpoint.shards[*shard].path == listed => {}
                _ => {
                    return Err(LoadError::Index {
                        path: index_path.to_path_buf(),
                        reason: format!("tensor `{name}` is listed in {file} but that file does not contain it"),
                    });
                }
            }
        }
        Ok(checkpoint)
    }

    /// Opens safetensors files and indexes their tensors by name.
    pub fn open_files(paths: &[PathBuf]) -> Result<Self, LoadError> {
        let mut shards = Vec::with_capacity(paths.len());
        let mut tensors = HashMap::new();
        let mut stored_format = None;
        for path in paths {
            let file = File::open(path).map_err(|cause| LoadError::Io { path: path.clone(), cause })?;
            check_regular(&file).map_err(|cause| LoadError::Io { path: path.clone(), cause })?;
            // SAFETY: the map is read-only; as with every mmap-based loader, the file must not be
            // truncated or rewritten by another process while the checkpoint is open.
            let map = unsafe { Mmap::map(&file) }.map_err(|cause| LoadError::Io { path: path.clone(), cause })?;
            let (header_len, metadata) = SafeTensors::read_metadata(&map)
                .map_err(|e| LoadError::Corrupt { path: path.clone(), reason: e.to_string() })?;
            // After safetensors' checks, which bound the header's size.
            if let Some(name) = duplicate_key(&map[8..8 + header_len]) {
                return Err(LoadError::DuplicateTensor { name, places: format!("in {}", path.display()) });
            }
            // A quantized folder names its format; one this build does not know is refused
            // before any tensor of it is read.
            if let Some(format) = metadata.metadata().as_ref().and_then(|m| m.get(FORMAT_KEY)) {
                match format.parse::<WeightFormat>() {
                    Ok(format) => stored_format = stored_format.or(Some(format)),
                    Err(reason) => return Err(LoadError::UnknownFormat { path: path.clone(), reason }),
                }
            }
            let shard = shards.len();
            for (name, info) in metadata.tensors() {
                if let Some((first, _)) = tensors.get(&name) {
                    let first: &Shard = &shards[*first];
                    let places = format!("in {} and in {}", first.path.display(), path.display());
                    return Err(LoadError::DuplicateTensor { name, places });
                }
                tensors.insert(name, (shard, info.clone()));
            }
            shards.push(Shard { path: path.clone(), map, data_start: 8 + header_len });
        }
        Ok(Self { shards, tensors, format: stored_format })
    }

    /// The format the shards' metadata names (`decider quantize`d folders), if any.
    pub fn stored_format(&self) -> Option<WeightFormat> {
        self.format
    }

    /// The 16-bit float every matrix (every tensor of two or more dimensions) is stored in, if
    /// they all are in the same one: then a load in that format holds exactly the checkpoint's
    /// weights (the vectors, norms and `A_log`, are f32 in every format).
    pub fn matrices_half(&self) -> Option<Half> {
        let mut dtypes = self.tensors.values().filter(|(_, info)| info.shape.len() >= 2).map(|(_, info)| info.dtype);
        let first = dtypes.next()?;
        let half = match first {
            Dtype::F16 => Half::F16,
            Dtype::BF16 => Half::Bf16,
            _ => return None,
        };
        dtypes.all(|other| other == first).then_some(half)
    }

    /// Whether the checkpoint has a tensor of this name.
    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    /// Whether the checkpoint holds weight `name` in some form: as it is, or as tensors derived
    /// from it (`{name}.…`, the blocks of a quantized folder).
    pub fn has_weight(&self, name: &str) -> bool {
        self.contains(name) || self.derived(name).next().is_some()
    }

    /// Names of all tensors.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    /// The stored shape of a tensor.
    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        self.tensors.get(name).map(|(_, info)| info.shape.as_slice())
    }

    /// Reads tensor `name`, checks it has `expected` shape, and converts it to f32 (F32, BF16 and
    /// F16 are accepted, mixed freely across tensors).
    /// A weight stored as the blocks of a quantized folder is dequantized.
    pub fn read_f32(&self, name: &str, expected: &[usize]) -> Result<Vec<f32>, LoadError> {
        match self.stored_blocks(name)? {
            Some(WeightFormat::Q8) => {
                let (values, scales) = self.read_q8_blocks(name, expected)?;
                return Ok(dequantize_q8(&values, &scales));
            }
            Some(WeightFormat::Q4) => {
                let (packed, scales) = self.read_q4_blocks(name, expected)?;
                return Ok(dequantize_q4(&packed, &scales));
            }
            Some(WeightFormat::Q4K) => {
                let WeightValues::Q4K(packed, supers, subs) = self.read_q4k(name, expected)? else {
                    unreachable!("read_q4k reads Q4_K")
                };
                return Ok(dequantize_q4k(&packed, &supers, &subs));
            }
            // Formats stored as floats are read below.
            _ => {}
        }
        let tensor = self.float_bytes(name, expected)?;
        let mut values = vec![0.0f32; tensor.len()];
        let non_finite = values
            .par_chunks_mut(CHUNK)
            .zip(tensor.bytes.par_chunks(CHUNK * tensor.width))
            .map(|(out, bytes)| {
                tensor.convert(bytes, out);
                NonFinite::of(out)
            })
            .collect();
        tensor.finish(non_finite)?;
        Ok(values)
    }

    /// Reads tensor `name` (of `expected` shape, its last dimension whole blocks) straight into
    /// Q8_0 blocks: the `(values, scales)` that `decider_ops::quantize_q8` makes of its f32
    /// values, converted a block at a time, with no f32 copy of the tensor. A weight stored as the
    /// blocks of a quantized folder is read as it is.
    pub fn read_q8(&self, name: &str, expected: &[usize]) -> Result<(Vec<i8>, Vec<f16>), LoadError> {
        match self.blocks_in(name, WeightFormat::Q8)? {
            true => self.read_q8_blocks(name, expected),
            false => self.quantize(name, expected, Q8_BLOCK, quantize_q8_block),
        }
    }

    /// [`Checkpoint::read_q8`] into Q4_0 blocks (`decider_ops::quantize_q4`): `(packed bytes,
    /// scales)`.
    pub fn read_q4(&self, name: &str, expected: &[usize]) -> Result<(Vec<u8>, Vec<f16>), LoadError> {
        match self.blocks_in(name, WeightFormat::Q4)? {
            true => self.read_q4_blocks(name, expected),
            false => self.quantize(name, expected, Q4_BLOCK / 2, quantize_q4_block),
        }
    }

    /// Reads weight `name` (of `expected` shape) in `format`: as it is stored in a quantized
    /// folder of that format, else converted from its floats as it is read.
    pub fn read_weight(&self, name: &str, expected: &[usize], format: WeightFormat) -> Result<WeightValues, LoadError> {
        Ok(match format {
            WeightFormat::F32 => WeightValues::F32(self.read_f32(name, expected)?),
            WeightFormat::Q8 => {
                let (values, scales) = self.read_q8(name, expected)?;
                WeightValues::Q8(values, scales)
            }
            WeightFormat::Q4 => {
                let (packed, scales) = self.read_q4(name, expected)?;
                WeightValues::Q4(packed, scales)
            }
            WeightFormat::F16 | WeightFormat::Bf16 => {
                let half = format.half().expect("a 16-bit format");
                WeightValues::Half(half, self.read_half(name, expected, half)?)
            }
            WeightFormat::Q4K => self.read_q4k(name, expected)?,
            WeightFormat::Q5K | WeightFormat::Q6K => {
                unreachable!("a load of a folder is never asked for {format}, which is held only from GGUF files")
            }
        })
    }

    /// Reads weight `name` (of `expected` shape, its last dimension whole super-blocks of 256) in
    /// Q4_K: the blocks of a quantized folder as stored, else its floats quantized as llama.cpp
    /// does (`decider_ops::quantize_q4_k`) a chunk of rows at a time, with no f32 copy of it.
    pub fn read_q4k(&self, name: &str, expected: &[usize]) -> Result<WeightValues, LoadError> {
        let blocks_shape = q4k_blocks_shape(name, expected)?;
        if self.blocks_in(name, WeightFormat::Q4K)? {
            let blocks_name = block_part(name, Q4K_BLOCKS);
            let blocks = self.tensor_bytes(&blocks_name, &blocks_shape)?;
            check_dtype(&blocks, Dtype::U8)?;
            let values = WeightValues::from_q4_k(blocks.name, blocks.bytes);
            blocks.release();
            return values;
        }
        let tensor = self.float_bytes(name, expected)?;
        let block_bytes = GgmlType::Q4K.block_bytes();
        let mut blocks = vec![0u8; tensor.len() / QK_K * block_bytes];
        let non_finite = blocks
            .par_chunks_mut(CHUNK / QK_K * block_bytes)
            .zip(tensor.bytes.par_chunks(CHUNK * tensor.width))
            .map(|(blocks, bytes)| {
                let mut values = vec![0f32; bytes.len() / tensor.width];
                tensor.convert(bytes, &mut values);
                blocks.copy_from_slice(&quantize_q4_k(&values));
                NonFinite::of(&values)
            })
            .collect();
        tensor.finish(non_finite)?;
        WeightValues::from_q4_k(name, &blocks)
    }

    /// Reads tensor `name` (of `expected` shape) as 16-bit patterns of `half`: a tensor stored in
    /// that type as its bytes are, one of another float type rounded to the nearest (ties to
    /// even), with no f32 copy of it. A value the type cannot hold (above f16's 65,504) is
    /// refused, naming the tensor, as a non-finite one is; so is a weight stored in blocks
    /// (widening them to 16 bits would not give back the weight they were made from).
    pub fn read_half(&self, name: &str, expected: &[usize], half: Half) -> Result<Vec<u16>, LoadError> {
        if let Some(stored) = self.stored_blocks(name)? {
            let format = WeightFormat::of_half(half);
            return Err(LoadError::Blocks {
                name: name.to_owned(),
                reason: format!(
                    "stored in {stored} blocks, asked for {format}: load the folder with `--weights {stored}` (or `auto`), or load the original in {format}"
                ),
            });
        }
        let tensor = self.float_bytes(name, expected)?;
        let same_type = matches!((tensor.dtype, half), (Dtype::F16, Half::F16) | (Dtype::BF16, Half::Bf16));
        let mut bits = vec![0u16; tensor.len()];
        let reads: Vec<(NonFinite, NonFinite)> = bits
            .par_chunks_mut(CHUNK)
            .zip(tensor.bytes.par_chunks(CHUNK * tensor.width))
            .map(|(bits, bytes)| {
                let (mut non_finite, mut beyond) = (NonFinite::default(), NonFinite::default());
                if same_type {
                    for (i, (b, pair)) in bits.iter_mut().zip(bytes.chunks_exact(2)).enumerate() {
                        *b = u16::from_le_bytes([pair[0], pair[1]]);
                        if !half.is_finite(*b) {
                            non_finite.add(NonFinite::at(i), 0);
                        }
                    }
                } else {
                    let mut values = vec![0f32; bits.len()];
                    tensor.convert(bytes, &mut values);
                    for (i, (b, &v)) in bits.iter_mut().zip(&values).enumerate() {
                        match half.from_f32(v) {
                            Some(pattern) => *b = pattern,
                            None if v.is_finite() => beyond.add(NonFinite::at(i), 0),
                            None => non_finite.add(NonFinite::at(i), 0),
                        }
                    }
                }
                (non_finite, beyond)
            })
            .collect();
        let (non_finite, beyond): (Vec<NonFinite>, Vec<NonFinite>) = reads.into_iter().unzip();
        tensor.finish(non_finite)?;
        let beyond = NonFinite::all(beyond);
        match beyond.first {
            Some(first) => Err(LoadError::OutOfRange {
                name: name.to_owned(),
                count: beyond.count,
                first,
                format: WeightFormat::of_half(half),
            }),
            None => Ok(bits),
        }
    }

    /// Float tensor `name` quantized a block of 32 values at a time by `quantize_block`, which
    /// writes `per_block` elements and returns the block's scale.
    fn quantize<T: Copy + Default + Send>(
        &self,
        name: &str,
        expected: &[usize],
        per_block: usize,
        quantize_block: fn(&[f32], &mut [T]) -> f16,
    ) -> Result<(Vec<T>, Vec<f16>), LoadError> {
        const BLOCK: usize = Q8_BLOCK;
        scales_shape(name, expected)?;
        let tensor = self.float_bytes(name, expected)?;
        let mut values = vec![T::default(); tensor.len() / BLOCK * per_block];
        let mut scales = vec![f16::ZERO; tensor.len() / BLOCK];
        let non_finite = values
            .par_chunks_mut(CHUNK / BLOCK * per_block)
            .zip(scales.par_chunks_mut(CHUNK / BLOCK))
            .zip(tensor.bytes.par_chunks(CHUNK * tensor.width))
            .map(|((values, scales), bytes)| {
                let mut block = [0.0f32; BLOCK];
                let mut non_finite = NonFinite::default();
                for (i, ((values, scale), bytes)) in
                    values.chunks_mut(per_block).zip(scales).zip(bytes.chunks(BLOCK * tensor.width)).enumerate()
                {
                    tensor.convert(bytes, &mut block);
                    non_finite.add(NonFinite::of(&block), i * BLOCK);
                    *scale = quantize_block(&block, values);
                }
                non_finite
            })
            .collect();
        tensor.finish(non_finite)?;
        Ok((values, scales))
    }

    /// The Q8_0 blocks of weight `name` (of `expected` shape) as a quantized folder holds them,
    /// checked: `{name}.q8_values` I8 of the weight's shape in `-127..=127`, and its scales
    /// ([`Checkpoint::read_scales`]).
    fn read_q8_blocks(&self, name: &str, expected: &[usize]) -> Result<(Vec<i8>, Vec<f16>), LoadError> {
        let values_name = block_part(name, Q8_VALUES);
        let values = self.tensor_bytes(&values_name, expected)?;
        check_dtype(&values, Dtype::I8)?;
        let scales = self.read_scales(name, Q8_SCALES, expected, false)?;
        // Copied a chunk per task, each checked as it is copied; the first bad index is kept.
        let mut q8 = vec![0i8; values.bytes.len()];
        let bad_value =
            q8.par_chunks_mut(CHUNK).zip(values.bytes.par_chunks(CHUNK)).enumerate().filter_map(|(i, (out, bytes))| {
                for (value, &byte) in out.iter_mut().zip(bytes) {
                    *value = byte as i8;
                }
                out.iter().position(|&v| v == i8::MIN).map(|at| i * CHUNK + at)
            });
        let bad_value = bad_value.min();
        values.release();
        if let Some(i) = bad_value {
            return Err(LoadError::Blocks {
                name: values_name,
                reason: format!("value -128 at flat index {i} (Q8_0 values are -127..=127)"),
            });
        }
        Ok((q8, scales))
    }

    /// The Q4_0 blocks of weight `name` (of `expected` shape) as a quantized folder holds them,
    /// checked: `{name}.q4_values` U8 of the weight's shape with half the last dimension (every
    /// byte is two valid values), and its scales ([`Checkpoint::read_scales`]).
    fn read_q4_blocks(&self, name: &str, expected: &[usize]) -> Result<(Vec<u8>, Vec<f16>), LoadError> {
        let values_name = block_part(name, Q4_VALUES);
        let packed_shape = packed_shape(&values_name, expected)?;
        let values = self.tensor_bytes(&values_name, &packed_shape)?;
        check_dtype(&values, Dtype::U8)?;
        let scales = self.read_scales(name, Q4_SCALES, expected, true)?;
        let mut packed = vec![0u8; values.bytes.len()];
        packed
            .par_chunks_mut(CHUNK)
            .zip(values.bytes.par_chunks(CHUNK))
            .for_each(|(out, bytes)| out.copy_from_slice(bytes));
        values.release();
        Ok((packed, scales))
    }

    /// The scales `{name}.{part}` of weight `name`'s blocks, checked: F16 with a finite scale per
    /// block of 32 along the weight's last dimension, not negative unless `signed` (Q8_0's `d` is
    /// `max |w| / 127`; Q4_0's is negative where the block's largest magnitude is positive).
    fn read_scales(&self, name: &str, part: &str, expected: &[usize], signed: bool) -> Result<Vec<f16>, LoadError> {
        let scales_name = block_part(name, part);
        let scales = self.tensor_bytes(&scales_name, &scales_shape(name, expected)?)?;
        check_dtype(&scales, Dtype::F16)?;
        let mut d = vec![f16::ZERO; scales.bytes.len() / 2];
        let bad_scale = d.par_chunks_mut(CHUNK).zip(scales.bytes.par_chunks(CHUNK * 2)).enumerate().filter_map(
            |(i, (out, bytes))| {
                for (scale, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                    *scale = f16::from_le_bytes([b[0], b[1]]);
                }
                out.iter().position(|s| !(s.is_finite() && (signed || !s.is_sign_negative()))).map(|at| i * CHUNK + at)
            },
        );
        let bad_scale = bad_scale.min();
        scales.release();
        let rule = if signed { "finite" } else { "finite and not negative" };
        match bad_scale {
            Some(i) => Err(LoadError::Blocks {
                name: scales_name,
                reason: format!("scale {} at flat index {i} (scales are {rule})", d[i]),
            }),
            None => Ok(d),
        }
    }

    /// The block format weight `name` is stored in by a quantized folder, if any (refused when it
    /// is stored both so and as it is, or in two formats: they could differ).
    fn stored_blocks(&self, name: &str) -> Result<Option<WeightFormat>, LoadError> {
        let parts = [(WeightFormat::Q8, Q8_VALUES), (WeightFormat::Q4, Q4_VALUES), (WeightFormat::Q4K, Q4K_BLOCKS)];
        let formats: Vec<(WeightFormat, String)> = parts
            .into_iter()
            .map(|(format, part)| (format, block_part(name, part)))
            .filter(|(_, values)| self.contains(values))
            .collect();
        match (self.contains(name), formats.as_slice()) {
            (_, []) => Ok(None),
            (false, [(format, _)]) => Ok(Some(*format)),
            (true, [(_, values), ..]) => Err(LoadError::Blocks {
                name: name.to_owned(),
                reason: format!("stored both as it is and as `{values}`"),
            }),
            (false, [(_, first), (_, second), ..]) => Err(LoadError::Blocks {
                name: name.to_owned(),
                reason: format!("stored both as `{first}` and as `{second}`"),
            }),
        }
    }

    /// Whether weight `name` is stored as blocks of `format`; blocks of another format are an
    /// error (requantizing them would round twice).
    fn blocks_in(&self, name: &str, format: WeightFormat) -> Result<bool, LoadError> {
        match self.stored_blocks(name)? {
            None => Ok(false),
            Some(stored) if stored == format => Ok(true),
            Some(stored) => Err(LoadError::Blocks {
                name: name.to_owned(),
                reason: format!(
                    "stored in {stored} blocks, asked for {format}: load the folder with `--weights {stored}` (or `auto`), or quantize the original to {format}"
                ),
            }),
        }
    }

    /// The tensors derived from weight `name` (`{name}.…`: blocks), first by name.
    fn derived<'a>(&'a self, name: &str) -> impl Iterator<Item = &'a String> {
        let prefix = format!("{name}.");
        self.tensors.keys().filter(move |other| other.starts_with(&prefix))
    }

    /// The bytes of float tensor `name` (F32, BF16 or F16), once its shape is checked.
    fn float_bytes<'a>(&'a self, name: &'a str, expected: &[usize]) -> Result<TensorBytes<'a>, LoadError> {
        let tensor = self.tensor_bytes(name, expected)?;
        match tensor.dtype {
            Dtype::F32 | Dtype::BF16 | Dtype::F16 => Ok(tensor),
            other => Err(LoadError::UnsupportedDtype { name: name.to_owned(), dtype: format!("{other:?}") }),
        }
    }

    /// The bytes of tensor `name`, once its shape is checked. A name missing whose derived
    /// tensors (`{name}.…`) are there is a weight stored in a form this build does not read.
    fn tensor_bytes<'a>(&'a self, name: &'a str, expected: &[usize]) -> Result<TensorBytes<'a>, LoadError> {
        let (shard, info) = self.tensors.get(name).ok_or_else(|| match self.derived(name).min() {
            // Scales without their values: the values are what is missing.
            Some(other) if *other == block_part(name, Q8_SCALES) => {
                LoadError::MissingTensor { name: block_part(name, Q8_VALUES) }
            }
            Some(other) if *other == block_part(name, Q4_SCALES) => {
                LoadError::MissingTensor { name: block_part(name, Q4_VALUES) }
            }
            Some(other) => LoadError::Blocks {
                name: other.clone(),
                reason: format!("`{name}` is stored in a form this build does not read"),
            },
            None => LoadError::MissingTensor { name: name.to_owned() },
        })?;
        if info.shape != expected {
            return Err(LoadError::ShapeMismatch {
                name: name.to_owned(),
                expected: expected.to_vec(),
                found: info.shape.clone(),
            });
        }
        let shard = &self.shards[*shard];
        let (start, end) = info.data_offsets;
        let (start, end) = (shard.data_start + start, shard.data_start + end);
        Ok(TensorBytes {
            name,
            map: &shard.map,
            start,
            bytes: &shard.map[start..end],
            dtype: info.dtype,
            width: info.dtype.bitsize() / 8,
        })
    }
}

/// How a quantized folder (`crate::quantize`) names a weight's Q8_0 values: `{weight}.q8_values`,
/// I8 of the weight's shape.
pub const Q8_VALUES: &str = "q8_values";
/// ... and its scales: `{weight}.q8_scales`, F16, one per block of 32 along the last dimension.
pub const Q8_SCALES: &str = "q8_scales";
/// A weight's Q4_0 packed values: `{weight}.q4_values`, U8 of the weight's shape with half the
/// last dimension, in Q4_0's order (`decider_ops::quantize_q4`).
pub const Q4_VALUES: &str = "q4_values";
/// ... and its scales: `{weight}.q4_scales`, as Q8_0's.
pub const Q4_SCALES: &str = "q4_scales";

/// A weight's Q4_K blocks: `{weight}.q4k_blocks`, U8 of the weight's shape with the last
/// dimension `in / 256 · 144`, llama.cpp's `block_q4_K` bytes (`decider_ops::quantize_q4_k`).
pub const Q4K_BLOCKS: &str = "q4k_blocks";

/// The shape of the Q4_K blocks of weight `name` of `shape`: 144 bytes a super-block of 256
/// along the last dimension, which must be whole super-blocks.
pub fn q4k_blocks_shape(name: &str, shape: &[usize]) -> Result<Vec<usize>, LoadError> {
    let mut blocks = shape.to_vec();
    match blocks.last_mut() {
        Some(cols) if *cols % QK_K == 0 => {
            *cols = *cols / QK_K * GgmlType::Q4K.block_bytes();
            Ok(blocks)
        }
        _ => Err(LoadError::Blocks {
            name: name.to_owned(),
            reason: format!("{shape:?} are not rows of whole super-blocks of {QK_K}"),
        }),
    }
}

/// The shape of the scales of weight `name` of `shape` in blocks (Q8_0 or Q4_0, both of 32 values):
/// a scale per block along the last dimension, which must be whole blocks.
pub fn scales_shape(name: &str, shape: &[usize]) -> Result<Vec<usize>, LoadError> {
    const _: () = assert!(Q4_BLOCK == Q8_BLOCK, "one scales rule for both block formats");
    let mut scales = shape.to_vec();
    match scales.last_mut() {
        Some(cols) if *cols % Q8_BLOCK == 0 => {
            *cols /= Q8_BLOCK;
            Ok(scales)
        }
        _ => Err(LoadError::Blocks {
            name: name.to_owned(),
            reason: format!("{shape:?} are not rows of whole blocks of {Q8_BLOCK}"),
        }),
    }
}

/// The shape of the Q4_0 packed values of weight `name` of `shape`: half the last dimension,
/// which must be whole blocks.
pub fn packed_shape(name: &str, shape: &[usize]) -> Result<Vec<usize>, LoadError> {
    scales_shape(name, shape)?;
    let mut packed = shape.to_vec();
    if let Some(cols) = packed.last_mut() {
        *cols /= 2;
    }
    Ok(packed)
}

/// Refuses a tensor of another dtype than `dtype`.
fn check_dtype(tensor: &TensorBytes, dtype: Dtype) -> Result<(), LoadError> {
    match tensor.dtype == dtype {
        true => Ok(()),
        false => Err(LoadError::Blocks {
            name: tensor.name.to_owned(),
            reason: format!("holds {:?} values, not {dtype:?}", tensor.dtype),
        }),
    }
}

/// The name of part `part` of weight `name`'s blocks.
pub fn block_part(name: &str, part: &str) -> String {
    format!("{name}.{part}")
}

/// Values converted per task when a tensor is read.
const CHUNK: usize = 1 << 16;

/// One tensor's bytes in the memory map, while it is read.
struct TensorBytes<'a> {
    name: &'a str,
    map: &'a Mmap,
    start: usize,
    bytes: &'a [u8],
    dtype: Dtype,
    /// Bytes per value.
    width: usize,
}

impl TensorBytes<'_> {
    fn len(&self) -> usize {
        self.bytes.len() / self.width
    }

    /// Converts the values in `bytes` to `out` (one loop per dtype, so the conversion is inlined).
    fn convert(&self, bytes: &[u8], out: &mut [f32]) {
        fn each<const WIDTH: usize>(bytes: &[u8], out: &mut [f32], convert: impl Fn([u8; WIDTH]) -> f32) {
            for (value, b) in out.iter_mut().zip(bytes.chunks_exact(WIDTH)) {
                *value = convert(b.try_into().expect("chunks of WIDTH"));
            }
        }
        match self.dtype {
            Dtype::F32 => each(bytes, out, f32::from_le_bytes),
            Dtype::BF16 => each(bytes, out, |b| bf16::from_le_bytes(b).to_f32()),
            Dtype::F16 => each(bytes, out, |b| f16::from_le_bytes(b).to_f32()),
            _ => unreachable!("checked by float_bytes"),
        }
    }

    /// Refuses a tensor with a non-finite value (a NaN weight would make every answer NaN),
    /// naming it; `chunks` are the reads of each [`CHUNK`] of values, in order; and releases it.
    fn finish(self, chunks: Vec<NonFinite>) -> Result<(), LoadError> {
        let all = NonFinite::all(chunks);
        self.release();
        match all.first {
            Some(first) => Err(LoadError::NonFinite { name: self.name.to_owned(), count: all.count, first }),
            None => Ok(()),
        }
    }

    /// Hands the tensor's pages of the file back to the kernel once it is read: the resident
    /// memory of a load grows by what it keeps, not by the checkpoint's size.
    fn release(&self) {
        #[cfg(unix)]
        // SAFETY: the map is a shared, read-only map of a file, and the tensor's bytes are no
        // longer read: dropped pages are read again from the file if touched again (the first
        // and last page may hold a neighbour's bytes).
        let _ = unsafe {
            self.map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, self.start, self.bytes.len())
        };
    }
}

/// The non-finite values of a run of values: how many, and the first one's index.
#[derive(Default)]
struct NonFinite {
    count: usize,
    first: Option<usize>,
}

impl NonFinite {
    fn of(values: &[f32]) -> Self {
        let first = values.iter().position(|v| !v.is_finite());
        let count = first.map_or(0, |first| values[first..].iter().filter(|v| !v.is_finite()).count());
        NonFinite { count, first }
    }

    /// One value, at index `i`.
    fn at(i: usize) -> Self {
        NonFinite { count: 1, first: Some(i) }
    }

    /// Those of consecutive runs of [`CHUNK`] values, in order.
    fn all(chunks: Vec<NonFinite>) -> Self {
        let mut all = NonFinite::default();
        for (i, chunk) in chunks.into_iter().enumerate() {
            all.add(chunk, i * CHUNK);
        }
        all
    }

    /// Adds those of the run starting `offset` values after this one's start.
    fn add(&mut self, other: NonFinite, offset: usize) {
        self.count += other.count;
        self.first = self.first.or(other.first.map(|first| first + offset));
    }
}

/// The first key that appears twice in a safetensors JSON header. `read_metadata` keeps the
/// last of duplicate keys and drops the other silently.
fn duplicate_key(header: &[u8]) -> Option<String> {
    struct Keys(Option<String>);
    impl<'de> Deserialize<'de> for Keys {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct Visitor;
            impl<'de> serde::de::Visitor<'de> for Visitor {
                type Value = Keys;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a safetensors header object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Keys, A::Error> {
                    let (mut seen, mut duplicate) = (std::collections::HashSet::new(), None);
                    while let Some(key) = map.next_key::<String>()? {
                        map.next_value::<serde::de::IgnoredAny>()?;
                        if duplicate.is_none() && !seen.insert(key.clone()) {
                            duplicate = Some(key);
                        }
                    }
                    Ok(Keys(duplicate))
                }
            }
            deserializer.deserialize_map(Visitor)
        }
    }
    serde_json::from_slice::<Keys>(header).ok().and_then(|keys| keys.0)
}

/// An f32 tensor: as itself.
impl Written for Vec<f32> {
    fn write(&self, name: &str, shape: &[usize], writer: &mut ShardWriter) -> Result<(), LoadError> {
        writer.add(name.to_owned(), Dtype::F32, shape.to_vec(), self.iter().flat_map(|v| v.to_le_bytes()).collect())
    }
}

/// A weight in its format: f32 or 16-bit floats under its own name in that dtype; Q8_0 blocks
/// as [`Q8_VALUES`] (I8) and [`Q8_SCALES`] (F16); Q4_0 blocks as [`Q4_VALUES`] (U8, half the
/// weight's last dimension) and [`Q4_SCALES`].
impl Written for WeightValues {
    fn write(&self, name: &str, shape: &[usize], writer: &mut ShardWriter) -> Result<(), LoadError> {
        match self {
            WeightValues::F32(values) => values.write(name, shape, writer),
            WeightValues::Half(half, bits) => {
                let dtype = match half {
                    Half::F16 => Dtype::F16,
                    Half::Bf16 => Dtype::BF16,
                };
                writer.add(name.to_owned(), dtype, shape.to_vec(), bits.iter().flat_map(|b| b.to_le_bytes()).collect())
            }
            WeightValues::Q8(values, scales) => {
                let bytes = values.iter().map(|&v| v as u8).collect();
                writer.add(block_part(name, Q8_VALUES), Dtype::I8, shape.to_vec(), bytes)?;
                write_scales(name, Q8_SCALES, shape, scales, writer)
            }
            WeightValues::Q4(packed, scales) => {
                writer.add(block_part(name, Q4_VALUES), Dtype::U8, packed_shape(name, shape)?, packed.clone())?;
                write_scales(name, Q4_SCALES, shape, scales, writer)
            }
            WeightValues::Q4K(packed, supers, subs) => writer.add(
                block_part(name, Q4K_BLOCKS),
                Dtype::U8,
                q4k_blocks_shape(name, shape)?,
                join_q4_k(packed, supers, subs),
            ),
            WeightValues::Q5K(..) | WeightValues::Q6K(..) => {
                unreachable!("a folder is written from a folder, whose weights are never held in Q5_K or Q6_K")
            }
        }
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

#[cfg(test)]
mod tests {
    #[test]
    fn duplicate_keys_are_found() {
        assert_eq!(super::duplicate_key(br#"{"a": {"x": 1}, "b": 2, "a": [3]}"#).as_deref(), Some("a"));
        assert_eq!(super::duplicate_key(br#"{"a": 1, "b": 2, "b": 3, "a": 4, "c": 5}"#).as_deref(), Some("b"));
        assert_eq!(super::duplicate_key(br#"{"a": {"a": 1}, "b": 2}  "#), None);
    }
}
