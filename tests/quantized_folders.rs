//! `decider quantize`'s folders (`qwen35::quantize`): a quantized folder loads, by memory map and
//! with no quantizing, into the model that quantizing its source at load makes; in f32 it loads
//! the weights its blocks stand for; and a broken one gives an error that names the tensor (or
//! the file) and the problem.

use std::collections::HashMap;
use std::path::Path;

use burn::backend::NdArray;
use burn::tensor::{Int, Tensor};
use half::f16;
use integration_tests::{LAYOUTS, MODELS, Reference, dense_with_vocab, fixture_path, rewrite_tensors};
use qwen35::checkpoint::{Checkpoint, FORMAT_KEY};
use qwen35::{WeightChoice, WeightFormat};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};

type B = NdArray;

const EMBED: &str = "model.embed_tokens.weight";

/// `folder` (under `tests/fixtures`) quantized to `format` in a temporary folder.
fn quantized(folder: &str, format: WeightFormat) -> tempfile::TempDir {
    let out = tempfile::tempdir().unwrap();
    qwen35::quantize::quantize_folder::<B>(&fixture_path(folder), out.path(), format, &Default::default()).unwrap();
    out
}

fn load(dir: &Path, weights: WeightFormat) -> qwen35::Qwen35Model<B> {
    qwen35::load_model_with_weights::<B>(dir, weights, &Default::default())
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .1
}

fn load_error(dir: &Path) -> String {
    load_error_in(dir, WeightFormat::Q8)
}

fn load_error_in(dir: &Path, weights: WeightFormat) -> String {
    match qwen35::load_model_with_weights::<B>(dir, weights, &Default::default()) {
        Ok(_) => panic!("loading {} should fail", dir.display()),
        Err(error) => error.to_string(),
    }
}

#[test]
fn a_quantized_folder_loads_as_quantizing_at_load() {
    let device = Default::default();
    for (format, projection_part) in [(WeightFormat::Q8, "q8_values"), (WeightFormat::Q4, "q4_values")] {
        for model in MODELS {
            let ids = Reference::open(model).input_ids::<B>("len64", &device);
            for layout in LAYOUTS {
                let (source, folder) =
                    (fixture_path(&format!("{model}/{layout}")), quantized(&format!("{model}/{layout}"), format));
                let label = format!("{model}/{layout} in {format}");
                assert!(folder.path().join("config.json").is_file(), "{label}: the config is copied");
                let checkpoint = Checkpoint::open_dir(folder.path()).unwrap();
                // The token tables are Q8_0 in both formats; q4 packs two values a byte.
                let embed = checkpoint
                    .names()
                    .find(|name| name.ends_with("embed_tokens.weight.q8_values"))
                    .expect("the embeddings in blocks");
                assert_eq!(checkpoint.shape(embed), Some(&[256, 32][..]), "{label}");
                let q_proj = checkpoint
                    .names()
                    .find(|name| name.ends_with(&format!("q_proj.weight.{projection_part}")))
                    .expect("q_proj in blocks");
                let [out, d_in] = [checkpoint.shape(q_proj).unwrap()[0], 32];
                let packed_in = if format == WeightFormat::Q4 { d_in / 2 } else { d_in };
                assert_eq!(checkpoint.shape(q_proj), Some(&[out, packed_in][..]), "{label}");
                assert!(
                    !checkpoint.names().any(|name| name.ends_with("embed_tokens.weight")),
                    "{label}: no float copy of a quantized weight"
                );
                // `auto` loads the folder in its format, and the source (its matrices all bf16)
                // in bf16: ndarray holds a bf16 weight in 2 bytes.
                assert_eq!(WeightChoice::Auto.for_folder::<B>(folder.path(), &device).unwrap(), format, "{label}");
                assert_eq!(
                    WeightChoice::Auto.for_folder::<B>(&source, &device).unwrap(),
                    WeightFormat::Bf16,
                    "{label}"
                );
                // The same blocks: the logits of both loads are equal bit for bit.
                let logits = |dir: &Path| load(dir, format).forward(ids.clone()).into_data().to_vec::<f32>().unwrap();
                assert_eq!(logits(folder.path()), logits(&source), "{label}");
                // In f32 the folder's weights are its blocks dequantized.
                let all = Tensor::<B, 1, Int>::arange(0..256, &device);
                let rows = |weights| {
                    load(folder.path(), weights).embed_tokens.rows(all.clone()).into_data().to_vec::<f32>().unwrap()
                };
                assert_eq!(rows(WeightFormat::F32), rows(format), "{label}");
            }
        }
    }
}

/// `q4_k`: weights of whole super-blocks of 256 stored as llama.cpp's Q4_K blocks of them (the
/// quantizer is held to llama.cpp's bytes in `tests/gguf.rs`), narrower ones in Q4_0, the token
/// tables in Q8_0; the folder loads as quantizing at load does, and in f32 as its blocks
/// dequantized.
#[test]
fn a_q4_k_folder_holds_llama_cpps_blocks_and_loads_as_quantizing_at_load() {
    let device = Default::default();
    for model in MODELS {
        let name = format!("{model}/save_pretrained");
        let (source, folder) = (fixture_path(&name), quantized(&name, WeightFormat::Q4K));
        let (original, checkpoint) =
            (Checkpoint::open_dir(&source).unwrap(), Checkpoint::open_dir(folder.path()).unwrap());
        let shard = std::fs::read(folder.path().join("model-00001.safetensors")).unwrap();
        let stored = SafeTensors::deserialize(&shard).unwrap();
        let mut weights = 0;
        for (blocks, view) in stored.tensors().into_iter().filter(|(name, _)| name.ends_with(".q4k_blocks")) {
            let weight = blocks.strip_suffix(".q4k_blocks").unwrap();
            let shape = original.shape(weight).unwrap().to_vec();
            assert!(shape[shape.len() - 1] % 256 == 0, "{model}: {weight} {shape:?}");
            assert_eq!(view.dtype(), Dtype::U8, "{model}: {blocks}");
            let expected = decider_ops::quantize_q4_k(&original.read_f32(weight, &shape).unwrap());
            assert!(view.data() == expected.as_slice(), "{model}: {blocks} are not the Q4_K blocks of {weight}");
            let mut dequantized = vec![0f32; expected.len() / 144 * 256];
            decider_ops::GgmlType::Q4K.dequantize(view.data(), &mut dequantized);
            let read = checkpoint.read_f32(weight, &shape).unwrap();
            assert!(read.iter().zip(&dequantized).all(|(a, b)| a.to_bits() == b.to_bits()), "{model}: {weight} in f32");
            weights += 1;
        }
        // The fixtures' rows are whole super-blocks only in the DeltaNets' `out_proj` and the
        // attention's `o_proj` (as in their Q4_K_M GGUF files).
        assert_eq!(weights, 4, "{model}: Q4_K weights");
        assert!(
            checkpoint.names().any(|name| name.ends_with("q_proj.weight.q4_values")),
            "{model}: 32-wide rows in Q4_0"
        );
        assert!(checkpoint.names().any(|name| name == format!("{EMBED}.q8_values")), "{model}: the table in Q8_0");
        assert_eq!(WeightChoice::Auto.for_folder::<B>(folder.path(), &device).unwrap(), WeightFormat::Q4K);
        let ids = Reference::open(model).input_ids::<B>("len64", &device);
        let logits =
            |dir: &Path| load(dir, WeightFormat::Q4K).forward(ids.clone()).into_data().to_vec::<f32>().unwrap();
        assert_eq!(logits(folder.path()), logits(&source), "{model}");
    }
}

/// A Q4_K folder's blocks: a super-block scale or min that is not finite, a dtype or block count
/// that is not Q4_K's, each named with the tensor.
#[test]
fn bad_q4_k_blocks_are_named() {
    let out_proj = "model.layers.1.linear_attn.out_proj.weight";
    let blocks = format!("{out_proj}.q4k_blocks");
    let broken = |edit: &dyn Fn(Dtype, Vec<usize>, Vec<u8>) -> (Dtype, Vec<usize>, Vec<u8>)| {
        let folder = quantized("dense/save_pretrained", WeightFormat::Q4K);
        rewrite_tensors(&folder.path().join("model-00001.safetensors"), |name, dtype, shape, data| {
            Some(if name == blocks { edit(dtype, shape, data) } else { (dtype, shape, data) })
        });
        folder
    };
    // Block 5's dmin (bytes 2..4 of its 144) is infinite.
    let infinite = broken(&|dtype, shape, mut data| {
        data[5 * 144 + 2..5 * 144 + 4].copy_from_slice(&f16::INFINITY.to_le_bytes());
        (dtype, shape, data)
    });
    let message = load_error_in(infinite.path(), WeightFormat::Q4K);
    assert!(message.contains(&format!("`{blocks}`: a scale of q4_K block 5 is inf")), "{message}");
    let as_i8 = broken(&|_, shape, data| (Dtype::I8, shape, data));
    let message = load_error_in(as_i8.path(), WeightFormat::Q4K);
    assert!(message.contains(&format!("`{blocks}`: holds I8 values, not U8")), "{message}");
    let short = broken(&|dtype, mut shape, mut data| {
        shape[1] -= 16;
        data.truncate(shape[0] * shape[1]);
        (dtype, shape, data)
    });
    let message = load_error_in(short.path(), WeightFormat::Q4K);
    assert!(message.contains(&format!("`{blocks}` has shape [32, 128], expected [32, 144]")), "{message}");
}

#[test]
fn blocks_of_another_format_are_refused_with_the_fix() {
    let q8 = quantized("dense/save_pretrained", WeightFormat::Q8);
    let message = load_error_in(q8.path(), WeightFormat::Q4);
    assert!(
        message.contains("stored in q8 blocks, asked for q4: load the folder with `--weights q8` (or `auto`)"),
        "{message}"
    );
    let q4 = quantized("dense/save_pretrained", WeightFormat::Q4);
    let message = load_error_in(q4.path(), WeightFormat::Q8);
    assert!(message.contains("stored in q4 blocks, asked for q8"), "{message}");
    // Widening blocks to 16 bits would not give back the weights they were made from.
    let message = load_error_in(q8.path(), WeightFormat::Bf16);
    assert!(message.contains("stored in q8 blocks, asked for bf16: load the folder with `--weights q8` (or `auto`), or load the original in bf16"), "{message}");
    // Q4_0 bytes of another dtype, and a scale that is not finite (Q4_0's may be negative).
    let rewritten = |edit: &dyn Fn(&str, Dtype, Vec<usize>, Vec<u8>) -> (Dtype, Vec<usize>, Vec<u8>)| {
        let folder = quantized("dense/save_pretrained", WeightFormat::Q4);
        rewrite_tensors(&folder.path().join("model-00001.safetensors"), |name, dtype, shape, data| {
            Some(edit(name, dtype, shape, data))
        });
        folder
    };
    let q_proj = "model.layers.3.self_attn.q_proj.weight";
    let i8_bytes = rewritten(&|name, dtype, shape, data| match name == format!("{q_proj}.q4_values") {
        true => (Dtype::I8, shape, data),
        false => (dtype, shape, data),
    });
    let message = load_error_in(i8_bytes.path(), WeightFormat::Q4);
    assert!(message.contains(&format!("`{q_proj}.q4_values`: holds I8 values, not U8")), "{message}");
    let infinite = rewritten(&|name, dtype, shape, mut data| {
        if name == format!("{q_proj}.q4_scales") {
            data[2..4].copy_from_slice(&f16::NEG_INFINITY.to_le_bytes());
        }
        (dtype, shape, data)
    });
    let message = load_error_in(infinite.path(), WeightFormat::Q4);
    assert!(
        message.contains(&format!("`{q_proj}.q4_scales`: scale -inf at flat index 1 (scales are finite)")),
        "{message}"
    );
}

/// A quantized copy of the dense fixture whose one shard is rewritten by `edit`
/// ([`rewrite_tensors`]).
fn broken(
    edit: impl Fn(&str, Dtype, Vec<usize>, Vec<u8>) -> Option<(Dtype, Vec<usize>, Vec<u8>)>,
) -> tempfile::TempDir {
    let folder = quantized("dense/save_pretrained", WeightFormat::Q8);
    rewrite_tensors(&folder.path().join("model-00001.safetensors"), edit);
    folder
}

#[test]
fn a_wrong_block_count_names_the_scales() {
    let folder = broken(|name, dtype, mut shape, mut data| {
        if name == format!("{EMBED}.q8_scales") {
            shape[1] += 1;
            data.extend(vec![0; shape[0] * size_of::<f16>()]);
        }
        Some((dtype, shape, data))
    });
    let message = load_error(folder.path());
    assert!(message.contains(&format!("`{EMBED}.q8_scales` has shape [256, 2], expected [256, 1]")), "{message}");
}

#[test]
fn truncated_blocks_name_the_values() {
    let folder = broken(|name, dtype, mut shape, mut data| {
        if name == format!("{EMBED}.q8_values") {
            shape[1] = 16;
            data.truncate(256 * 16);
        }
        Some((dtype, shape, data))
    });
    let message = load_error(folder.path());
    assert!(message.contains(&format!("`{EMBED}.q8_values` has shape [256, 16], expected [256, 32]")), "{message}");
}

#[test]
fn values_and_scales_out_of_their_range_are_named() {
    let minus_128 = broken(|name, dtype, shape, mut data| {
        if name == format!("{EMBED}.q8_values") {
            data[40] = 0x80;
        }
        Some((dtype, shape, data))
    });
    let message = load_error(minus_128.path());
    assert!(message.contains(&format!("`{EMBED}.q8_values`: value -128 at flat index 40")), "{message}");
    for (scale, at, shown) in [(f16::NAN, 2, "NaN"), (f16::INFINITY, 3, "inf"), (f16::from_f32(-0.5), 5, "-0.5")] {
        let bad_scale = broken(|name, dtype, shape, mut data| {
            if name == format!("{EMBED}.q8_scales") {
                data[2 * at..2 * at + 2].copy_from_slice(&scale.to_le_bytes());
            }
            Some((dtype, shape, data))
        });
        let message = load_error(bad_scale.path());
        assert!(message.contains(&format!("`{EMBED}.q8_scales`: scale {shown} at flat index {at}")), "{message}");
    }
    // Scales as f32 (not Q8_0's f16) are refused, not converted.
    let f32_scales = broken(|name, dtype, shape, data| {
        Some(match name == format!("{EMBED}.q8_scales") {
            true => (
                Dtype::F32,
                shape,
                data.chunks(2).flat_map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32().to_le_bytes()).collect(),
            ),
            false => (dtype, shape, data),
        })
    });
    let message = load_error(f32_scales.path());
    assert!(message.contains(&format!("`{EMBED}.q8_scales`: holds F32 values, not F16")), "{message}");
    let f16_values = broken(|name, dtype, shape, data| {
        Some(match name == format!("{EMBED}.q8_values") {
            true => (Dtype::F16, shape, data.iter().flat_map(|&b| [b, 0]).collect()),
            false => (dtype, shape, data),
        })
    });
    let message = load_error(f16_values.path());
    assert!(message.contains(&format!("`{EMBED}.q8_values`: holds F16 values, not I8")), "{message}");
}

/// The one shard of a quantized folder, as bytes to deserialize.
fn shard_bytes(folder: &Path) -> Vec<u8> {
    std::fs::read(folder.join("model-00001.safetensors")).unwrap()
}

/// Replaces the shard and index of a quantized folder by one `model.safetensors` of `tensors`
/// (an index would list the old names).
fn as_one_file(folder: &Path, tensors: Vec<(String, TensorView<'_>)>) {
    safetensors::serialize_to_file(tensors, None, &folder.join("model.safetensors")).unwrap();
    std::fs::remove_file(folder.join("model-00001.safetensors")).unwrap();
    std::fs::remove_file(folder.join("model.safetensors.index.json")).unwrap();
}

#[test]
fn unknown_formats_are_named() {
    // Blocks of a kind this build does not read, in place of the weight.
    let folder = quantized("dense/save_pretrained", WeightFormat::Q8);
    let bytes = shard_bytes(folder.path());
    let tensors = SafeTensors::deserialize(&bytes).unwrap();
    let renamed: Vec<(String, TensorView<'_>)> = tensors
        .tensors()
        .into_iter()
        .filter(|(name, _)| *name != format!("{EMBED}.q8_scales"))
        .map(|(name, view)| (name.replace(&format!("{EMBED}.q8_values"), &format!("{EMBED}.q5_values")), view))
        .collect();
    as_one_file(folder.path(), renamed);
    let message = load_error(folder.path());
    assert!(
        message.contains(&format!("`{EMBED}.q5_values`: `{EMBED}` is stored in a form this build does not read")),
        "{message}"
    );
    // A shard that names a format this build does not know.
    let folder = quantized("dense/save_pretrained", WeightFormat::Q8);
    let shard = folder.path().join("model-00001.safetensors");
    let bytes = shard_bytes(folder.path());
    let tensors = SafeTensors::deserialize(&bytes).unwrap();
    let metadata = HashMap::from([(FORMAT_KEY.to_owned(), "q5".to_owned())]);
    safetensors::serialize_to_file(tensors.tensors(), Some(metadata), &shard).unwrap();
    let message = load_error(folder.path());
    assert!(
        message.contains(&shard.display().to_string()) && message.contains("unknown weight format `q5`"),
        "{message}"
    );
}

#[test]
fn bad_values_past_the_first_chunk_are_named_at_their_index() {
    // 4,096 rows of 32: more values than a read's chunk of 65,536. Quantized as it is read, the
    // NaN's index counts the blocks and chunks before it.
    let nan = dense_with_vocab(4096, Some(70_001));
    let message = load_error(nan.path());
    assert!(
        message.contains(&format!("tensor `{EMBED}` has 1 NaN or infinite values (the first at flat index 70001)")),
        "{message}"
    );
    // Read from a quantized folder.
    let source = dense_with_vocab(4096, None);
    let folder = tempfile::tempdir().unwrap();
    qwen35::quantize::quantize_folder::<B>(source.path(), folder.path(), WeightFormat::Q8, &Default::default())
        .unwrap();
    rewrite_tensors(&folder.path().join("model-00001.safetensors"), |name, dtype, shape, mut data| {
        if name == format!("{EMBED}.q8_values") {
            data[70_003] = 0x80;
        }
        Some((dtype, shape, data))
    });
    let message = load_error(folder.path());
    assert!(message.contains(&format!("`{EMBED}.q8_values`: value -128 at flat index 70003")), "{message}");
    // Writing into the model folder itself is refused.
    let error =
        qwen35::quantize::quantize_folder::<B>(source.path(), source.path(), WeightFormat::Q8, &Default::default())
            .unwrap_err();
    assert!(error.to_string().contains("the output folder is the model folder"), "{error}");
}

#[test]
fn a_weight_stored_twice_or_without_its_values_is_named() {
    // As it is and as blocks: the two could differ.
    let folder = quantized("dense/save_pretrained", WeightFormat::Q8);
    let bytes = shard_bytes(folder.path());
    let tensors = SafeTensors::deserialize(&bytes).unwrap();
    let float = vec![0u8; 256 * 32 * 4];
    let mut views: Vec<(String, TensorView<'_>)> = tensors.tensors();
    views.push((EMBED.to_owned(), TensorView::new(Dtype::F32, vec![256, 32], &float).unwrap()));
    as_one_file(folder.path(), views);
    let message = load_error(folder.path());
    assert!(message.contains(&format!("`{EMBED}`: stored both as it is and as `{EMBED}.q8_values`")), "{message}");
    // Scales without their values.
    let folder = quantized("dense/save_pretrained", WeightFormat::Q8);
    let bytes = shard_bytes(folder.path());
    let tensors = SafeTensors::deserialize(&bytes).unwrap();
    as_one_file(
        folder.path(),
        tensors.tensors().into_iter().filter(|(name, _)| *name != format!("{EMBED}.q8_values")).collect(),
    );
    let message = load_error(folder.path());
    assert!(message.contains(&format!("missing tensor `{EMBED}.q8_values`")), "{message}");
    // A q4 folder: q_proj also in Q8_0 blocks (two formats), and its Q4_0 scales without values.
    let q_proj = "model.layers.3.self_attn.q_proj.weight";
    let (q8_folder, q4_folder) =
        (quantized("dense/save_pretrained", WeightFormat::Q8), quantized("dense/save_pretrained", WeightFormat::Q4));
    let (q8_bytes, q4_bytes) = (shard_bytes(q8_folder.path()), shard_bytes(q4_folder.path()));
    let (q8_tensors, q4_tensors) =
        (SafeTensors::deserialize(&q8_bytes).unwrap(), SafeTensors::deserialize(&q4_bytes).unwrap());
    let mut views = q4_tensors.tensors();
    views.extend(q8_tensors.tensors().into_iter().filter(|(name, _)| name.starts_with(&format!("{q_proj}.q8_"))));
    as_one_file(q4_folder.path(), views);
    let message = load_error_in(q4_folder.path(), WeightFormat::Q4);
    assert!(
        message.contains(&format!("`{q_proj}`: stored both as `{q_proj}.q8_values` and as `{q_proj}.q4_values`")),
        "{message}"
    );
    let folder = quantized("dense/save_pretrained", WeightFormat::Q4);
    let bytes = shard_bytes(folder.path());
    let tensors = SafeTensors::deserialize(&bytes).unwrap();
    as_one_file(
        folder.path(),
        tensors.tensors().into_iter().filter(|(name, _)| *name != format!("{q_proj}.q4_values")).collect(),
    );
    let message = load_error_in(folder.path(), WeightFormat::Q4);
    assert!(message.contains(&format!("missing tensor `{q_proj}.q4_values`")), "{message}");
}
