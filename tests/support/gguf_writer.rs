//! A GGUF file written from parts (`docs/gguf.md` has the layout): the tests compose files from
//! the metadata and tensors of files llama.cpp's tools made, where no one fixture holds both.

use std::path::Path;

use decider_ops::GgmlType;
use qwen35::gguf::{Array, GgufFile, Value};

/// A tensor to write: its name, dimensions outermost first (`[out, in]`), type and bytes.
pub struct Part {
    pub name: String,
    pub dims: Vec<usize>,
    pub ggml_type: GgmlType,
    pub bytes: Vec<u8>,
}

/// The alignment of the tensor data (GGUF's default).
const ALIGNMENT: usize = 32;

/// Writes a GGUF version 3 file of `metadata` and `tensors` at `path`.
pub fn write_gguf(path: &Path, metadata: &[(String, Value)], tensors: &[Part]) {
    let mut file = b"GGUF".to_vec();
    file.extend(3u32.to_le_bytes());
    file.extend((tensors.len() as u64).to_le_bytes());
    file.extend((metadata.len() as u64).to_le_bytes());
    for (key, value) in metadata {
        string(&mut file, key);
        file.extend(type_id(value).to_le_bytes());
        value_bytes(&mut file, value);
    }
    let mut offset = 0;
    for part in tensors {
        string(&mut file, &part.name);
        file.extend((part.dims.len() as u32).to_le_bytes());
        part.dims.iter().rev().for_each(|&d| file.extend((d as u64).to_le_bytes()));
        file.extend(part.ggml_type.id().to_le_bytes());
        file.extend((offset as u64).to_le_bytes());
        offset = (offset + part.bytes.len()).next_multiple_of(ALIGNMENT);
    }
    for part in tensors {
        file.resize(file.len().next_multiple_of(ALIGNMENT), 0);
        file.extend(&part.bytes);
    }
    std::fs::write(path, file).unwrap();
}

fn string(file: &mut Vec<u8>, s: &str) {
    file.extend((s.len() as u64).to_le_bytes());
    file.extend(s.as_bytes());
}

/// GGUF's value type ids.
fn type_id(value: &Value) -> u32 {
    match value {
        Value::U8(_) => 0,
        Value::I8(_) => 1,
        Value::U16(_) => 2,
        Value::I16(_) => 3,
        Value::U32(_) => 4,
        Value::I32(_) => 5,
        Value::F32(_) => 6,
        Value::Bool(_) => 7,
        Value::String(_) => 8,
        Value::Array(_) => 9,
        Value::U64(_) => 10,
        Value::I64(_) => 11,
        Value::F64(_) => 12,
    }
}

fn value_bytes(file: &mut Vec<u8>, value: &Value) {
    match value {
        Value::U8(v) => file.extend(v.to_le_bytes()),
        Value::I8(v) => file.extend(v.to_le_bytes()),
        Value::U16(v) => file.extend(v.to_le_bytes()),
        Value::I16(v) => file.extend(v.to_le_bytes()),
        Value::U32(v) => file.extend(v.to_le_bytes()),
        Value::I32(v) => file.extend(v.to_le_bytes()),
        Value::U64(v) => file.extend(v.to_le_bytes()),
        Value::I64(v) => file.extend(v.to_le_bytes()),
        Value::F32(v) => file.extend(v.to_le_bytes()),
        Value::F64(v) => file.extend(v.to_le_bytes()),
        Value::Bool(v) => file.push(u8::from(*v)),
        Value::String(s) => string(file, s),
        Value::Array(array) => {
            fn each<T>(file: &mut Vec<u8>, id: u32, values: &[T], bytes: impl Fn(&mut Vec<u8>, &T)) {
                file.extend(id.to_le_bytes());
                file.extend((values.len() as u64).to_le_bytes());
                values.iter().for_each(|v| bytes(file, v));
            }
            match array {
                Array::U8(v) => each(file, 0, v, |f, x| f.extend(x.to_le_bytes())),
                Array::I8(v) => each(file, 1, v, |f, x| f.extend(x.to_le_bytes())),
                Array::U16(v) => each(file, 2, v, |f, x| f.extend(x.to_le_bytes())),
                Array::I16(v) => each(file, 3, v, |f, x| f.extend(x.to_le_bytes())),
                Array::U32(v) => each(file, 4, v, |f, x| f.extend(x.to_le_bytes())),
                Array::I32(v) => each(file, 5, v, |f, x| f.extend(x.to_le_bytes())),
                Array::F32(v) => each(file, 6, v, |f, x| f.extend(x.to_le_bytes())),
                Array::Bool(v) => each(file, 7, v, |f, x| f.push(u8::from(*x))),
                Array::String(v) => each(file, 8, v, |f, x| string(f, x)),
                Array::U64(v) => each(file, 10, v, |f, x| f.extend(x.to_le_bytes())),
                Array::I64(v) => each(file, 11, v, |f, x| f.extend(x.to_le_bytes())),
                Array::F64(v) => each(file, 12, v, |f, x| f.extend(x.to_le_bytes())),
            }
        }
    }
}

/// The parts of `file`: its metadata and its tensors, to be written again changed.
pub fn parts(file: &GgufFile) -> (Vec<(String, Value)>, Vec<Part>) {
    let metadata = file.metadata().iter().map(|(key, value)| (key.clone(), value.clone())).collect();
    let tensors = file
        .tensors()
        .iter()
        .map(|(name, tensor)| Part {
            name: name.clone(),
            dims: tensor.dims.clone(),
            ggml_type: tensor.ggml_type,
            bytes: file.tensor(name).unwrap().1.to_vec(),
        })
        .collect();
    (metadata, tensors)
}
