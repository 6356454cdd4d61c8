//! The weight formats are exact for what they store: a model loaded in Q8_0 gives the same
//! outputs, layer by layer, as the f32 path run on the same weights rounded to Q8_0 and back.
//! This isolates the kernels and the layout of the blocks (orientation, block order, scales,
//! experts) from the rounding itself, whose effect on decisions is a separate, reported figure.
//!
//! The checkpoint used is a fixture with every weight whose rows are whole blocks replaced by its
//! Q8_0 round trip. Quantizing such a weight again gives back the same blocks (same values, same
//! f16 scale), so its f32 load and its q8 load hold the same numbers.
#![allow(deprecated)] // burn-candle is deprecated upstream from 0.21; still a supported backend here.

use burn::module::{Module, Param, ParamId};
use burn::tensor::{Distribution, Tensor, TensorData};
use decider_ops::{Q8_BLOCK, dequantize_q8, q8_values, quantize_q8};
use integration_tests::{LAYOUTS, MODELS, RUNS, Reference, fixture_copy, fixture_path, relative_check, rewrite_tensors};
use qwen35::decoder::{FeedForward, TokenMixer};
use qwen35::format::Q8Weight;
use qwen35::moe::{Experts, FloatExperts, Q8Experts, SparseMoe, SparseMoeConfig};
use qwen35::projection::Projection;
use qwen35::{Qwen35Ops, WeightFormat};
use safetensors::Dtype;

const TOLERANCE: f32 = 1e-4;

/// A copy of a fixture folder whose float weights of whole-block rows are Q8_0 round trips
/// (written as f32).
fn rounded_copy(folder: &str) -> tempfile::TempDir {
    let dir = fixture_copy(folder);
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "safetensors") {
            rewrite_tensors(&path, round_tensor);
        }
    }
    dir
}

/// A float tensor whose rows are whole Q8_0 blocks, as its Q8_0 round trip in f32; any other
/// tensor as it is.
fn round_tensor(_: &str, dtype: Dtype, shape: Vec<usize>, data: Vec<u8>) -> Option<(Dtype, Vec<usize>, Vec<u8>)> {
    let whole_blocks = shape.len() >= 2 && shape[shape.len() - 1] % Q8_BLOCK == 0;
    let values: Option<Vec<f32>> = match dtype {
        Dtype::F32 => Some(data.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()),
        Dtype::BF16 => Some(data.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect()),
        _ => None,
    };
    Some(match values {
        Some(values) if whole_blocks => {
            let (q, scales) = quantize_q8(&values, shape[shape.len() - 1]);
            let rounded: Vec<u8> = dequantize_q8(&q, &scales).iter().flat_map(|v| v.to_le_bytes()).collect();
            (Dtype::F32, shape, rounded)
        }
        _ => (dtype, shape, data),
    })
}

fn values<B: Qwen35Ops, const D: usize>(tensor: Tensor<B, D>) -> Vec<f32> {
    tensor.into_data().convert::<f32>().to_vec().unwrap()
}

/// Q8 and f32 loads of the rounded checkpoint agree on every layer's outputs and the logits.
fn check_model<B: Qwen35Ops>(backend: &str, model_name: &str, layout: &str) {
    let device = Default::default();
    let dir = rounded_copy(&format!("{model_name}/{layout}"));
    let (_, float) = qwen35::load_model_with_weights::<B>(dir.path(), WeightFormat::F32, &device).unwrap();
    let (_, q8) = qwen35::load_model_with_weights::<B>(dir.path(), WeightFormat::Q8, &device).unwrap();
    // The format was applied: the first DeltaNet's input projection holds Q8_0 blocks.
    let TokenMixer::LinearAttn(delta) = &q8.layers[0].mixer else { panic!("layer 0 is DeltaNet") };
    let Projection::Q8(weight) = &delta.in_proj_qkv else { panic!("{model_name}: q8 load kept f32 projections") };
    // In the int dtype the backend's kernel reads (i8 on ndarray).
    assert_eq!(weight.values.val().dtype(), B::q8_values_dtype(), "{model_name}");

    let reference = Reference::open(model_name);
    // The runs that cross chunk boundaries and batch rows (the others add time, not cases: the
    // format changes only the projections, which see every run's rows alike).
    for run in RUNS.into_iter().filter(|run| ["len7", "len130", "batch2"].contains(run)) {
        let ids = reference.input_ids::<B>(run, &device);
        let (expected, actual) = (float.trace(ids.clone()), q8.trace(ids));
        let mut worst = 0.0f32;
        for (i, (e, a)) in expected.layers.into_iter().zip(actual.layers).enumerate() {
            let name = format!("{model_name}/{layout} {run} layers.{i}");
            worst = worst.max(relative_check(&format!("{name}.mixer"), &values(a.mixer), &values(e.mixer), TOLERANCE));
            worst = worst.max(relative_check(&format!("{name}.mlp"), &values(a.mlp), &values(e.mlp), TOLERANCE));
        }
        let logits = relative_check(&format!("{model_name}/{layout} {run} logits"), &values(actual.logits), &values(expected.logits), TOLERANCE);
        println!("{backend:7} {model_name:5} {layout:15} {run:6} q8 vs rounded f32: worst layer {worst:.1e}, logits {logits:.1e}");
    }
}

/// Routed experts in Q8_0 equal f32 experts holding the rounded weights (the fixture MoE's
/// expert width, 16, is not a whole block, so this is checked on a block-sized MoE block).
fn check_experts<B: Qwen35Ops>() {
    let device = Default::default();
    let (e, h, i) = (8, 64, 32);
    let config = SparseMoeConfig::new(h, e, 2, i, 32);
    // Initialised now (`to_device` reads every parameter), so both copies share the values.
    let float = config.init::<B>(&device).to_device(&device);
    let Experts::Float(experts) = &float.experts else { panic!("f32 by default") };
    let round = |stacked: &Param<Tensor<B, 3>>| -> (Tensor<B, 3>, Q8Weight<B>) {
        let [batch, d_in, d_out] = stacked.lazy_shape().dims::<3>();
        let rows = values(stacked.val().swap_dims(1, 2)); // [E, out, in]: rows of input values
        let (q, scales) = quantize_q8(&rows, d_in);
        let rounded = Tensor::<B, 3>::from_data(TensorData::new(dequantize_q8(&q, &scales), [batch, d_out, d_in]), &device);
        let q8 = Q8Weight {
            values: Param::initialized(ParamId::new(), q8_values(q, [batch, d_out, d_in], &device)),
            scales: Param::from_tensor(Tensor::from_data(TensorData::new(scales, [batch, d_out, d_in / Q8_BLOCK]), &device)),
        };
        (rounded.swap_dims(1, 2), q8)
    };
    let (gate_up, gate_up_q8) = round(&experts.gate_up_proj);
    let (down, down_q8) = round(&experts.down_proj);
    let rounded = SparseMoe {
        experts: Experts::Float(FloatExperts { gate_up_proj: Param::from_tensor(gate_up), down_proj: Param::from_tensor(down) }),
        ..float.clone()
    };
    let q8 = SparseMoe { experts: Experts::Q8(Q8Experts { gate_up_proj: gate_up_q8, down_proj: down_q8 }), ..float };
    let x = Tensor::<B, 3>::random([2, 37, h], Distribution::Normal(0.0, 1.0), &device);
    relative_check("q8 experts", &values(q8.forward(x.clone())), &values(rounded.forward(x)), TOLERANCE);
}

/// What a q8 load leaves in f32: experts whose width is not a whole block.
fn check_partial_blocks<B: Qwen35Ops>() {
    let (_, q8) = qwen35::load_model_with_weights::<B>(fixture_path("moe/save_pretrained"), WeightFormat::Q8, &Default::default()).unwrap();
    let FeedForward::Sparse(moe) = &q8.layers[0].mlp else { panic!("MoE") };
    assert!(matches!(moe.experts, Experts::Float(_)), "experts of width 16 stay f32");
    assert!(matches!(moe.shared_expert.gate_proj, Projection::Q8(_)), "the shared expert's input (32) is a whole block");
    assert!(matches!(moe.shared_expert.down_proj, Projection::Float(_)), "its down projection's input (24) is not");
}

macro_rules! weight_formats {
    ($name:ident, $backend:ty) => {
        mod $name {
            use super::*;
            type B = $backend;
            const NAME: &str = stringify!($name);

            #[test]
            fn q8_loads_equal_f32_on_rounded_weights() {
                for model in MODELS {
                    for layout in LAYOUTS {
                        check_model::<B>(NAME, model, layout);
                    }
                }
            }

            #[test]
            fn q8_experts_equal_f32_experts_on_rounded_weights() {
                check_experts::<B>();
            }

            #[test]
            fn projections_of_partial_blocks_stay_f32() {
                check_partial_blocks::<B>();
            }
        }
    };
}

#[cfg(feature = "ndarray")]
weight_formats!(ndarray, burn::backend::NdArray);
#[cfg(feature = "candle")]
weight_formats!(candle, burn::backend::Candle);
#[cfg(feature = "wgpu")]
weight_formats!(wgpu, burn::backend::Wgpu);
