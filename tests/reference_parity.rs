//! Logits and every layer's output equal transformers 5.23.0 on the random-weight reference
//! models (real head dims, small widths), for both models and every run, on every backend compiled
//! in (backend parity: each is held to the same reference); both checkpoint layouts on ndarray, the
//! released one on the others (both with `DECIDER_LONG_TESTS=1`, `integration_tests::layouts_on`);
//! every run on the CPU backends, three on wgpu (all with `DECIDER_LONG_TESTS=1`,
//! `integration_tests::runs_on`).
//! Tolerance: `1e-4 * max(1, max |reference|)` per tensor. Each run is checked as one segment and
//! one key block (the default sizes exceed every run), and on ndarray also split into segments of
//! 64 tokens and key blocks of 48, so the segmented prefill and the online softmax meet the
//! reference at every boundary (len130: three segments, past and own blocks cut mid-block). The
//! segmenting is the same generic code on every backend; the other backends run it with
//! `DECIDER_LONG_TESTS=1` (on wgpu's software driver a model takes minutes a setting).

use integration_tests::{MODELS, Reference, assert_close, fixture_path, layouts_on, long_tests, runs_on};
use qwen35::{PrefillBlocks, Qwen35Ops};

const TOLERANCE: f32 = 1e-4;
const SMALL_BLOCKS: PrefillBlocks = PrefillBlocks { segment: 64, key_block: 48 };

fn check<B: Qwen35Ops>(backend: &str, model_name: &str, layout: &str) {
    let device = Default::default();
    let (config, model) = qwen35::load_model::<B>(fixture_path(&format!("{model_name}/{layout}")), &device)
        .unwrap_or_else(|e| panic!("{model_name}/{layout}: {e}"));
    let reference = Reference::open(model_name);
    check_runs(backend, model_name, layout, &config, &model, &reference, PrefillBlocks::default());
    if backend == "ndarray" || long_tests() {
        let model = model.with_blocks(SMALL_BLOCKS);
        check_runs(backend, model_name, layout, &config, &model, &reference, SMALL_BLOCKS);
    }
}

fn check_runs<B: Qwen35Ops>(
    backend: &str,
    model_name: &str,
    layout: &str,
    config: &qwen35::Qwen35Config,
    model: &qwen35::Qwen35Model<B>,
    reference: &Reference,
    blocks: PrefillBlocks,
) {
    let device = Default::default();
    for run in runs_on(backend) {
        let trace = model.trace(reference.input_ids(run, &device));
        let mut worst = 0.0f32;
        let mut check = |name: String, tensor| {
            let error = assert_close(reference, &format!("{run}.{name}"), tensor, TOLERANCE);
            worst = worst.max(error);
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
        println!(
            "{backend:7} {model_name:5} {layout:15} {run:6} segment {:4} key block {:4} layers {}: worst {worst:.1e}, logits {logits:.1e}",
            blocks.segment, blocks.key_block, config.num_hidden_layers
        );
    }
}

macro_rules! backend_parity {
    ($name:ident, $backend:ty, $about:literal) => {
        mod $name {
            use super::*;
            type B = $backend;
            const NAME: &str = stringify!($name);

            #[test]
            fn dense_matches_transformers() {
                for layout in layouts_on(NAME) {
                    check::<B>(NAME, MODELS[0], layout);
                }
            }

            #[test]
            fn moe_matches_transformers() {
                for layout in layouts_on(NAME) {
                    check::<B>(NAME, MODELS[1], layout);
                }
            }
        }
    };
}

decider_ops::for_each_backend!(backend_parity);
