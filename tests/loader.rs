//! The modules' names cover every parameter and every tensor: each parameter of the model comes
//! from the checkpoint (none keeps its lazy initial value), and each tensor of the text model in
//! the checkpoint is read exactly once (the vision tower and MTP head of released
//! checkpoints are the only tensors left). Checked on both fixture models in both layouts.

use std::collections::BTreeSet;

use burn::backend::NdArray;
use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::Tensor;
use integration_tests::fixture_path;
use qwen35::Qwen35Config;
use qwen35::WeightFormat;
use qwen35::checkpoint::Checkpoint;
use qwen35::loader::Load;
use qwen35::weights::CheckpointSource;

type B = NdArray;

/// Counts the float parameters that were never initialised (still lazy).
struct LazyParams(usize);

impl ModuleVisitor<B> for LazyParams {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        if !param.is_initialized() {
            self.0 += 1;
        }
    }
}

fn check(folder: &str) {
    let dir = fixture_path(folder);
    let config = Qwen35Config::from_file(dir.join("config.json")).unwrap();
    let checkpoint = Checkpoint::open_dir(&dir).unwrap();
    let device = Default::default();
    let source = CheckpointSource::new(&checkpoint).unwrap();
    let load = Load::<B>::from(&source, &device, WeightFormat::F32);
    let model = config.load(&load.root());
    let model = load.finish(model).unwrap_or_else(|error| panic!("{folder}: {error}"));

    let mut lazy = LazyParams(0);
    model.visit(&mut lazy);
    assert_eq!(lazy.0, 0, "{folder}: parameters not filled from the checkpoint");

    let read = source.tensors_read();
    let read: Vec<&str> = read.iter().map(String::as_str).collect();
    let unique: BTreeSet<&str> = read.iter().copied().collect();
    assert_eq!(unique.len(), read.len(), "{folder}: a tensor was read twice");
    let left: BTreeSet<&str> = checkpoint.names().filter(|name| !unique.contains(name)).collect();
    let not_text = |name: &&str| name.starts_with("model.visual.") || name.starts_with("mtp.");
    assert!(left.iter().all(not_text), "{folder}: text-model tensors the loader ignored: {left:?}");
    if folder.ends_with("hf_layout") {
        assert!(!left.is_empty(), "{folder}: the released layout carries vision and MTP tensors");
    }
}

#[test]
fn every_parameter_and_every_text_tensor_is_used_once() {
    for folder in ["dense/hf_layout", "dense/save_pretrained", "moe/hf_layout", "moe/save_pretrained"] {
        check(folder);
    }
}
