//! The weight formats are exact for what they store: every projection, expert and token table
//! (embeddings, output head) of a model loaded in Q8_0 or Q4_0 gives the same outputs as the f32
//! path on the same weights rounded to the format and back; a whole model loaded in f16 or bf16
//! gives the f32 load's logits on the same weights. This isolates the kernels and the
//! layout of the blocks (orientation, block order, scales, packing, the kernel's own order of the
//! values, experts) from the rounding itself, whose effect on decisions is a separate, reported
//! figure.
//!
//! The checkpoint used is a fixture with every weight whose rows are whole blocks replaced by its
//! round trip: Q8_0 for q8; for q4, Q8_0 for the token tables (which q4 keeps in Q8_0) and
//! llama.cpp's own Q4_0 rounding for the rest. Quantizing such a weight again gives back the same
//! blocks (same values, same f16 scale: a llama.cpp Q4_0 block rounds to itself with no error,
//! which the scale search of `decider_ops::quantize_q4` cannot beat), so its f32 load and its
//! quantized load hold the same numbers. The block products also round
//! their input to integer blocks (`decider_ops::round_activations`): 8 bits, or 16 for the q8
//! projections whose input is a product of activations (`out_proj`, `o_proj`, `down_proj`, as
//! `docs/weights.md` gives the rule), so the f32 path is given the input rounded the same way. Whole
//! models are not compared: there every projection's rounding is real, and on these small
//! random models it is amplified layer by layer (up to 0.15 of a layer's scale).

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::{DType, Int, Tensor, TensorData};
use decider_ops::{
    ActivationBits, BlockInts, GgmlType, Half, Q4_BLOCK, Q8_BLOCK, dequantize_q4, dequantize_q8, grouped_matmul,
    holds_half_floats, quantize_q4, quantize_q8, reference, round_activations, round_to_bf16,
};
use integration_tests::{MODELS, fixture_copy, fixture_path, layouts_on, relative_check, rewrite_tensors};
use qwen35::checkpoint::Checkpoint;
use qwen35::decoder::{FeedForward, TokenMixer};
use qwen35::loader::Load;
use qwen35::moe::SparseMoeConfig;
use qwen35::projection::Projection;
use qwen35::token_table::TokenTable;
use qwen35::weight::{Held, Weight, WeightValues};
use qwen35::weight_format::WeightUse;
use qwen35::{Qwen35Model, Qwen35Ops, WeightChoice, WeightFormat};
use safetensors::Dtype;

const TOLERANCE: f32 = 1e-4;

/// A copy of a fixture folder whose float weights of whole-block rows are round trips through
/// the blocks a load in `format` holds them in (written as f32).
fn rounded_copy(folder: &str, format: WeightFormat) -> tempfile::TempDir {
    let dir = fixture_copy(folder);
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "safetensors") {
            rewrite_tensors(&path, |name, dtype, shape, data| round_tensor(format, name, dtype, shape, data));
        }
    }
    dir
}

/// A float tensor whose rows are whole blocks, as its round trip in f32 (Q8_0 for q8 and for
/// q4's token tables, llama.cpp's Q4_0 for q4's other weights); any other tensor as it is.
fn round_tensor(
    format: WeightFormat,
    name: &str,
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
) -> Option<(Dtype, Vec<usize>, Vec<u8>)> {
    let whole_blocks = shape.len() >= 2 && shape[shape.len() - 1].is_multiple_of(Q8_BLOCK);
    let values: Option<Vec<f32>> = match dtype {
        Dtype::F32 => Some(data.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect()),
        Dtype::BF16 => Some(data.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect()),
        _ => None,
    };
    let table = name.contains("embed_tokens") || name.contains("lm_head");
    Some(match values {
        Some(values) if whole_blocks => {
            let rounded = match format {
                WeightFormat::Q4 if !table => {
                    let (packed, scales): (Vec<Vec<u8>>, Vec<half::f16>) =
                        values.chunks(Q4_BLOCK).map(reference::llama_q4_0_block).unzip();
                    dequantize_q4(&packed.concat(), &scales)
                }
                _ => {
                    let (q, scales) = quantize_q8(&values, shape[shape.len() - 1]);
                    dequantize_q8(&q, &scales)
                }
            };
            (Dtype::F32, shape, rounded.iter().flat_map(|v| v.to_le_bytes()).collect())
        }
        _ => (dtype, shape, data),
    })
}

fn values<B: Qwen35Ops, const D: usize>(tensor: Tensor<B, D>) -> Vec<f32> {
    tensor.into_data().convert::<f32>().to_vec().unwrap()
}

/// `[rows, width]` random activations in `[-1, 1)`.
fn random_input(rows: usize, width: usize, seed: u64) -> Vec<f32> {
    let mut state = seed;
    (0..rows * width)
        .map(|_| {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// `x [rows, width]` rounded to blocks of `bits` integers, as a block product rounds its input; a
/// width of partial blocks has no block product (it stays f32) and is kept as it is.
fn rounded<B: Qwen35Ops>(x: Vec<f32>, width: usize, bits: ActivationBits, device: &B::Device) -> Tensor<B, 2> {
    let rows = x.len() / width;
    let x = if width.is_multiple_of(Q8_BLOCK) { round_activations(&x, width, bits) } else { x };
    Tensor::from_data(TensorData::new(x, [rows, width]), device)
}

/// `[rows, width]` random activations that are their own 8-bit round trip, so a block
/// product's rounding of them changes them by at most the last bit of a block's scale.
fn rounded_input<B: Qwen35Ops>(rows: usize, width: usize, seed: u64, device: &B::Device) -> Tensor<B, 2> {
    rounded(random_input(rows, width, seed), width, ActivationBits::Eight, device)
}

/// The bits a projection of a load in `format` rounds its input to, by the rule of
/// `docs/weights.md`: 16 for q8's products of activations, else 8.
fn bits_of(format: WeightFormat, name: &str) -> ActivationBits {
    let product = ["out_proj", "o_proj", "down_proj"].iter().any(|p| name.ends_with(p));
    if format == WeightFormat::Q8 && product { ActivationBits::Sixteen } else { ActivationBits::Eight }
}

/// Every projection of a model with its path, in module order.
fn projections<B: Qwen35Ops>(model: &Qwen35Model<B>) -> Vec<(String, &Projection<B>)> {
    let mut found = Vec::new();
    for (i, layer) in model.layers.iter().enumerate() {
        let mixer: Vec<(&str, &Projection<B>)> = match &layer.mixer {
            TokenMixer::LinearAttn(d) => {
                vec![("in_proj_qkv", &d.in_proj_qkv), ("in_proj_z", &d.in_proj_z), ("out_proj", &d.out_proj)]
            }
            TokenMixer::SelfAttn(a) => {
                vec![("q_proj", &a.q_proj), ("k_proj", &a.k_proj), ("v_proj", &a.v_proj), ("o_proj", &a.o_proj)]
            }
        };
        let mlp = match &layer.mlp {
            FeedForward::Dense(mlp) => mlp,
            FeedForward::Sparse(moe) => &moe.shared_expert,
        };
        let mlp = [("gate_proj", &mlp.gate_proj), ("up_proj", &mlp.up_proj), ("down_proj", &mlp.down_proj)];
        found.extend(mixer.into_iter().chain(mlp).map(|(name, projection)| (format!("layers.{i}.{name}"), projection)));
    }
    found
}

/// Each projection of a load in `format` of the rounded checkpoint equals its f32 load's on
/// rounded inputs, and so do its token tables.
fn check_model<B: Qwen35Ops>(model_name: &str, layout: &str, format: WeightFormat) {
    let device = Default::default();
    let dir = rounded_copy(&format!("{model_name}/{layout}"), format);
    let (_, float) = qwen35::load_model_with_weights::<B>(dir.path(), WeightFormat::F32, &device).unwrap();
    let (_, quantized) = qwen35::load_model_with_weights::<B>(dir.path(), format, &device).unwrap();
    let mut in_blocks = 0;
    for ((name, expected), (_, actual)) in projections(&float).into_iter().zip(projections(&quantized)) {
        // In the int dtype of the backend's storage (i8 or u8 on ndarray, whose kernels read them).
        let storage = B::block_storage();
        let dtype = match (&actual.weight.held, format) {
            (Held::Q8(weight), WeightFormat::Q8) => {
                Some((weight.values.val().dtype(), storage.dtype::<B>(BlockInts::Q8Values)))
            }
            (Held::Q4(weight), WeightFormat::Q4) => {
                Some((weight.values.val().dtype(), storage.dtype::<B>(BlockInts::Q4Bytes)))
            }
            (Held::F32(_), _) => None,
            (_, format) => panic!("{model_name} {name}: another block format than {format}"),
        };
        if let Some((got, want)) = dtype {
            assert_eq!(got, want, "{model_name} {name}");
            in_blocks += 1;
        }
        let [d_in, _] = expected.dims();
        let x = random_input(9, d_in, in_blocks as u64);
        let input = Tensor::<B, 2>::from_data(TensorData::new(x.clone(), [9, d_in]), &device);
        let as_rounded = match actual.weight.held {
            Held::F32(_) => input.clone(),
            _ => rounded::<B>(x, d_in, bits_of(format, &name), &device),
        };
        let label = format!("{model_name}/{layout} {format} {name}");
        relative_check(&label, &values(actual.forward(input)), &values(expected.forward(as_rounded)), TOLERANCE);
    }
    assert!(in_blocks > 0, "{model_name}: the {format} load kept every projection in f32");
    check_tables(&format!("{model_name}/{layout} {format}"), &float, &quantized);
}

/// The token tables of a q8 or q4 load (the embeddings, and an untied head) are in Q8_0 and give
/// the f32 load's embeddings and logits: the table is exact for the rounded weights.
fn check_tables<B: Qwen35Ops>(label: &str, float: &Qwen35Model<B>, q8: &Qwen35Model<B>) {
    let device = Default::default();
    let tables = [("embed_tokens", &float.embed_tokens, &q8.embed_tokens)].into_iter();
    let heads = float.lm_head.as_ref().zip(q8.lm_head.as_ref()).map(|(expected, actual)| ("lm_head", expected, actual));
    for (name, expected, actual) in tables.chain(heads) {
        assert!(
            matches!(actual.weight.held, Held::Q8(_)),
            "{label} {name}: the fixture's hidden width is a whole block"
        );
        let [vocab, hidden] = expected.dims();
        let ids: Vec<i64> = [0, vocab - 1, 7, 7, vocab / 2, 1].iter().map(|&id| id as i64).collect();
        let ids = Tensor::<B, 2, Int>::from_data(TensorData::new(ids, [2, 3]), &device);
        relative_check(
            &format!("{label} {name} rows"),
            &values(actual.embed(ids.clone())),
            &values(expected.embed(ids)),
            TOLERANCE,
        );
        let x = rounded_input::<B>(4, hidden, 5, &device).reshape([2, 2, hidden]);
        relative_check(
            &format!("{label} {name} logits"),
            &values(actual.logits(x.clone())),
            &values(expected.logits(x)),
            TOLERANCE,
        );
    }
}

/// Routed experts in Q8_0 and Q4_0 equal f32 experts holding the rounded weights, through the grouped
/// matmuls of both formats, with experts of no rows, one row and several (the fixture MoE's
/// expert width, 16, is not a whole block, so this is checked on a block-sized MoE block).
fn check_experts<B: Qwen35Ops>() {
    let device = Default::default();
    let (e, h, i) = (8, 64, 32);
    let config = SparseMoeConfig::new(h, e, 2, i, 32);
    // Initialised now (`to_device` reads every parameter).
    let float = config.init::<B>(&device).to_device(&device);
    let q8_experts = config.load(&Load::<B>::lazy(&device, WeightFormat::Q8).root()).experts;
    for (name, f32_weight, q8_weight) in [
        ("gate_up_proj", &float.experts.gate_up_proj, &q8_experts.gate_up_proj),
        ("down_proj", &float.experts.down_proj, &q8_experts.down_proj),
    ] {
        let Held::F32(stacked) = &f32_weight.held else { panic!("f32 by default") };
        assert!(matches!(q8_weight.held, Held::Q8(_)), "q8 experts");
        let WeightUse::Matmul(input) = q8_weight.usage else { panic!("experts are multiplied") };
        let bits = input.activation_bits();
        assert_eq!(bits, bits_of(WeightFormat::Q8, name), "the q8 experts' {name}");
        let [batch, d_in, d_out] = stacked.lazy_shape().dims::<3>();
        let rows = values(stacked.val().swap_dims(1, 2)); // [E, out, in]: rows of input values
        let (q, scales) = quantize_q8(&rows, d_in);
        let rounded_weight =
            Tensor::<B, 3>::from_data(TensorData::new(dequantize_q8(&q, &scales), [batch, d_out, d_in]), &device)
                .swap_dims(1, 2);
        let dims = [batch, d_out, d_in];
        let q8 =
            Weight::<B, 3>::from_values(WeightValues::Q8(q, scales), dims, WeightFormat::Q8, q8_weight.usage, &device);
        let (packed, scales) = quantize_q4(&rows, d_in);
        let q4_rounded =
            Tensor::<B, 3>::from_data(TensorData::new(dequantize_q4(&packed, &scales), [batch, d_out, d_in]), &device)
                .swap_dims(1, 2);
        let q4 = Weight::<B, 3>::from_values(
            WeightValues::Q4(packed, scales),
            dims,
            WeightFormat::Q4,
            q8_weight.usage,
            &device,
        );
        let counts: [i64; 8] = [3, 0, 1, 7, 0, 0, 2, 5];
        assert_eq!(batch, counts.len());
        let x = random_input(counts.iter().sum::<i64>() as usize, d_in, 3);
        let input = Tensor::<B, 2>::from_data(TensorData::new(x.clone(), [x.len() / d_in, d_in]), &device);
        let counts = Tensor::<B, 1, Int>::from_data(TensorData::new(counts.to_vec(), [batch]), &device);
        let expected = grouped_matmul(rounded::<B>(x.clone(), d_in, bits, &device), rounded_weight, counts.clone());
        relative_check(
            &format!("q8 {name}"),
            &values(q8.grouped_matmul(input.clone(), counts.clone())),
            &values(expected),
            TOLERANCE,
        );
        let expected =
            grouped_matmul(rounded::<B>(x, d_in, bits_of(WeightFormat::Q4, name), &device), q4_rounded, counts.clone());
        relative_check(&format!("q4 {name}"), &values(q4.grouped_matmul(input, counts)), &values(expected), TOLERANCE);
    }
}

/// `random:CONFIG` in q8 (q4) is the Q8_0 (Q4_0) rounding of the same random network in f32:
/// each projection is off its f32 projection by at most the rounding of its weights, and not
/// exactly on it (weights drawn otherwise would be off by their own size). Every weight is within
/// `a = 1/√in`. Q8_0 moves a weight by at most half a step plus the f16 rounding of its scale, so
/// an output by `Σ |x| × a (1/254 + 1/2048)`. A Q4_0 block's squared error is at most that of
/// llama.cpp's rounding, every weight within half its step `a / 8` (plus its scale's f16
/// rounding), so a block's error vector has a length of at most `√32 · a / 16 · (1 + 1/128)` and
/// an output moves by at most that times `Σ_b |x_b|` over the blocks `x_b` of its input.
fn check_random_model<B: Qwen35Ops>(format: WeightFormat) {
    let device = Default::default();
    let config = decider::demo::demo_config();
    let float = decider::demo::random_model::<B>(&config, WeightFormat::F32, &device);
    let quantized = decider::demo::random_model::<B>(&config, format, &device);
    let mut worst_share = 0.0f32;
    for ((name, expected), (_, actual)) in projections(&float).into_iter().zip(projections(&quantized)) {
        let [d_in, _] = expected.dims();
        let x = rounded_input::<B>(5, d_in, 11, &device);
        let a = (1.0 / d_in as f32).sqrt();
        let bounds: Vec<f32> = match format {
            WeightFormat::Q8 => {
                assert!(matches!(actual.weight.held, Held::Q8(_)), "{name}: the demo's widths are whole blocks");
                values(x.clone().abs().sum_dim(1).mul_scalar(a * (1.0 / 254.0 + 1.0 / 2048.0)))
            }
            _ => {
                assert!(matches!(actual.weight.held, Held::Q4(_)), "{name}: the demo's widths are whole blocks");
                let block_lengths =
                    x.clone().reshape([5, d_in / Q4_BLOCK, Q4_BLOCK]).powi_scalar(2).sum_dim(2).sqrt().sum_dim(1);
                values(block_lengths.reshape([5, 1]).mul_scalar(32f32.sqrt() * a / 16.0 * (1.0 + 1.0 / 128.0)))
            }
        };
        let (got, want) = (values(actual.forward(x.clone())), values(expected.forward(x)));
        let d_out = got.len() / bounds.len();
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            let bound = bounds[k / d_out] + 1e-5;
            assert!((g - w).abs() <= bound, "{name} output {k}: {format} {g} vs f32 {w}, more than {bound} apart");
            worst_share = worst_share.max((g - w).abs() / bound);
        }
    }
    assert!(worst_share > 0.0, "the {format} network equals the f32 one: the format was not applied");
    check_random_table(&float.embed_tokens, &quantized.embed_tokens);
}

/// The demo's q8 embeddings are the Q8_0 rounding of its f32 ones (each value within half a
/// step, plus up to 127 times the f16 rounding of the step: the demo's embeddings are within
/// ±1/√248,320 ≈ 0.002, so their steps are f16 subnormals), and their logits over the whole
/// vocabulary (248,320 rows, dequantized a part at a time) equal an f32 table of the same rows.
fn check_random_table<B: Qwen35Ops>(float: &TokenTable<B>, q8: &TokenTable<B>) {
    let device = Default::default();
    let [vocab, hidden] = float.dims();
    let all = Tensor::<B, 1, Int>::arange(0..vocab as i64, &device);
    let (rounded, exact) = (q8.rows(all.clone()), values(float.rows(all)));
    let got = values(rounded.clone());
    let mut moved = 0;
    for (block, (g, w)) in got.chunks(Q8_BLOCK).zip(exact.chunks(Q8_BLOCK)).enumerate() {
        let step = w.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
        let bound = step / 2.0 + 127.0 * (step - half::f16::from_f32(step).to_f32()).abs() + 1e-9;
        for (g, w) in g.iter().zip(w) {
            assert!((g - w).abs() <= bound, "block {block}: q8 {g} vs f32 {w}, more than {bound} apart");
            moved += usize::from(g != w);
        }
    }
    assert!(moved > 0, "the q8 embeddings equal the f32 ones: the format was not applied");
    let same_rows = TokenTable {
        weight: Weight {
            held: Held::F32(Param::from_tensor(rounded)),
            dims: [vocab, hidden],
            format: WeightFormat::F32,
            usage: WeightUse::Rows,
        },
    };
    let x = rounded_input::<B>(3, hidden, 17, &device).reshape([1, 3, hidden]);
    relative_check("demo logits", &values(q8.logits(x.clone())), &values(same_rows.logits(x)), TOLERANCE);
}

/// A token table held as a GGUF file's k-quant blocks (Q3_K and Q6_K as Q6_K's parts, Q4_K, Q5_K;
/// the fixture `gguf/blocks.gguf`, random blocks in llama.cpp's layout) reads its rows as
/// llama.cpp dequantizes them (the fixture's `.expected`, from the `gguf` package), bit for bit,
/// and its products over all rows (read a part at a time) equal an f32 table of those values.
fn check_k_quant_tables<B: Qwen35Ops>() {
    let device = Default::default();
    let file = qwen35::gguf::GgufFile::open(fixture_path("gguf/blocks.gguf")).unwrap();
    let mut checked = Vec::new();
    for (name, tensor) in file.tensors() {
        let (_, bytes) = file.tensor(name).unwrap();
        let (blocks, format) = match tensor.ggml_type {
            GgmlType::Q3K => (WeightValues::from_q3_k(name, bytes), WeightFormat::Q6K),
            GgmlType::Q4K => (WeightValues::from_q4_k(name, bytes), WeightFormat::Q4K),
            GgmlType::Q5K => (WeightValues::from_q5_k(name, bytes), WeightFormat::Q5K),
            GgmlType::Q6K => (WeightValues::from_q6_k(name, bytes), WeightFormat::Q6K),
            _ => continue,
        };
        let [rows, width] = [tensor.dims[0], tensor.dims[1]];
        let table = TokenTable {
            weight: Weight::from_values(blocks.unwrap(), [rows, width], format, WeightUse::Rows, &device),
        };
        let expected = file.f32(&format!("{name}.expected")).unwrap();
        let all = Tensor::<B, 1, Int>::arange(0..rows as i64, &device);
        let got = values(table.rows(all));
        let differ = got.iter().zip(&expected).filter(|(g, e)| g.to_bits() != e.to_bits()).count();
        assert_eq!(differ, 0, "{name}: {differ} of {} values differ from llama.cpp's", got.len());
        // Two rows, in reverse: rows are gathered by index.
        let picked = values(table.rows(Tensor::from_data(TensorData::new(vec![rows as i64 - 1, 0], [2]), &device)));
        assert_eq!(picked, [&expected[(rows - 1) * width..], &expected[..width]].concat(), "{name}: rows by index");
        let exact = TokenTable {
            weight: Weight::from_values(
                WeightValues::F32(expected),
                [rows, width],
                WeightFormat::F32,
                WeightUse::Rows,
                &device,
            ),
        };
        let x = rounded_input::<B>(3, width, 19, &device).reshape([1, 3, width]);
        relative_check(name, &values(table.logits(x.clone())), &values(exact.logits(x)), TOLERANCE);
        checked.push(tensor.ggml_type);
    }
    for ggml_type in [GgmlType::Q3K, GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K] {
        assert!(checked.contains(&ggml_type), "no {} table checked", ggml_type.name());
    }
}

/// What a q8 load leaves in f32: each weight whose input is not a whole block, the routed experts'
/// included (the policy decides per weight, so the experts' gate and up projections, whose
/// input is the hidden width, are in blocks while their down projection is not).
fn check_partial_blocks<B: Qwen35Ops>() {
    let (_, q8) = qwen35::load_model_with_weights::<B>(
        fixture_path("moe/save_pretrained"),
        WeightFormat::Q8,
        &Default::default(),
    )
    .unwrap();
    let FeedForward::Sparse(moe) = &q8.layers[0].mlp else { panic!("MoE") };
    assert!(
        matches!(moe.experts.down_proj.held, Held::F32(_)),
        "experts of width 16 stay f32 in their down projection"
    );
    assert!(matches!(moe.experts.gate_up_proj.held, Held::Q8(_)), "the experts' input (32) is a whole block");
    assert!(
        matches!(moe.shared_expert.gate_proj.weight.held, Held::Q8(_)),
        "the shared expert's input (32) is a whole block"
    );
    assert!(matches!(moe.shared_expert.down_proj.weight.held, Held::F32(_)), "its down projection's input (24) is not");
}

/// A copy of a fixture folder with every float tensor rounded to f16 (written as f32).
fn f16_copy(folder: &str) -> tempfile::TempDir {
    let dir = fixture_copy(folder);
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "safetensors") {
            rewrite_tensors(&path, |_, dtype, shape, data| {
                let values: Vec<f32> = match dtype {
                    Dtype::F32 => data.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap())).collect(),
                    Dtype::BF16 => {
                        data.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect()
                    }
                    _ => return Some((dtype, shape, data)),
                };
                Some((
                    Dtype::F32,
                    shape,
                    values.iter().flat_map(|&v| half::f16::from_f32(v).to_f32().to_le_bytes()).collect(),
                ))
            });
        }
    }
    dir
}

/// A load in f16 or bf16 holds every projection, expert and token table in that format and is
/// the f32 load of the same weights. The fixtures' weights are bf16 values, so their bf16 load
/// is their f32 load; for f16 the checkpoint is first rounded to f16. Where the backend's
/// products read the activations as they are, whole-model logits agree, since nothing else is
/// rounded. Where they read them rounded to bf16 (the CPU backends' bf16 products:
/// `HalfMatmul::rounds_activations`), each projection and expert product equals the f32 one on
/// the rounded input.
fn check_half_model<B: Qwen35Ops>(model_name: &str, layout: &str, format: WeightFormat) {
    let device = Default::default();
    let folder = format!("{model_name}/{layout}");
    let dir = match format {
        WeightFormat::F16 => f16_copy(&folder),
        _ => fixture_copy(&folder),
    };
    let (_, float) = qwen35::load_model_with_weights::<B>(dir.path(), WeightFormat::F32, &device).unwrap();
    let (_, half) = qwen35::load_model_with_weights::<B>(dir.path(), format, &device).unwrap();
    let in_format =
        |weight_format: WeightFormat, held: &Held<B, 2>| weight_format == format && matches!(held, Held::Half(_));
    for (name, projection) in projections(&half) {
        assert!(in_format(projection.weight.format, &projection.weight.held), "{folder} {name}: not in {format}");
    }
    for layer in &half.layers {
        if let FeedForward::Sparse(moe) = &layer.mlp {
            for experts in [&moe.experts.gate_up_proj, &moe.experts.down_proj] {
                assert!(
                    experts.format == format && matches!(experts.held, Held::Half(_)),
                    "{folder}: experts not in {format}"
                );
            }
        }
    }
    let tables: Vec<&TokenTable<B>> = [Some(&half.embed_tokens), half.lm_head.as_ref()].into_iter().flatten().collect();
    for table in &tables {
        assert!(in_format(table.weight.format, &table.weight.held), "{folder}: a token table not in {format}");
    }
    // Each 16-bit weight is one parameter: a float tensor in the 16-bit dtype where the device
    // holds one, else an int tensor of patterns (and no other parameter is an int).
    let moe_layers = half.layers.iter().filter(|layer| matches!(layer.mlp, FeedForward::Sparse(_))).count();
    let weights = projections(&half).len() + 2 * moe_layers + tables.len();
    let kind = if format == WeightFormat::F16 { Half::F16 } else { Half::Bf16 };
    let mut held = HeldAs { dtype: kind.dtype(), floats: 0, ints: 0 };
    half.visit(&mut held);
    let expected = if holds_half_floats::<B>(kind, &device) { (weights, 0) } else { (0, weights) };
    assert_eq!(
        (held.floats, held.ints),
        expected,
        "{folder} {format}: (float parameters in {:?}, int parameters)",
        kind.dtype()
    );
    let rounds = B::rounds_activations(kind);
    let as_read = |x: &[f32], d_in: usize| {
        let x = if rounds { round_to_bf16(x) } else { x.to_vec() };
        Tensor::<B, 2>::from_data(TensorData::new(x, [9, d_in]), &device)
    };
    for (seed, ((name, expected), (_, actual))) in projections(&float).into_iter().zip(projections(&half)).enumerate() {
        let [d_in, _] = expected.dims();
        let x = random_input(9, d_in, seed as u64);
        let input = Tensor::<B, 2>::from_data(TensorData::new(x.clone(), [9, d_in]), &device);
        relative_check(
            &format!("{folder} {format} {name}"),
            &values(actual.forward(input)),
            &values(expected.forward(as_read(&x, d_in))),
            TOLERANCE,
        );
    }
    for (float_layer, half_layer) in float.layers.iter().zip(&half.layers) {
        let (FeedForward::Sparse(expected), FeedForward::Sparse(actual)) = (&float_layer.mlp, &half_layer.mlp) else {
            continue;
        };
        let pairs = [
            ("gate_up_proj", &expected.experts.gate_up_proj, &actual.experts.gate_up_proj),
            ("down_proj", &expected.experts.down_proj, &actual.experts.down_proj),
        ];
        for (name, expected, actual) in pairs {
            let [experts, _, d_in] = actual.dims;
            // 9 rows spread over the experts, some with none.
            let counts: Vec<i64> = (0..experts)
                .map(|e| [2, 0, 1][e % 3])
                .scan(9, |left, c| {
                    let c = c.min(*left);
                    *left -= c;
                    Some(c)
                })
                .collect();
            assert_eq!(counts.iter().sum::<i64>(), 9, "{folder}: too few experts for 9 rows");
            let counts = Tensor::<B, 1, Int>::from_data(TensorData::new(counts, [experts]), &device);
            let x = random_input(9, d_in, 101);
            let input = Tensor::<B, 2>::from_data(TensorData::new(x.clone(), [9, d_in]), &device);
            relative_check(
                &format!("{folder} {format} experts' {name}"),
                &values(actual.grouped_matmul(input, counts.clone())),
                &values(expected.grouped_matmul(as_read(&x, d_in), counts)),
                TOLERANCE,
            );
        }
    }
    if !rounds {
        let [vocab, _] = float.embed_tokens.dims();
        let ids: Vec<i64> = (0..2 * 37).map(|i| (i * 89 + 5) as i64 % vocab as i64).collect();
        let ids = Tensor::<B, 2, Int>::from_data(TensorData::new(ids, [2, 37]), &device);
        relative_check(
            &format!("{folder} {format} logits"),
            &values(half.forward(ids.clone())),
            &values(float.forward(ids)),
            TOLERANCE,
        );
    }
}

/// `auto` loads a checkpoint whose matrices are all bf16 (or all f16) in that format where the
/// backend holds it in 2 bytes a weight, else in f32; one f32 matrix makes it f32 (a 16-bit load
/// would round it).
fn check_auto<B: Qwen35Ops>(layouts: &[&str]) {
    let device = Default::default();
    for layout in layouts {
        let folder = format!("dense/{layout}");
        // The fixture's matrices are bf16; `retyped` stores them in f16 (its values are within
        // f16's range), or one of them in f32.
        let retyped = |retype: &dyn Fn(&str, Vec<u8>) -> Option<(Dtype, Vec<u8>)>| {
            let dir = fixture_copy(&folder);
            for shard in std::fs::read_dir(dir.path()).unwrap().map(|entry| entry.unwrap().path()) {
                if shard.extension().is_some_and(|ext| ext == "safetensors") {
                    rewrite_tensors(&shard, |name, dtype, shape, data| match dtype {
                        Dtype::BF16 => retype(name, data.clone())
                            .map_or(Some((dtype, shape.clone(), data)), |(dtype, data)| Some((dtype, shape, data))),
                        _ => Some((dtype, shape, data)),
                    });
                }
            }
            dir
        };
        let bf16_values = |data: &[u8]| {
            data.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect::<Vec<f32>>()
        };
        let f16 = retyped(&|_, data| {
            Some((Dtype::F16, bf16_values(&data).iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect()))
        });
        for (dir, half) in [(fixture_copy(&folder), Half::Bf16), (f16, Half::F16)] {
            let expected = match WeightFormat::half_bytes::<B>(half, &device) {
                2 => WeightFormat::of_half(half),
                _ => WeightFormat::F32,
            };
            assert_eq!(Checkpoint::open_dir(dir.path()).unwrap().matrices_half(), Some(half), "{folder} in {half:?}");
            assert_eq!(
                WeightChoice::Auto.for_folder::<B>(dir.path(), &device).unwrap(),
                expected,
                "{folder} in {half:?}"
            );
        }
        let one_f32 = retyped(&|name, data| {
            let f32_bytes = bf16_values(&data).iter().flat_map(|v| v.to_le_bytes()).collect();
            name.ends_with("layers.0.mlp.up_proj.weight").then_some((Dtype::F32, f32_bytes))
        });
        assert_eq!(Checkpoint::open_dir(one_f32.path()).unwrap().matrices_half(), None, "{folder} with an f32 matrix");
        assert_eq!(
            WeightChoice::Auto.for_folder::<B>(one_f32.path(), &device).unwrap(),
            WeightFormat::F32,
            "{folder} with an f32 matrix"
        );
    }
}

/// Counts a model's float parameters in `dtype` and its int parameters.
struct HeldAs {
    dtype: DType,
    floats: usize,
    ints: usize,
}

impl<B: Qwen35Ops> ModuleVisitor<B> for HeldAs {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        self.floats += usize::from(param.val().dtype() == self.dtype);
    }

    fn visit_int<const D: usize>(&mut self, _param: &Param<Tensor<B, D, Int>>) {
        self.ints += 1;
    }
}

macro_rules! weight_formats {
    ($name:ident, $backend:ty, $about:literal) => {
        mod $name {
            use super::*;
            type B = $backend;

            #[test]
            fn q8_projections_equal_f32_on_rounded_weights() {
                for model in MODELS {
                    for layout in layouts_on(stringify!($name)) {
                        check_model::<B>(model, layout, WeightFormat::Q8);
                    }
                }
            }

            #[test]
            fn q4_projections_equal_f32_on_rounded_weights() {
                for model in MODELS {
                    for layout in layouts_on(stringify!($name)) {
                        check_model::<B>(model, layout, WeightFormat::Q4);
                    }
                }
            }

            #[test]
            fn auto_holds_a_16_bit_checkpoint_in_its_own_type_where_it_takes_2_bytes() {
                check_auto::<B>(layouts_on(stringify!($name)));
            }

            #[test]
            fn half_formats_equal_f32_on_the_same_weights() {
                for model in MODELS {
                    for layout in layouts_on(stringify!($name)) {
                        check_half_model::<B>(model, layout, WeightFormat::Bf16);
                        check_half_model::<B>(model, layout, WeightFormat::F16);
                    }
                }
            }

            #[test]
            fn block_experts_equal_f32_experts_on_rounded_weights() {
                check_experts::<B>();
            }

            #[test]
            fn a_random_network_in_q8_is_the_rounding_of_the_f32_one() {
                check_random_model::<B>(WeightFormat::Q8);
            }

            #[test]
            fn a_random_network_in_q4_is_the_rounding_of_the_f32_one() {
                check_random_model::<B>(WeightFormat::Q4);
            }

            #[test]
            fn k_quant_tables_read_rows_as_llama_cpp_dequantizes_them() {
                check_k_quant_tables::<B>();
            }

            #[test]
            fn projections_of_partial_blocks_stay_f32() {
                check_partial_blocks::<B>();
            }
        }
    };
}

decider_ops::for_each_backend!(weight_formats);
