//! Bad checkpoints give an error that names the problem (file, tensor, shapes, dtype), never a
//! panic. Each case starts from a valid fixture checkpoint and breaks one thing.

use std::path::Path;

use burn::backend::NdArray;
use integration_tests::fixture_path;
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};

type B = NdArray;

/// A copy of `dense/save_pretrained` in a temporary folder.
fn dense_copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for file in ["config.json", "model.safetensors"] {
        std::fs::copy(fixture_path(&format!("dense/save_pretrained/{file}")), dir.path().join(file)).unwrap();
    }
    dir
}

/// Rewrites `model.safetensors` in `dir` through `edit`, which gets each (name, dtype, shape,
/// bytes) and returns the tensor to write instead, or `None` to drop it.
fn rewrite(dir: &Path, edit: impl Fn(&str, Dtype, Vec<usize>, Vec<u8>) -> Option<(Dtype, Vec<usize>, Vec<u8>)>) {
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    let tensors = SafeTensors::deserialize(&bytes).unwrap();
    let edited: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = tensors
        .tensors()
        .into_iter()
        .filter_map(|(name, view)| {
            edit(&name, view.dtype(), view.shape().to_vec(), view.data().to_vec()).map(|(d, s, b)| (name, d, s, b))
        })
        .collect();
    let views: Vec<(String, TensorView)> = edited
        .iter()
        .map(|(name, dtype, shape, data)| (name.clone(), TensorView::new(*dtype, shape.clone(), data).unwrap()))
        .collect();
    safetensors::serialize_to_file(views, None, &path).unwrap();
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
    let dir = tempfile::tempdir().unwrap();
    for file in ["config.json", "model.safetensors"] {
        std::fs::copy(fixture_path(&format!("moe/save_pretrained/{file}")), dir.path().join(file)).unwrap();
    }
    rewrite(dir.path(), |name, d, s, b| (name != "lm_head.weight").then_some((d, s, b)));
    assert_eq!(load_error(dir.path()), "missing tensor `lm_head.weight` in the checkpoint");
}
