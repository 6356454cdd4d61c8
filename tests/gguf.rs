//! The GGUF reader (`qwen35::gguf`) and the GGML block types (`decider_ops::GgmlType`) against the
//! `gguf` Python package, llama.cpp's own reader and reference dequantization: the fixture
//! `gguf/blocks.gguf` and what the package reads from it (`gguf/metadata.json`, both written by
//! `tests/fixtures/gguf/generate.py`). And every malformed file refused with a reason, never a panic.

use std::path::Path;

use decider_ops::GgmlType;
use integration_tests::fixture_path;
use qwen35::LoadError;
use qwen35::gguf::{Array, GgufFile, MAX_ARRAY, MAX_ENTRIES, Value};
use serde_json::Value as Json;

fn fixture() -> GgufFile {
    GgufFile::open(fixture_path("gguf/blocks.gguf")).unwrap()
}

fn listed() -> Json {
    serde_json::from_str(&std::fs::read_to_string(fixture_path("gguf/metadata.json")).unwrap()).unwrap()
}

#[test]
fn every_block_type_dequantizes_to_llama_cpps_values_bit_for_bit() {
    let file = fixture();
    let mut seen = Vec::new();
    for (name, tensor) in file.tensors() {
        if name.ends_with(".expected") {
            continue;
        }
        let ours = file.f32(name).unwrap();
        let expected = file.f32(&format!("{name}.expected")).unwrap();
        assert_eq!(ours.len(), expected.len(), "{name}");
        let differ = ours.iter().zip(&expected).filter(|(a, b)| a.to_bits() != b.to_bits()).count();
        assert_eq!(differ, 0, "{name}: {differ} of {} values differ from gguf.quants.dequantize", ours.len());
        // Not a vacuous match: the blocks hold a spread of values.
        let distinct: std::collections::BTreeSet<u32> = ours.iter().map(|v| v.to_bits()).collect();
        assert!(distinct.len() > 100, "{name}: {} distinct values", distinct.len());
        seen.push(tensor.ggml_type);
    }
    for ggml_type in GgmlType::ALL {
        assert!(seen.contains(&ggml_type), "the fixture has no {} tensor", ggml_type.name());
    }
}

#[test]
fn metadata_and_tensor_table_read_as_the_gguf_package_reads_them() {
    let file = fixture();
    let listed = listed();
    let metadata = listed["metadata"].as_object().unwrap();
    let keys: Vec<&String> = file.metadata().keys().collect();
    let mut expected_keys: Vec<&String> = metadata.keys().collect();
    expected_keys.sort();
    assert_eq!(keys, expected_keys);
    for (key, expected) in metadata {
        let value = &file.metadata()[key];
        assert_eq!(&json(value), expected, "`{key}`: {value:?}");
    }
    let tensors = listed["tensors"].as_object().unwrap();
    assert_eq!(file.tensors().len(), tensors.len());
    for (name, expected) in tensors {
        let tensor = &file.tensors()[name];
        assert!(tensor.ggml_type.name().eq_ignore_ascii_case(expected["type"].as_str().unwrap()), "{name}");
        let dims: Vec<usize> =
            expected["dims"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect();
        assert_eq!(tensor.dims, dims, "{name}");
    }
}

/// A metadata value as JSON, as the package's reader gives it (an f32 widened to f64).
fn json(value: &Value) -> Json {
    fn all<T: Copy>(values: &[T], to: impl Fn(T) -> Json) -> Json {
        Json::Array(values.iter().map(|&v| to(v)).collect())
    }
    match value {
        Value::U8(v) => Json::from(*v),
        Value::I8(v) => Json::from(*v),
        Value::U16(v) => Json::from(*v),
        Value::I16(v) => Json::from(*v),
        Value::U32(v) => Json::from(*v),
        Value::I32(v) => Json::from(*v),
        Value::U64(v) => Json::from(*v),
        Value::I64(v) => Json::from(*v),
        Value::F32(v) => Json::from(f64::from(*v)),
        Value::F64(v) => Json::from(*v),
        Value::Bool(v) => Json::from(*v),
        Value::String(v) => Json::from(v.as_str()),
        Value::Array(array) => match array {
            Array::U8(v) => all(v, Json::from),
            Array::I8(v) => all(v, Json::from),
            Array::U16(v) => all(v, Json::from),
            Array::I16(v) => all(v, Json::from),
            Array::U32(v) => all(v, Json::from),
            Array::I32(v) => all(v, Json::from),
            Array::U64(v) => all(v, Json::from),
            Array::I64(v) => all(v, Json::from),
            Array::F32(v) => all(v, |x| Json::from(f64::from(x))),
            Array::F64(v) => all(v, Json::from),
            Array::Bool(v) => all(v, Json::from),
            Array::String(v) => Json::Array(v.iter().map(|s| Json::from(s.as_str())).collect()),
        },
    }
}

fn open_bytes(dir: &Path, bytes: &[u8]) -> Result<GgufFile, LoadError> {
    let path = dir.join("model.gguf");
    std::fs::write(&path, bytes).unwrap();
    GgufFile::open(&path)
}

fn refusal(dir: &Path, bytes: &[u8]) -> String {
    match open_bytes(dir, bytes) {
        Ok(_) => panic!("a malformed file was read"),
        Err(error @ LoadError::Gguf { .. }) => error.to_string(),
        Err(other) => panic!("not a GGUF refusal: {other}"),
    }
}

/// Where the tensor data starts: every byte before it is header, metadata or table. The data
/// ends the file, each tensor padded to the alignment (32) as the package writes it.
fn data_start(bytes: &[u8]) -> usize {
    let file = fixture();
    let data: usize = file.tensors().keys().map(|name| file.tensor(name).unwrap().1.len().next_multiple_of(32)).sum();
    bytes.len() - data
}

#[test]
fn every_truncation_is_refused_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(fixture_path("gguf/blocks.gguf")).unwrap();
    let start = data_start(&bytes);
    // Every cut in the header, metadata and table; cuts in the data every 97 bytes.
    let cuts = (0..start).chain((start..bytes.len()).step_by(97));
    for cut in cuts {
        let message = refusal(dir.path(), &bytes[..cut]);
        assert!(
            message.contains("truncated") || message.contains("does not start with `GGUF`"),
            "cut at {cut}: {message}"
        );
    }
    assert!(open_bytes(dir.path(), &bytes).is_ok());
}

#[test]
fn a_corrupted_header_byte_is_read_or_refused_never_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(fixture_path("gguf/blocks.gguf")).unwrap();
    let mut refused = 0;
    for at in 0..data_start(&bytes) {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut corrupt = bytes.clone();
            corrupt[at] ^= flip;
            match open_bytes(dir.path(), &corrupt) {
                // A flip inside a string or a value can leave a valid file: its tensors still read.
                Ok(file) => {
                    for name in file.tensors().keys() {
                        file.f32(name).unwrap();
                    }
                }
                Err(LoadError::Gguf { .. }) => refused += 1,
                Err(other) => panic!("byte {at} ^ {flip:#x}: not a GGUF refusal: {other}"),
            }
        }
    }
    assert!(refused > 100, "only {refused} corruptions were refused");
}

/// A GGUF file built by hand: a header and the given metadata and table bytes.
fn gguf(version: u32, tensors: u64, entries: u64, rest: &[u8]) -> Vec<u8> {
    let mut bytes = b"GGUF".to_vec();
    bytes.extend(version.to_le_bytes());
    bytes.extend(tensors.to_le_bytes());
    bytes.extend(entries.to_le_bytes());
    bytes.extend(rest);
    bytes
}

fn string(s: &str) -> Vec<u8> {
    let mut bytes = (s.len() as u64).to_le_bytes().to_vec();
    bytes.extend(s.as_bytes());
    bytes
}

/// A tensor table entry.
fn tensor(name: &str, dims: &[u64], type_id: u32, offset: u64) -> Vec<u8> {
    let mut bytes = string(name);
    bytes.extend((dims.len() as u32).to_le_bytes());
    dims.iter().for_each(|d| bytes.extend(d.to_le_bytes()));
    bytes.extend(type_id.to_le_bytes());
    bytes.extend(offset.to_le_bytes());
    bytes
}

#[test]
fn malformed_files_are_refused_with_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let refused = |bytes: Vec<u8>, expected: &str| {
        let message = refusal(dir.path(), &bytes);
        assert!(message.contains(expected), "expected `{expected}` in: {message}");
    };
    refused(gguf(1, 0, 0, &[]), "GGUF version 1");
    refused(gguf(3u32.swap_bytes(), 0, 0, &[]), "big-endian");
    refused(gguf(7, 0, 0, &[]), "unknown GGUF version 7");
    refused(gguf(3, u64::MAX, 0, &[]), "the tensor count is 18446744073709551615, more than");
    // A key whose length is far beyond the file: refused before anything is allocated for it.
    refused(
        gguf(3, 0, 1, &[u64::MAX.to_le_bytes(), [0; 8], [0; 8]].concat()),
        "metadata key 0 is 18446744073709551615, more than",
    );
    let entry =
        |value_type: u32, value: &[u8]| [string("k"), value_type.to_le_bytes().to_vec(), value.to_vec()].concat();
    refused(gguf(3, 0, 1, &entry(13, &[])), "value type 13, which GGUF does not define");
    refused(gguf(3, 0, 1, &entry(7, &[2])), "a bool of byte 2");
    refused(gguf(3, 0, 1, &entry(9, &9u32.to_le_bytes())), "an array of arrays");
    let array = [0u32.to_le_bytes().to_vec(), (1u64 << 40).to_le_bytes().to_vec()].concat();
    refused(gguf(3, 0, 1, &entry(9, &array)), "the length of `k` is 1099511627776, more than");
    refused(gguf(3, 0, 2, &[entry(0, &[1]), entry(0, &[2])].concat()), "`k` appears twice");
    refused(
        gguf(
            3,
            0,
            1,
            &[string("general.alignment"), 4u32.to_le_bytes().to_vec(), 24u32.to_le_bytes().to_vec()].concat(),
        ),
        "not a power of two",
    );
    refused(gguf(3, 1, 0, &tensor("w", &[32, 2], 99, 0)), "GGML type 99, which this build does not read");
    refused(gguf(3, 1, 0, &tensor("w", &[33, 2], GgmlType::Q8_0.id(), 0)), "not whole blocks of 32");
    refused(gguf(3, 1, 0, &tensor("w", &[1, 1, 1, 1, 1], 0, 0)), "5 dimensions, more than GGML's 4");
    refused(gguf(3, 1, 0, &tensor("w", &[u64::MAX, 2], 0, 0)), "more values than fit in 64 bits");
    // A zero dimension does not hide the others' overflow.
    refused(gguf(3, 1, 0, &tensor("w", &[0, 1 << 32, 1 << 32], 0, 0)), "more values than fit in 64 bits");
    // Values that fit, bytes that do not.
    refused(gguf(3, 1, 0, &tensor("w", &[(1 << 62) + 1], 0, 0)), "more bytes than fit in memory");
    refused(gguf(3, 1, 0, &tensor("w", &[1 << 60], 0, 0)), "runs past the end of the file");
    refused(gguf(3, 1, 0, &tensor("w", &[4], 0, 8)), "starts at 8 in the data, not at 0");
    refused(gguf(3, 1, 0, &tensor("w", &[4], 0, 0)), "runs past the end of the file");
    let with_data = |mut file: Vec<u8>| {
        file.resize(file.len().next_multiple_of(32) + 64, 0);
        file
    };
    let two = [tensor("w", &[4], 0, 0), tensor("w", &[4], 0, 32)].concat();
    refused(with_data(gguf(3, 2, 0, &two)), "tensor `w` appears twice");
    // Tensors overlap: llama.cpp stores them one after another, in table order.
    let overlapping = [tensor("a", &[4], 0, 0), tensor("b", &[4], 0, 0)].concat();
    refused(with_data(gguf(3, 2, 0, &overlapping)), "tensor `b` starts at 0 in the data, not at 32");
    refused(gguf(0, 0, 0, &[]), "unknown GGUF version 0");
    let alignment = |value_type: u32, value: &[u8]| {
        [string("general.alignment"), value_type.to_le_bytes().to_vec(), value.to_vec()].concat()
    };
    refused(gguf(3, 0, 1, &alignment(4, &0u32.to_le_bytes())), "`general.alignment` is 0, not a power of two");
    refused(gguf(3, 0, 1, &alignment(8, &string("32"))), "`general.alignment` is a string, not a u32");
    refused(gguf(3, 0, 1, &[vec![1, 0, 0, 0, 0, 0, 0, 0, 0xff], vec![0; 8]].concat()), "metadata key 0 is not UTF-8");
    refused(
        gguf(3, 1, 0, &tensor(&"n".repeat(64), &[4], 0, 0)),
        "the name of tensor 0 is 64 bytes long, more than the 63",
    );
    let empty = [13u32.to_le_bytes().to_vec(), 0u64.to_le_bytes().to_vec()].concat();
    refused(gguf(3, 0, 1, &entry(9, &empty)), "`k` is an array of value type 13");
    // The bounds on arrays and entries, reached by files large enough to hold what they claim.
    let long =
        [0u32.to_le_bytes().to_vec(), (MAX_ARRAY as u64 + 1).to_le_bytes().to_vec(), vec![0; MAX_ARRAY + 1]].concat();
    refused(gguf(3, 0, 1, &entry(9, &long)), &format!("more than the {MAX_ARRAY} an array may have"));
    refused(
        gguf(3, 0, MAX_ENTRIES as u64 + 1, &vec![0; 14 * (MAX_ENTRIES + 1)]),
        &format!("more than the {MAX_ENTRIES} a file may have"),
    );
    // Version 2 and an alignment of 64 are read: the tensor's data starts at the next multiple of 64.
    let mut file = gguf(2, 1, 1, &[alignment(4, &64u32.to_le_bytes()), tensor("w", &[4], 0, 0)].concat());
    file.resize(file.len().next_multiple_of(64), 0);
    [1.5f32, -2.0, 0.25, 8.0].iter().for_each(|v| file.extend(v.to_le_bytes()));
    let read = open_bytes(dir.path(), &file).unwrap();
    assert_eq!(read.f32("w").unwrap(), [1.5, -2.0, 0.25, 8.0]);
    // A device is refused before it is read (the file checks of `qwen35::model_file`).
    match GgufFile::open("/dev/zero") {
        Err(error) => assert!(error.to_string().contains("not a regular file"), "{error}"),
        Ok(_) => panic!("/dev/zero was read"),
    }
}

/// llama.cpp's Q4_K blocks of rows of every kind (`gguf/quantized.gguf`, written through
/// llama.cpp's own library by `tests/fixtures/gguf/quantized.py`), and of the fixture models'
/// Q4_K tensors (llama-quantize's, from the weights the BF16 file holds exactly).
#[test]
fn q4_k_quantization_is_llama_cpps_byte_for_byte() {
    let file = GgufFile::open(fixture_path("gguf/quantized.gguf")).unwrap();
    let source = file.f32("q4_k.source").unwrap();
    let (tensor, theirs) = file.tensor("q4_k").unwrap();
    assert_eq!(tensor.ggml_type, GgmlType::Q4K);
    assert_same_blocks("quantized.gguf q4_k", &decider_ops::quantize_q4_k(&source), theirs);
    let mut compared = 0;
    for model in ["dense", "moe"] {
        let quantized = GgufFile::open(fixture_path(&format!("gguf/{model}-q4_k_m.gguf"))).unwrap();
        let bf16 = GgufFile::open(fixture_path(&format!("gguf/{model}-bf16.gguf"))).unwrap();
        for (name, tensor) in quantized.tensors().iter().filter(|(_, t)| t.ggml_type == GgmlType::Q4K) {
            let (_, theirs) = quantized.tensor(name).unwrap();
            let ours = decider_ops::quantize_q4_k(&bf16.f32(name).unwrap());
            assert_same_blocks(&format!("{model}-q4_k_m.gguf {name}"), &ours, theirs);
            compared += tensor.len();
        }
    }
    assert!(compared >= 8 * 256 * 32, "only {compared} values of the model fixtures are Q4_K");
}

/// `ours` and `theirs` are the same Q4_K blocks (naming the first that differs).
fn assert_same_blocks(what: &str, ours: &[u8], theirs: &[u8]) {
    let size = GgmlType::Q4K.block_bytes();
    assert_eq!(ours.len(), theirs.len(), "{what}");
    let differ: Vec<usize> =
        ours.chunks(size).zip(theirs.chunks(size)).enumerate().filter(|(_, (a, b))| a != b).map(|(i, _)| i).collect();
    if let Some(&first) = differ.first() {
        let block = |bytes: &[u8]| bytes[first * size..][..size].to_vec();
        panic!(
            "{what}: {} of {} super-blocks differ from llama.cpp's; the first, {first}:\nours   {:?}\ntheirs {:?}",
            differ.len(),
            ours.len() / size,
            block(ours),
            block(theirs)
        );
    }
}
