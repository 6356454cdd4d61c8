//! A GGUF file (llama.cpp's model file, `docs/gguf.md`): its metadata and its tensors, memory-mapped
//! and read one tensor at a time.
//!
//! Every length and count in the file is checked against the bytes that remain before anything
//! is allocated for it, and every tensor's data against the file's end, so a truncated or hostile
//! file is refused with a message that says where, never read past its end. What the metadata
//! holds in memory is at most about three times the bytes it takes in the file (an array of empty
//! strings: 8 bytes in the file, a 24-byte `String` each), and names, arrays and entries are
//! bounded ([`MAX_KEY`], [`MAX_NAME`], [`MAX_ARRAY`], [`MAX_ENTRIES`]).

use std::collections::BTreeMap;
use std::fmt;
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

/// The longest tensor name, in bytes: GGML's (`GGML_MAX_NAME` less its terminating zero).
pub const MAX_NAME: usize = 63;

/// The longest metadata key, in bytes: far above GGUF's dotted keys
/// (`qwen35.attention.head_count_kv`), so that a key quoted in a message stays short.
pub const MAX_KEY: usize = 1024;

/// The most elements a metadata array may have: 64 times the largest vocabulary (Qwen3.5's
/// 248,320 tokens, whose token and merge lists are the longest arrays of a model file).
pub const MAX_ARRAY: usize = 1 << 24;

/// The most tensors, and the most metadata entries, a file may have: far above a model's (a few
/// thousand tensors; llama.cpp stacks the experts of a layer in one).
pub const MAX_ENTRIES: usize = 1 << 20;

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
    Array(Array),
}

/// A metadata array: values of one type, held as that type (arrays of arrays are refused, as
/// llama.cpp refuses them).
#[derive(Debug, Clone, PartialEq)]
pub enum Array {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F32(Vec<f32>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
    String(Vec<String>),
}

impl Value {
    /// GGUF's name of the value's type.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::U8(_) => "u8",
            Value::I8(_) => "i8",
            Value::U16(_) => "u16",
            Value::I16(_) => "i16",
            Value::U32(_) => "u32",
            Value::I32(_) => "i32",
            Value::U64(_) => "u64",
            Value::I64(_) => "i64",
            Value::F32(_) => "f32",
            Value::F64(_) => "f64",
            Value::Bool(_) => "bool",
            Value::String(_) => "string",
            Value::Array(_) => "array",
        }
    }
}

/// Where a tensor is and what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufTensor {
    /// Outermost first (PyTorch's order; GGUF lists them innermost first): a weight is `[out, in]`.
    pub dims: Vec<usize>,
    pub ggml_type: GgmlType,
    /// Its number of values (checked when the file was opened).
    len: usize,
    /// Offset of its data in the file.
    start: usize,
    /// Bytes of its data.
    bytes: usize,
}

impl GgufTensor {
    /// Its number of values.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An open GGUF file.
pub struct GgufFile {
    path: PathBuf,
    map: Mmap,
    metadata: Metadata,
    tensors: Tensors,
}

impl GgufFile {
    /// Opens and checks `path`: its header, metadata and tensor table (the tensors are read when
    /// asked for).
    pub fn open(path: impl AsRef<Path>) -> Result<Self, LoadError> {
        let path = path.as_ref();
        let io = |cause| LoadError::Io { path: path.to_path_buf(), cause };
        let file = File::open(path).map_err(io)?;
        check_regular(&file).map_err(io)?;
        // SAFETY: the map is read-only; as with every mmap-based loader, the file must not be
        // truncated or rewritten by another process while it is open.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        let (metadata, tensors) = parse(&map).map_err(|reason| LoadError::Gguf { path: path.to_path_buf(), reason })?;
        Ok(GgufFile { path: path.to_path_buf(), map, metadata, tensors })
    }

    /// Where it was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The metadata, by key.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// The tensors, by name.
    pub fn tensors(&self) -> &Tensors {
        &self.tensors
    }

    /// Tensor `name`, with its stored bytes.
    pub fn tensor(&self, name: &str) -> Result<(&GgufTensor, &[u8]), LoadError> {
        let tensor = self.tensors.get(name).ok_or_else(|| LoadError::MissingTensor { name: name.to_owned() })?;
        Ok((tensor, &self.map[tensor.start..tensor.start + tensor.bytes]))
    }

    /// Hands tensor `name`'s pages of the file back to the kernel once it is read and held
    /// elsewhere: the resident memory of a load grows by what it keeps, not by the file's size.
    pub fn release(&self, name: &str) {
        let Some(tensor) = self.tensors.get(name) else { return };
        #[cfg(unix)]
        // SAFETY: the map is a shared, read-only map of a file, and the tensor's bytes are no
        // longer read: dropped pages are read again from the file if touched again (the first
        // and last page may hold a neighbour's bytes).
        let _ =
            unsafe { self.map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, tensor.start, tensor.bytes) };
    }

    /// Tensor `name`'s values as f32, dequantized as llama.cpp dequantizes them.
    pub fn f32(&self, name: &str) -> Result<Vec<f32>, LoadError> {
        let (tensor, bytes) = self.tensor(name)?;
        Ok(dequantized(tensor.ggml_type, bytes))
    }
}

/// The values of `ggml_type` in `bytes` (whole blocks), dequantized as llama.cpp dequantizes them,
/// in runs of blocks in parallel.
pub fn dequantized(ggml_type: GgmlType, bytes: &[u8]) -> Vec<f32> {
    let blocks = 1024;
    let mut values = vec![0.0; bytes.len() / ggml_type.block_bytes() * ggml_type.block_values()];
    values
        .par_chunks_mut(blocks * ggml_type.block_values())
        .zip(bytes.par_chunks(blocks * ggml_type.block_bytes()))
        .for_each(|(out, bytes)| ggml_type.dequantize(bytes, out));
    values
}

/// A file's metadata, by key.
pub type Metadata = BTreeMap<String, Value>;
/// A file's tensors, by name.
pub type Tensors = BTreeMap<String, GgufTensor>;

/// The metadata and tensor table of a file's bytes; a reason it cannot be read.
fn parse(file: &[u8]) -> Result<(Metadata, Tensors), String> {
    if file.get(..4) != Some(MAGIC) {
        return Err("it does not start with `GGUF`".into());
    }
    let mut r = Reader { file, at: 4 };
    match r.u32().map_err(|f| r.fault(f, "the version"))? {
        2 | 3 => {}
        1 => return Err("GGUF version 1 (2023) is not read; convert it again with llama.cpp".into()),
        v if v != 0 && v.swap_bytes() <= 3 => {
            return Err("a big-endian GGUF file; only little-endian files are read".into());
        }
        v => return Err(format!("unknown GGUF version {v}")),
    }
    // The least a table entry or metadata entry takes: an empty name, no dimensions, the type and
    // offset; an empty key, the type, a one-byte value.
    let tensor_count = r.count(8 + 4 + 4 + 8).map_err(|f| r.fault(f, "the tensor count"))?;
    let kv_count = r.count(8 + 4 + 1).map_err(|f| r.fault(f, "the metadata count"))?;
    for (what, count) in [("tensors", tensor_count), ("metadata entries", kv_count)] {
        if count > MAX_ENTRIES {
            return Err(format!("{count} {what}, more than the {MAX_ENTRIES} a file may have"));
        }
    }
    let mut metadata = BTreeMap::new();
    for i in 0..kv_count {
        let key = r.string(MAX_KEY).map_err(|f| r.fault(f, format_args!("metadata key {i}")))?;
        let value = r.value(&key)?;
        if metadata.insert(key.clone(), value).is_some() {
            return Err(format!("metadata key `{key}` appears twice"));
        }
    }
    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(Value::U32(a)) if a.is_power_of_two() => u64::from(*a),
        Some(Value::U32(a)) => return Err(format!("`general.alignment` is {a}, not a power of two")),
        Some(other) => return Err(format!("`general.alignment` is a {}, not a u32", other.type_name())),
    };
    let mut table = Vec::new();
    for i in 0..tensor_count {
        let name = r.string(MAX_NAME).map_err(|f| r.fault(f, format_args!("the name of tensor {i}")))?;
        let what = |part: &str| format!("the {part} of tensor `{name}`");
        let n_dims = r.u32().map_err(|f| r.fault(f, what("dimension count")))? as usize;
        if n_dims > MAX_DIMS {
            return Err(format!("tensor `{name}` has {n_dims} dimensions, more than GGML's {MAX_DIMS}"));
        }
        let mut dims = Vec::with_capacity(n_dims);
        for _ in 0..n_dims {
            dims.push(r.u64().map_err(|f| r.fault(f, what("dimensions")))?);
        }
        let type_id = r.u32().map_err(|f| r.fault(f, what("type")))?;
        let offset = r.u64().map_err(|f| r.fault(f, what("offset")))?;
        let ggml_type = GgmlType::from_id(type_id).ok_or_else(|| {
            let known: Vec<&str> = GgmlType::ALL.iter().map(|t| t.name()).collect();
            format!(
                "tensor `{name}` has GGML type {type_id}, which this build does not read (it reads {})",
                known.join(", ")
            )
        })?;
        // llama.cpp's bound: the values, counting a zero dimension as one, fit in an i64.
        let fits = dims.iter().try_fold(1u64, |n, &d| n.checked_mul(d.max(1))).is_some_and(|n| n <= i64::MAX as u64);
        if !fits {
            return Err(format!("tensor `{name}` has dimensions {dims:?}: more values than fit in 64 bits"));
        }
        let len = dims.iter().product::<u64>() as usize;
        let row = dims.first().copied().unwrap_or(1);
        if !row.is_multiple_of(ggml_type.block_values() as u64) {
            return Err(format!(
                "tensor `{name}` has rows of {row} values, not whole blocks of {} values of {}",
                ggml_type.block_values(),
                ggml_type.name()
            ));
        }
        let bytes = ggml_type
            .bytes_of(len)
            .ok_or_else(|| format!("tensor `{name}` has dimensions {dims:?}: more bytes than fit in memory"))?;
        dims.reverse();
        table.push((name, dims, ggml_type, len, offset, bytes));
    }
    // The data: each tensor where the last one ended, padded to the alignment, in table order
    // (as llama.cpp requires: no gaps, no overlaps), and inside the file.
    let data_start = (r.at as u64).next_multiple_of(alignment);
    let mut expected = 0u64;
    let mut tensors = BTreeMap::new();
    for (name, dims, ggml_type, len, offset, bytes) in table {
        if offset != expected {
            return Err(format!(
                "tensor `{name}` starts at {offset} in the data, not at {expected}, where the one before it ends (padded to the alignment {alignment})"
            ));
        }
        let end = data_start.checked_add(offset).and_then(|start| start.checked_add(bytes as u64));
        let start = match end {
            Some(end) if end <= file.len() as u64 => (data_start + offset) as usize,
            _ => {
                return Err(format!(
                    "tensor `{name}` ({bytes} bytes at {offset} in the data) runs past the end of the file ({} bytes): truncated?",
                    file.len()
                ));
            }
        };
        expected = (offset + bytes as u64).next_multiple_of(alignment);
        let dims = dims.into_iter().map(|d| d as usize).collect();
        if tensors.insert(name.clone(), GgufTensor { dims, ggml_type, len, start, bytes }).is_some() {
            return Err(format!("tensor `{name}` appears twice"));
        }
    }
    Ok((metadata, tensors))
}

/// Why a read stopped; made a message, naming what was read, only when it is reported.
#[derive(Debug)]
enum Fault {
    /// The file ended.
    Ended,
    /// A count or length beyond what the bytes left could hold.
    Count {
        count: u64,
        left: usize,
    },
    /// A string longer than its bound.
    TooLong {
        len: u64,
        max: usize,
    },
    NotUtf8,
}

/// A cursor over the file's bytes that refuses to read past their end.
struct Reader<'a> {
    file: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// The message of `fault`, met while reading `what`.
    fn fault(&self, fault: Fault, what: impl fmt::Display) -> String {
        match fault {
            Fault::Ended => format!("the file ends ({} bytes) before {what}: truncated?", self.file.len()),
            Fault::Count { count, left } => {
                format!("{what} is {count}, more than the {left} bytes left could hold: truncated or corrupt?")
            }
            Fault::TooLong { len, max } => format!("{what} is {len} bytes long, more than the {max} it may have"),
            Fault::NotUtf8 => format!("{what} is not UTF-8"),
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Fault> {
        let bytes = self.file.get(self.at..self.at.checked_add(n).ok_or(Fault::Ended)?).ok_or(Fault::Ended)?;
        self.at += n;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Fault> {
        Ok(self.take(N)?.try_into().expect("N bytes"))
    }

    fn u32(&mut self) -> Result<u32, Fault> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, Fault> {
        self.array().map(u64::from_le_bytes)
    }

    /// A count of things of at least `least` bytes each: never more than the bytes left could
    /// hold, so what is allocated for them is bounded by the file's size.
    fn count(&mut self, least: usize) -> Result<usize, Fault> {
        let count = self.u64()?;
        let left = self.file.len() - self.at;
        match count <= (left / least) as u64 {
            true => Ok(count as usize),
            false => Err(Fault::Count { count, left }),
        }
    }

    /// A string of at most `max` bytes.
    fn string(&mut self, max: usize) -> Result<String, Fault> {
        let len = self.count(1)?;
        if len > max {
            return Err(Fault::TooLong { len: len as u64, max });
        }
        String::from_utf8(self.take(len)?.to_vec()).map_err(|_| Fault::NotUtf8)
    }

    /// The type and value of key `key`.
    fn value(&mut self, key: &str) -> Result<Value, String> {
        let value_type = self.u32().map_err(|f| self.fault(f, format_args!("the type of `{key}`")))?;
        let fault = |r: &Self, f| r.fault(f, format_args!("the value of `{key}`"));
        match value_type {
            ARRAY => return self.array_value(key).map(Value::Array),
            STRING => return self.string(usize::MAX).map(Value::String).map_err(|f| fault(self, f)),
            _ => {}
        }
        let size = element_size(value_type)
            .ok_or_else(|| format!("`{key}` has value type {value_type}, which GGUF does not define"))?;
        let b = self.take(size).map_err(|f| fault(self, f))?;
        fn le<const N: usize>(b: &[u8]) -> [u8; N] {
            b.try_into().expect("the type's size")
        }
        Ok(match value_type {
            0 => Value::U8(b[0]),
            1 => Value::I8(b[0] as i8),
            2 => Value::U16(u16::from_le_bytes(le(b))),
            3 => Value::I16(i16::from_le_bytes(le(b))),
            4 => Value::U32(u32::from_le_bytes(le(b))),
            5 => Value::I32(i32::from_le_bytes(le(b))),
            6 => Value::F32(f32::from_le_bytes(le(b))),
            7 => Value::Bool(bool_of(b[0], key)?),
            10 => Value::U64(u64::from_le_bytes(le(b))),
            11 => Value::I64(i64::from_le_bytes(le(b))),
            12 => Value::F64(f64::from_le_bytes(le(b))),
            _ => unreachable!("the types element_size knows"),
        })
    }

    /// An array's element type, count and elements, held as their type.
    fn array_value(&mut self, key: &str) -> Result<Array, String> {
        let element_type = self.u32().map_err(|f| self.fault(f, format_args!("the element type of `{key}`")))?;
        let least = match element_type {
            ARRAY => return Err(format!("`{key}` is an array of arrays, which llama.cpp does not read either")),
            t => element_size(t)
                .ok_or_else(|| format!("`{key}` is an array of value type {t}, which GGUF does not define"))?,
        };
        let count = self.count(least).map_err(|f| self.fault(f, format_args!("the length of `{key}`")))?;
        if count > MAX_ARRAY {
            return Err(format!("`{key}` has {count} elements, more than the {MAX_ARRAY} an array may have"));
        }
        if element_type == STRING {
            // Grown as strings are read, not reserved from the count.
            let mut strings = Vec::new();
            for i in 0..count {
                let string = self.string(usize::MAX).map_err(|f| self.fault(f, format_args!("`{key}`[{i}]")))?;
                strings.push(string);
            }
            return Ok(Array::String(strings));
        }
        let bytes = self.take(count * least).expect("counted against the bytes left");
        fn each<const N: usize, T>(bytes: &[u8], from: fn([u8; N]) -> T) -> Vec<T> {
            bytes.chunks_exact(N).map(|b| from(b.try_into().expect("N bytes"))).collect()
        }
        Ok(match element_type {
            0 => Array::U8(bytes.to_vec()),
            1 => Array::I8(each(bytes, i8::from_le_bytes)),
            2 => Array::U16(each(bytes, u16::from_le_bytes)),
            3 => Array::I16(each(bytes, i16::from_le_bytes)),
            4 => Array::U32(each(bytes, u32::from_le_bytes)),
            5 => Array::I32(each(bytes, i32::from_le_bytes)),
            6 => Array::F32(each(bytes, f32::from_le_bytes)),
            7 => Array::Bool(bytes.iter().map(|&b| bool_of(b, key)).collect::<Result<_, _>>()?),
            10 => Array::U64(each(bytes, u64::from_le_bytes)),
            11 => Array::I64(each(bytes, i64::from_le_bytes)),
            12 => Array::F64(each(bytes, f64::from_le_bytes)),
            _ => unreachable!("element types matched above"),
        })
    }
}

/// GGUF's value types of a string and of an array.
const STRING: u32 = 8;
const ARRAY: u32 = 9;

/// The bytes of a value of GGUF type `value_type`; for a string, its length's (the least it takes).
/// `None` for an array or a type GGUF does not define.
fn element_size(value_type: u32) -> Option<usize> {
    match value_type {
        0 | 1 | 7 => Some(1),
        2 | 3 => Some(2),
        4..=6 => Some(4),
        STRING | 10..=12 => Some(8),
        _ => None,
    }
}

/// A bool's byte, 0 or 1.
fn bool_of(byte: u8, key: &str) -> Result<bool, String> {
    match byte {
        0 => Ok(false),
        1 => Ok(true),
        b => Err(format!("`{key}` holds a bool of byte {b}, neither 0 nor 1")),
    }
}
