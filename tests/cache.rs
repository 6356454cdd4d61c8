//! Incremental forward: a prompt run as prefix + rest with one cache gives the same
//! logits as one pass, and so does a single-token step after a prefill (the recurrent delta-rule
//! path), which also equals transformers' own cached decode step.

use burn::backend::NdArray;
use burn::tensor::Tensor;
use integration_tests::{MODELS, Reference, assert_close, fixture_path, relative_check};
use qwen35::PrefillBlocks;

type B = NdArray;
const TOLERANCE: f32 = 1e-4;

fn to_vec(t: Tensor<B, 3>) -> Vec<f32> {
    t.into_data().to_vec::<f32>().unwrap()
}

#[test]
fn prefix_then_rest_equals_one_pass() {
    let device = Default::default();
    for name in MODELS {
        let (_, model) = qwen35::load_model::<B>(fixture_path(&format!("{name}/save_pretrained")), &device).unwrap();
        let reference = Reference::open(name);
        let ids = reference.input_ids::<B>("len130", &device);
        let full = to_vec(model.forward(ids.clone()));
        // Splits inside a chunk, on a chunk boundary, after a single token, and one token short.
        for split in [1, 50, 64, 100, 129] {
            let mut cache = model.new_cache();
            let first = model.forward_cached(ids.clone().narrow(1, 0, split), &mut cache);
            let rest = model.forward_cached(ids.clone().narrow(1, split, 130 - split), &mut cache);
            assert_eq!(cache.seq_len(), 130);
            let joined = to_vec(Tensor::cat(vec![first, rest], 1));
            relative_check(&format!("{name} split at {split}"), &joined, &full, TOLERANCE);
        }
    }
}

#[test]
fn decode_step_after_prefill_equals_transformers() {
    let device = Default::default();
    for name in MODELS {
        let (_, model) = qwen35::load_model::<B>(fixture_path(&format!("{name}/hf_layout")), &device).unwrap();
        let reference = Reference::open(name);
        let ids = reference.input_ids::<B>("len130", &device);
        let mut cache = model.new_cache();
        model.forward_cached(ids.clone().narrow(1, 0, 129), &mut cache);
        let step = model.forward_cached(ids.narrow(1, 129, 1), &mut cache);
        assert_close(&reference, "decode.logits", step, TOLERANCE);
    }
}

#[test]
fn forked_caches_continue_independently() {
    // The decision runtime runs a shared prefix once and continues it with several rows.
    let device = Default::default();
    let (_, model) = qwen35::load_model::<B>(fixture_path("moe/save_pretrained"), &device).unwrap();
    let reference = Reference::open("moe");
    let batch = reference.input_ids::<B>("batch2", &device); // two different 70-token rows
    let prefix = batch.clone().narrow(0, 0, 1).narrow(1, 0, 40);
    let mut shared = model.new_cache();
    model.forward_cached(prefix.clone(), &mut shared);
    for row in 0..2 {
        let rest = batch.clone().narrow(0, row, 1).narrow(1, 40, 30);
        let mut fork = shared.clone();
        let continued = to_vec(model.forward_cached(rest.clone(), &mut fork));
        let whole = to_vec(model.forward(Tensor::cat(vec![prefix.clone(), rest], 1)).narrow(1, 40, 30));
        relative_check(&format!("fork {row}"), &continued, &whole, TOLERANCE);
    }
    assert_eq!(shared.seq_len(), 40, "forks do not touch the shared prefix");
}

#[test]
fn rows_continuing_one_shared_prefix_as_a_batch_equal_each_row_whole() {
    // What a decision does with a state and several question rows: the prefix runs once with
    // batch 1, and its attention keys serve every row of the batch without being repeated. Small
    // blocks cut the shared keys and the rows' own keys mid-block.
    let device = Default::default();
    let (_, model) = qwen35::load_model::<B>(fixture_path("dense/save_pretrained"), &device).unwrap();
    let model = model.with_blocks(PrefillBlocks { segment: 16, key_block: 12 });
    let reference = Reference::open("dense");
    let batch = reference.input_ids::<B>("batch2", &device);
    let prefix = batch.clone().narrow(0, 0, 1).narrow(1, 0, 40);
    let rest = batch.narrow(1, 40, 30);
    let mut shared = model.new_cache();
    model.forward_cached(prefix.clone(), &mut shared);
    let mut rows = shared.repeat_batch(2);
    let continued = model.forward_cached(rest.clone(), &mut rows);
    assert_eq!(rows.seq_len(), 70);
    for row in 0..2 {
        let whole =
            model.forward(Tensor::cat(vec![prefix.clone(), rest.clone().narrow(0, row, 1)], 1)).narrow(1, 40, 30);
        relative_check(&format!("row {row}"), &to_vec(continued.clone().narrow(0, row, 1)), &to_vec(whole), TOLERANCE);
    }
}
