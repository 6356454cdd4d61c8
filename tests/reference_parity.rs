//! Logits and every layer's output equal transformers 5.23.0 on the random-weight reference
//! models (real head dims, small widths), for both models, both checkpoint layouts, every run.
//! Tolerance: `1e-4 * max(1, max |reference|)` per tensor.

use burn::backend::NdArray;
use integration_tests::{LAYOUTS, MODELS, RUNS, Reference, assert_close, fixture_path};

type B = NdArray;
const TOLERANCE: f32 = 1e-4;

fn check(model_name: &str, layout: &str) {
    let device = Default::default();
    let (config, model) = qwen35::load_model::<B>(fixture_path(&format!("{model_name}/{layout}")), &device)
        .unwrap_or_else(|e| panic!("{model_name}/{layout}: {e}"));
    let reference = Reference::open(model_name);
    for run in RUNS {
        let trace = model.trace(reference.input_ids(run, &device));
        let mut worst = ("", 0.0f32);
        let mut check = |name: String, tensor| {
            let error = assert_close(&reference, &format!("{run}.{name}"), tensor, TOLERANCE);
            if error >= worst.1 {
                worst = (if name == "logits" { "logits" } else { "layer" }, error);
            }
            error
        };
        check("embeddings".into(), trace.embeddings);
        for (i, layer) in trace.layers.into_iter().enumerate() {
            check(format!("layers.{i}.mixer"), layer.mixer);
            check(format!("layers.{i}.mlp"), layer.mlp);
            check(format!("layers.{i}"), layer.hidden);
        }
        check("norm".into(), trace.norm);
        let logits = check("logits".into(), trace.logits);
        println!("{model_name:5} {layout:15} {run:6} layers {}: worst {:.1e}, logits {logits:.1e}", config.num_hidden_layers, worst.1);
    }
}

#[test]
fn dense_save_pretrained_matches_transformers() {
    check(MODELS[0], LAYOUTS[0]);
}

#[test]
fn dense_hf_layout_matches_transformers() {
    check(MODELS[0], LAYOUTS[1]);
}

#[test]
fn moe_save_pretrained_matches_transformers() {
    check(MODELS[1], LAYOUTS[0]);
}

#[test]
fn moe_hf_layout_matches_transformers() {
    check(MODELS[1], LAYOUTS[1]);
}
