//! A GGUF file (llama.cpp's model file, `docs/gguf.md`): its metadata and its tensors, memory-mapped
//! and read one tensor at a time.
//!
//! Every length and count in the file is checked against the bytes that remain before anything
//! is allocated for it, and every tensor's data against the file's end, so a truncated or hostile
//! file is refused with a message that says where, never read past its end or allowed to allocate
//! more than its own size.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use decider_ops::GgmlType;
use memmap2::Mmap;
use rayon::prelude::*;

use crate::error::LoadError;
use crate::model_file::check_regular;

/// The file's first four bytes.
const MAGIC: &[u8; 4] = b"GGUF";

/// The alignment of the tensor data when the file does not set `general.alignment`.
const DEFAULT_ALIGNMENT: u64 = 32;

/// The most dimensions a GGML tensor has (`GGML_MAX_DIMS`).
const MAX_DIMS: usize = 4;

/// The most elements a metadata array may have: 64 times the largest vocabulary (Qwen3.5's
/// 248,320 tokens, whose token and merge lists are the longest arrays of a model file), so what an
/// array costs in memory stays bounded however large the file is.
const MAX_ARRAY: usize = 1 << 24;

/// The most tensors, and the most metadata entries, a file may have: far above a model's (a few
/// thousand tensors; llama.cpp stacks the experts of a layer in one), for the same reason.
const MAX_ENTRIES: usize = 1 << 20;

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    U64(u64),
    I64(i64),
    F32(f32),
    F64(f64),
    Bool(bool),
    String(String),
    /// Values of one type (arrays of arrays are refused, as llama.cpp refuses them).
    Array(Vec<Value>),
}

impl Value {
    /// An integer value of any width, as u64 (`None` for a negative one or another type).
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// A float value, as f64.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
}

/// Where a tensor is and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufTensor {
    /// Outermost first (PyTorch's order; GGUF lists them innermost first): a weight is `[out, in]`.
    pub dims: Vec<usize>,
    pub ggml_type: GgmlType,
    /// Offset of its data in the file.
    start: usize,
    /// Bytes of its data.
    bytes: usize,
}

impl GgufTensor {
    /// Its number of values.
    pub fn len(&self) -> usize {
        self.dims.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An open GGUF file.
pub struct GgufFile {
    path: PathBuf,
    map: Mmap,
    metadata: BTreeMap<String, Value>,
    tensors: BTreeMap<String, GgufTensor>,
}

impl GgufFile {
    /// Opens and checks `path`: its header, metadata and tensor table (the tensors are read when
    /// asked for).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, LoadError> {
        let path = path.as_ref().to_path_buf();
        let io = |cause| LoadError::Io { path: path.clone(), cause };
        let file = File::open(&path).map_err(io)?;
        check_regular(&file).map_err(io)?;
        // SAFETY: the map is read-only; as with every mmap-based loader, the file must not be
        // truncated or rewritten by another process while it is open.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let (metadata, tensors) = parse(&map).map_err(|reason| LoadError::Gguf { path: path.clone(), reason })?;
        Ok(GgufFile { path, map, metadata, tensors })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The metadata, by key.
    pub fn metadata(&self) -> &BTreeMap<String, Value> {
        &self.metadata
    }

    /// The tensors, by name.
    pub fn tensors(&self) -> &BTreeMap<String, GgufTensor> {
        &self.tensors
    }

    /// The stored bytes of `tensor` (one of [`GgufFile::tensors`]).
    pub fn bytes(&self, tensor: &GgufTensor) -> &[u8] {
        &self.map[tensor.start..tensor.start + tensor.bytes]
    }

    /// Tensor `name`'s values as f32, dequantized as llama.cpp dequantizes them.
    pub fn f32(&self, name: &str) -> Result<Vec<f32>, LoadError> {
        let tensor = self.tensors.get(name).ok_or_else(|| LoadError::MissingTensor { name: name.to_owned() })?;
        let ggml_type = tensor.ggml_type;
        let mut values = vec![0.0; tensor.len()];
        // In runs of whole blocks, in parallel.
        let blocks = 1024;
        values
            .par_chunks_mut(blocks * ggml_type.block_values())
            .zip(self.bytes(tensor).par_chunks(blocks * ggml_type.block_bytes()))
            .for_each(|(out, bytes)| ggml_type.dequantize(bytes, out));
        Ok(values)
    }
}

/// The header, metadata and tensor table of a file's bytes; a reason it cannot be read.
#[allow(clippy::type_complexity)]
fn parse(file: &[u8]) -> Result<(BTreeMap<String, Value>, BTreeMap<String, GgufTensor>), String> {
    let mut r = Reader { file, at: 0 };
    if file.get(..4) != Some(MAGIC) {
        return Err("it does not start with `GGUF`".into());
    }
    r.at = 4;
    let version = r.u32("the version")?;
    match version {
        2 | 3 => {}
        1 => return Err("GGUF version 1 (2023) is not read; convert it again with llama.cpp".into()),
        v if v.swap_bytes() <= 3 => return Err("a big-endian GGUF file; only little-endian files are read".into()),
        v => return Err(format!("unknown GGUF version {v}")),
    }
    // The least a table entry or metadata entry takes: an empty name, no dimensions, the type and
    // offset; an empty key, the type, a one-byte value.
    let tensor_count = r.count("the tensor count", 8 + 4 + 4 + 8)?;
    let kv_count = r.count("the metadata count", 8 + 4 + 1)?;
    for (what, count) in [("tensors", tensor_count), ("metadata entries", kv_count)] {
        if count > MAX_ENTRIES {
            return Err(format!("{count} {what}, more than the {MAX_ENTRIES} a file may have"));
        }
    }
    let mut metadata = BTreeMap::new();
    for _ in 0..kv_count {
        let key = r.string("a metadata key")?;
        let value_type = r.u32(&format!("the type of `{key}`"))?;
        let value = r.value(value_type, &key, true)?;
        if metadata.insert(key.clone(), value).is_some() {
            return Err(format!("metadata key `{key}` appears twice"));
        }
    }
    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(Value::U32(a)) if a.is_power_of_two() => u64::from(*a),
        Some(other) => return Err(format!("`general.alignment` is {other:?}, not a power of two (u32)")),
    };
    let mut table = Vec::new();
    for _ in 0..tensor_count {
        let name = r.string("a tensor name")?;
        let n_dims = r.u32(&format!("the dimension count of tensor `{name}`"))? as usize;
        if n_dims > MAX_DIMS {
            return Err(format!("tensor `{name}` has {n_dims} dimensions, more than GGML's {MAX_DIMS}"));
        }
        let mut dims =
            (0..n_dims).map(|_| r.u64(&format!("a dimension of tensor `{name}`"))).collect::<Result<Vec<u64>, _>>()?;
        let type_id = r.u32(&format!("the type of tensor `{name}`"))?;
        let offset = r.u64(&format!("the offset of tensor `{name}`"))?;
        let ggml_type = GgmlType::from_id(type_id).ok_or_else(|| {
            let known: Vec<&str> = GgmlType::ALL.iter().map(|t| t.name()).collect();
            format!(
                "tensor `{name}` has GGML type {type_id}, which this build does not read (it reads {})",
                known.join(", ")
            )
        })?;
        let row = dims.first().copied().unwrap_or(1);
        let len = dims.iter().try_fold(1u64, |len, &d| len.checked_mul(d));
        let bytes = len
            .and_then(|len| usize::try_from(len).ok())
            .and_then(|len| ggml_type.row_bytes(len).filter(|_| row.is_multiple_of(ggml_type.block_values() as u64)))
            .ok_or_else(|| {
                format!(
                    "tensor `{name}`: {dims:?} values of type {} are not whole blocks of {} along the first dimension",
                    ggml_type.name(),
                    ggml_type.block_values()
                )
            })?;
        if offset % alignment != 0 {
            return Err(format!("tensor `{name}` starts at {offset}, not a multiple of the alignment {alignment}"));
        }
        dims.reverse();
        table.push((name, dims, ggml_type, offset, bytes));
    }
    let data_start = (r.at as u64).next_multiple_of(alignment);
    let mut tensors = BTreeMap::new();
    for (name, dims, ggml_type, offset, bytes) in table {
        let start = data_start.checked_add(offset).and_then(|s| usize::try_from(s).ok());
        let start = match start {
            Some(start) if start.checked_add(bytes).is_some_and(|end| end <= file.len()) => start,
            _ => {
                return Err(format!(
                    "tensor `{name}` ({bytes} bytes at {offset} in the data) runs past the end of the file ({} bytes): truncated?",
                    file.len()
                ));
            }
        };
        let dims = dims.into_iter().map(|d| d as usize).collect();
        if tensors.insert(name.clone(), GgufTensor { dims, ggml_type, start, bytes }).is_some() {
            return Err(format!("tensor `{name}` appears twice"));
        }
    }
    Ok((metadata, tensors))
}

/// A cursor over the file's bytes that refuses to read past their end.
struct Reader<'a> {
    file: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self, what: &str) -> Result<[u8; N], String> {
        let bytes = self.file.get(self.at..self.at + N).ok_or_else(|| self.past_end(what))?;
        self.at += N;
        Ok(bytes.try_into().expect("N bytes"))
    }

    fn past_end(&self, what: &str) -> String {
        format!("the file ends ({} bytes) before {what}: truncated?", self.file.len())
    }

    fn u32(&mut self, what: &str) -> Result<u32, String> {
        self.take(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> Result<u64, String> {
        self.take(what).map(u64::from_le_bytes)
    }

    /// A count of things of at least `least` bytes each: never more than the bytes left could
    /// hold, so what is allocated for them is bounded by the file's size.
    fn count(&mut self, what: &str, least: usize) -> Result<usize, String> {
        let count = self.u64(what)?;
        let left = (self.file.len() - self.at) as u64;
        if count > left / least as u64 {
            return Err(format!(
                "{what} is {count}, more than the {left} bytes left could hold: truncated or corrupt?"
            ));
        }
        Ok(count as usize)
    }

    fn string(&mut self, what: &str) -> Result<String, String> {
        let len = self.count(&format!("the length of {what}"), 1)?;
        let bytes = &self.file[self.at..self.at + len];
        self.at += len;
        String::from_utf8(bytes.to_vec()).map_err(|_| format!("{what} is not UTF-8"))
    }

    /// A value of GGUF type `value_type` (`gguf_type`), of key `key`; an array only if
    /// `array_allowed`.
    fn value(&mut self, value_type: u32, key: &str, array_allowed: bool) -> Result<Value, String> {
        let what = format!("the value of `{key}`");
        Ok(match value_type {
            0 => Value::U8(u8::from_le_bytes(self.take(&what)?)),
            1 => Value::I8(i8::from_le_bytes(self.take(&what)?)),
            2 => Value::U16(u16::from_le_bytes(self.take(&what)?)),
            3 => Value::I16(i16::from_le_bytes(self.take(&what)?)),
            4 => Value::U32(u32::from_le_bytes(self.take(&what)?)),
            5 => Value::I32(i32::from_le_bytes(self.take(&what)?)),
            6 => Value::F32(f32::from_le_bytes(self.take(&what)?)),
            7 => match self.take::<1>(&what)? {
                [0] => Value::Bool(false),
                [1] => Value::Bool(true),
                [b] => return Err(format!("`{key}` is a bool of byte {b}, neither 0 nor 1")),
            },
            8 => Value::String(self.string(&what)?),
            9 if array_allowed => {
                let element_type = self.u32(&format!("the element type of `{key}`"))?;
                if element_type == 9 {
                    return Err(format!("`{key}` is an array of arrays, which llama.cpp does not read either"));
                }
                let count = self.count(&format!("the length of `{key}`"), 1)?;
                if count > MAX_ARRAY {
                    return Err(format!("`{key}` has {count} elements, more than the {MAX_ARRAY} an array may have"));
                }
                // Grown as elements are read, not reserved from the count.
                let mut values = Vec::new();
                for _ in 0..count {
                    values.push(self.value(element_type, key, false)?);
                }
                Value::Array(values)
            }
            10 => Value::U64(u64::from_le_bytes(self.take(&what)?)),
            11 => Value::I64(i64::from_le_bytes(self.take(&what)?)),
            12 => Value::F64(f64::from_le_bytes(self.take(&what)?)),
            other => return Err(format!("`{key}` has value type {other}, which GGUF does not define")),
        })
    }
}
