//! Bad checkpoints give an error that names the problem (file, tensor, shapes, dtype), never a
//! panic. Each case starts from a valid fixture checkpoint and breaks one thing.

use std::path::Path;

use burn::backend::NdArray;
use integration_tests::{fixture_copy, fixture_path, rewrite_tensors};
use safetensors::{Dtype, SafeTensors};

type B = NdArray;

/// A copy of `dense/save_pretrained` in a temporary folder.
fn dense_copy() -> tempfile::TempDir {
    fixture_copy("dense/save_pretrained")
}

/// Rewrites `model.safetensors` in `dir` through `edit` ([`rewrite_tensors`]).
fn rewrite(dir: &Path, edit: impl Fn(&str, Dtype, Vec<usize>, Vec<u8>) -> Option<(Dtype, Vec<usize>, Vec<u8>)>) {
    rewrite_tensors(&dir.join("model.safetensors"), edit);
}

fn load_error(dir: &Path) -> String {
    match qwen35::load_model::<B>(dir, &Default::default()) {
        Ok(_) => panic!("loading {} should fail", dir.display()),
        Err(error) => error.to_string(),
    }
}

const A_LOG: &str = "model.layers.0.linear_attn.A_log";

#[test]
fn truncated_file_names_the_file() {
    let dir = dense_copy();
    let path = dir.path().join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 100]).unwrap();
    let message = load_error(dir.path());
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("not a valid safetensors file"), "{message}");
}

#[test]
fn corrupt_header_names_the_file() {
    let dir = dense_copy();
    let path = dir.path().join("model.safetensors");
    std::fs::write(&path, b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}").unwrap();
    let message = load_error(dir.path());
    assert!(message.contains(&path.display().to_string()) && message.contains("not a valid safetensors"), "{message}");
}

#[test]
fn missing_tensor_is_named() {
    let dir = dense_copy();
    rewrite(dir.path(), |name, d, s, b| (name != A_LOG).then_some((d, s, b)));
    let message = load_error(dir.path());
    assert_eq!(message, format!("missing tensor `{A_LOG}` in the checkpoint"));
}

#[test]
fn wrong_shape_gives_both_shapes() {
    let dir = dense_copy();
    let q_proj = "model.layers.3.self_attn.q_proj.weight"; // [2048, 32] in the fixture
    rewrite(dir.path(), |name, d, s, b| Some(if name == q_proj { (d, vec![1024, 64], b) } else { (d, s, b) }));
    let message = load_error(dir.path());
    assert_eq!(message, format!("tensor `{q_proj}` has shape [1024, 64], expected [2048, 32]"));
}

#[test]
fn unsupported_dtype_names_the_tensor() {
    let dir = dense_copy();
    rewrite(dir.path(), |name, d, s, b| {
        Some(if name == A_LOG {
            let n: usize = s.iter().product();
            (Dtype::I64, s, vec![0u8; 8 * n])
        } else {
            (d, s, b)
        })
    });
    let message = load_error(dir.path());
    assert!(message.contains(A_LOG) && message.contains("I64") && message.contains("not supported"), "{message}");
}

#[test]
fn missing_shard_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let source = fixture_path("moe/hf_layout");
    for file in ["config.json", "model.safetensors.index.json", "model-00001-of-00002.safetensors"] {
        std::fs::copy(source.join(file), dir.path().join(file)).unwrap();
    }
    let message = load_error(dir.path());
    assert!(message.contains("model-00002-of-00002.safetensors"), "{message}");
}

#[test]
fn missing_weights_and_config_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let message = load_error(dir.path());
    assert!(message.contains("config.json"), "{message}");
    std::fs::copy(fixture_path("dense/save_pretrained/config.json"), dir.path().join("config.json")).unwrap();
    let message = load_error(dir.path());
    assert!(message.contains("no safetensors weights"), "{message}");
}

#[test]
fn untied_model_without_lm_head_names_it() {
    let dir = fixture_copy("moe/save_pretrained");
    rewrite(dir.path(), |name, d, s, b| (name != "lm_head.weight").then_some((d, s, b)));
    assert_eq!(load_error(dir.path()), "missing tensor `lm_head.weight` in the checkpoint");
}

#[test]
fn non_finite_weights_name_the_tensor() {
    let dir = dense_copy();
    rewrite(dir.path(), |name, d, s, mut b| {
        if name == A_LOG {
            assert_eq!((d, &s[..]), (Dtype::BF16, &[2][..]), "the fixture stores A_log as 2 bf16 values");
            b[2..4].copy_from_slice(&half::bf16::NAN.to_le_bytes());
        }
        Some((d, s, b))
    });
    assert_eq!(
        load_error(dir.path()),
        format!("tensor `{A_LOG}` has 1 NaN or infinite values (the first at flat index 1): the checkpoint is broken")
    );
}

/// A bf16 weight beyond f16's range (65,504) refuses an f16 load, naming the tensor, the count
/// and the first index; the same checkpoint loads in bf16, which holds it. A NaN refuses a
/// bf16 load (its bytes are copied as they are) as it refuses an f32 one.
#[test]
fn weights_a_16_bit_format_cannot_hold_name_the_tensor() {
    const Q_PROJ: &str = "model.layers.3.self_attn.q_proj.weight";
    let dir = dense_copy();
    rewrite(dir.path(), |name, d, s, mut b| {
        if name == Q_PROJ {
            assert_eq!(d, Dtype::BF16, "the fixture stores q_proj in bf16");
            for i in [5, 9] {
                b[2 * i..2 * i + 2].copy_from_slice(&half::bf16::from_f32(-7e4).to_le_bytes());
            }
        }
        Some((d, s, b))
    });
    let load = |weights| qwen35::load_model_with_weights::<B>(dir.path(), weights, &Default::default()).map(|_| ());
    let error = load(qwen35::WeightFormat::F16).unwrap_err().to_string();
    assert_eq!(
        error,
        format!(
            "tensor `{Q_PROJ}` has 2 values beyond the range of f16 (the first at flat index 5): load it as bf16 or f32"
        )
    );
    assert!(load(qwen35::WeightFormat::Bf16).is_ok(), "bf16 holds -7e4");
    rewrite(dir.path(), |name, d, s, mut b| {
        if name == Q_PROJ {
            b[2 * 9..2 * 9 + 2].copy_from_slice(&half::bf16::NAN.to_le_bytes());
        }
        Some((d, s, b))
    });
    let error = load(qwen35::WeightFormat::Bf16).unwrap_err().to_string();
    assert_eq!(
        error,
        format!("tensor `{Q_PROJ}` has 1 NaN or infinite values (the first at flat index 9): the checkpoint is broken")
    );
}

/// A copy of `moe/hf_layout`: an index and two shards.
fn sharded_copy() -> tempfile::TempDir {
    fixture_copy("moe/hf_layout")
}

#[test]
fn a_tensor_stored_in_two_shards_is_refused() {
    let dir = sharded_copy();
    let (first, second) =
        (dir.path().join("model-00001-of-00002.safetensors"), dir.path().join("model-00002-of-00002.safetensors"));
    let first_bytes = std::fs::read(&first).unwrap();
    let first_tensors = SafeTensors::deserialize(&first_bytes).unwrap();
    let (stolen, stolen_view) = first_tensors.tensors().into_iter().next().unwrap();
    let second_bytes = std::fs::read(&second).unwrap();
    let mut tensors = SafeTensors::deserialize(&second_bytes).unwrap().tensors();
    tensors.push((stolen.clone(), stolen_view));
    safetensors::serialize_to_file(tensors, None, &second).unwrap();
    let message = load_error(dir.path());
    assert_eq!(
        message,
        format!("tensor `{stolen}` is stored twice: in {} and in {}", first.display(), second.display())
    );
}

#[test]
fn a_tensor_named_twice_in_one_header_is_refused() {
    // serde keeps the last of duplicate JSON keys, so safetensors alone would accept this file.
    let dir = dense_copy();
    let path = dir.path().join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&bytes[8..8 + header_len]).unwrap();
    let entry = format!("{}:{},", serde_json::json!(A_LOG), header[A_LOG]);
    let text = std::str::from_utf8(&bytes[8..8 + header_len]).unwrap();
    let doubled = format!("{{{entry}{}", &text[1..]);
    let mut rewritten = (doubled.len() as u64).to_le_bytes().to_vec();
    rewritten.extend_from_slice(doubled.as_bytes());
    rewritten.extend_from_slice(&bytes[8 + header_len..]);
    std::fs::write(&path, rewritten).unwrap();
    assert_eq!(load_error(dir.path()), format!("tensor `{A_LOG}` is stored twice: in {}", path.display()));
}

#[test]
fn a_shard_outside_the_folder_is_refused() {
    let dir = sharded_copy();
    let index_path = dir.path().join("model.safetensors.index.json");
    for outside in ["../model-00001-of-00002.safetensors", "/etc/passwd"] {
        let mut index: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(fixture_path("moe/hf_layout/model.safetensors.index.json")).unwrap(),
        )
        .unwrap();
        let map = index["weight_map"].as_object_mut().unwrap();
        let first = map.keys().next().unwrap().clone();
        map.insert(first, outside.into());
        std::fs::write(&index_path, index.to_string()).unwrap();
        let message = load_error(dir.path());
        assert_eq!(
            message,
            format!(
                "invalid shard index {}: shard `{outside}` is outside the model folder (a shard is a relative path without `..`)",
                index_path.display()
            )
        );
    }
}

#[test]
fn an_expert_width_the_checkpoint_does_not_have_is_a_shape_error() {
    // Within its bound, but not the checkpoint's: the per-expert tensors are shape-checked
    // before the stacked experts are allocated (256 experts x 2,048 x 10^6 would be terabytes).
    let dir = fixture_copy("moe/save_pretrained");
    let path = dir.path().join("config.json");
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config["moe_intermediate_size"] = 1_000_000.into();
    std::fs::write(&path, config.to_string()).unwrap();
    let message = load_error(dir.path());
    assert!(message.starts_with("tensor `") && message.contains("1000000"), "{message}");
}

#[test]
fn absurd_config_values_name_the_field_before_any_allocation() {
    // Each of these once ended in a multi-terabyte allocation that aborted the process.
    let cases: [(&str, u64, &str); 6] = [
        ("num_hidden_layers", 1_000_000_000_000, "1024"),
        ("intermediate_size", 1_000_000_000, "1048576"),
        ("hidden_size", 1_000_000_000, "65536"),
        ("vocab_size", 1_000_000_000_000, "4194304"),
        ("head_dim", 1_000_000_000, "4096"),
        ("linear_conv_kernel_dim", 1_000_000_000, "64"),
    ];
    for (field, value, bound) in cases {
        let dir = dense_copy();
        let path = dir.path().join("config.json");
        let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        config[field] = value.into();
        if field == "num_hidden_layers" {
            // Without `layer_types`, the layer list would be built from the count.
            config.as_object_mut().unwrap().remove("layer_types");
        }
        std::fs::write(&path, config.to_string()).unwrap();
        assert_eq!(
            load_error(dir.path()),
            format!("config field `{field}`: {value} is larger than this loader allows ({bound})")
        );
    }
}

/// Every file a load reads whole must be a regular file within its size bound, checked before it
/// is read: a link to `/dev/zero` would otherwise be read until memory runs out.
#[cfg(unix)]
#[test]
fn special_and_oversized_model_files_are_refused_before_they_are_read() {
    for file in ["config.json", "decider_config.json", "tokenizer.json", "model.safetensors"] {
        let dir = dense_copy();
        std::fs::write(dir.path().join("tokenizer.json"), decider::Tokenizer::test_tokenizer_json()).unwrap();
        let path = dir.path().join(file);
        let _ = std::fs::remove_file(&path);
        std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
        let message = match decider::Decider::<B>::load(dir.path(), &Default::default()) {
            Ok(_) => panic!("{file} as /dev/zero loads"),
            Err(error) => with_sources(&error),
        };
        assert!(
            message.contains(&path.display().to_string()) && message.contains("not a regular file"),
            "{file}: {message}"
        );
    }
    // A config of 2 MB (a junk key of that size) is over the 1 MiB a config may have.
    let dir = dense_copy();
    let path = dir.path().join("config.json");
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    config["junk"] = serde_json::Value::String("j".repeat(2_000_000));
    std::fs::write(&path, config.to_string()).unwrap();
    let message = load_error(dir.path());
    assert!(message.contains("over the 1048576 bytes such a file may have"), "{message}");
}

/// `decider quantize` writes its folder under a temporary name and renames it when complete: a
/// run that fails leaves nothing, and a folder it cannot write is named as one it cannot write.
#[test]
fn a_failed_quantize_leaves_no_partial_folder() {
    use qwen35::WeightFormat;
    let device = Default::default();
    let parent = tempfile::tempdir().unwrap();
    let out = parent.path().join("q8");
    // A NaN in the embedding fails the run after the folder's other files are written.
    let nan = integration_tests::dense_with_vocab(4096, Some(70_001));
    let error = qwen35::quantize::quantize_folder::<B>(nan.path(), &out, WeightFormat::Q8, &device).unwrap_err();
    assert!(error.to_string().contains("NaN or infinite"), "{error}");
    let left: Vec<_> = std::fs::read_dir(parent.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    let source = integration_tests::dense_with_vocab(4096, None);
    qwen35::quantize::quantize_folder::<B>(source.path(), &out, WeightFormat::Q8, &device).unwrap();
    let left: Vec<_> = std::fs::read_dir(parent.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, ["q8"]);
    assert!(out.join("model.safetensors.index.json").is_file() && out.join("config.json").is_file());
    // A folder under a regular file cannot be written.
    let file = parent.path().join("a file");
    std::fs::write(&file, "").unwrap();
    let error =
        qwen35::quantize::quantize_folder::<B>(source.path(), &file.join("q8"), WeightFormat::Q8, &device).unwrap_err();
    assert!(error.to_string().starts_with("cannot write"), "{error}");
}

/// An error's message followed by each of its sources'.
fn with_sources(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    message
}
