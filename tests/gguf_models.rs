//! Models from GGUF files made by llama.cpp's own tools (`tests/fixtures/gguf/models.py`: its
//! converter and `llama-quantize`, from the fixture checkpoints widened to f32; the Q4_K_M files
//! hold Q4_K, Q5_0, Q8_0, F16 and F32 tensors, the MoE's `ssm_out` a Q4_K weight whose 128-wide
//! value heads are half a block):
//! - every tensor the model reads, found under the converter's name with its transforms undone
//!   (norms, `A_log`, the value heads' order, the split experts), equals the checkpoint's;
//! - the BF16 file, which holds the fixture's weights exactly, gives transformers' logits;
//! - every weight held as stored (`auto`) is, dequantized, the weight the f32 load holds: the
//!   values of llama.cpp's own dequantization, which `gguf.rs` holds to the `gguf` package's;
//! - llama.cpp's Q8_0 blocks are the ones `decider quantize --to q8` makes, so a Q8_0 file and
//!   a q8 load of its checkpoint give the same logits;
//! - files converted with the multi-token-prediction layers, or with the experts' gate and up
//!   projections fused, give the same model;
//! - a file that is not what the configuration says is refused with a message naming the key or
//!   tensor.

use burn::backend::NdArray;
use decider_ops::GgmlType;
use integration_tests::gguf_values::{f32_of, tensors_read, values_in_checkpoint, write_values};
use integration_tests::gguf_writer::{Part, parts, write_gguf};
use integration_tests::{MODELS, Reference, assert_close, fixture_copy, fixture_path, relative_check, rewrite_tensors};
use qwen35::checkpoint::Checkpoint;
use qwen35::gguf::{GgufFile, GgufSource, Value, config_of, load_gguf};
use qwen35::loader::TensorSource;
use qwen35::weight::WeightValues;
use qwen35::weight_format::{held_as_stored, held_format};
use qwen35::weights::CheckpointSource;
use qwen35::{Qwen35Config, WeightChoice, WeightFormat};
use safetensors::Dtype;

type B = NdArray;

/// The types each fixture model is written in.
fn files(model: &str) -> &'static [&'static str] {
    match model {
        "dense" => &["bf16", "f16", "q8_0", "q4_0", "q4_k_m", "q5_k_m"],
        _ => &["bf16", "f16", "q8_0", "q4_0", "q4_k_m", "q5_k_m"],
    }
}

fn gguf_path(model: &str, ggml_type: &str) -> std::path::PathBuf {
    fixture_path(&format!("gguf/{model}-{ggml_type}.gguf"))
}

#[test]
fn the_settings_are_the_checkpoints() {
    for model in MODELS {
        let expected = Qwen35Config::from_file(fixture_path(&format!("{model}/save_pretrained/config.json"))).unwrap();
        for ggml_type in files(model) {
            let file = GgufFile::open(gguf_path(model, ggml_type)).unwrap();
            assert_eq!(config_of(&file).unwrap(), expected, "{model}-{ggml_type}");
        }
    }
}

#[test]
fn every_tensor_is_the_checkpoints_under_the_converters_name() {
    for model in MODELS {
        let dir = fixture_path(&format!("{model}/save_pretrained"));
        let config = Qwen35Config::from_file(dir.join("config.json")).unwrap();
        let checkpoint = Checkpoint::open_dir(&dir).unwrap();
        let checkpoint = CheckpointSource::new(&checkpoint).unwrap();
        // The BF16 file holds the checkpoint's bf16 matrices as they are and its vectors in f32.
        let file = GgufFile::open(gguf_path(model, "bf16")).unwrap();
        let device = Default::default();
        let gguf = GgufSource::new::<B>(&file, &config, WeightChoice::Exactly(WeightFormat::F32), &device);
        let read = tensors_read(&config);
        assert!(read.len() > 30, "{model}: {} tensors", read.len());
        for (name, shape, usage) in read {
            let (ours, theirs) = match usage {
                None => (gguf.f32(&name, &shape).unwrap(), checkpoint.f32(&name, &shape).unwrap()),
                Some(usage) => (
                    f32_of(gguf.weight(&name, &shape, WeightFormat::F32, usage).unwrap()),
                    f32_of(checkpoint.weight(&name, &shape, WeightFormat::F32, usage).unwrap()),
                ),
            };
            // Matrices and the DeltaNet's norm exactly; what the converter computed on (norms
            // `+ 1`, `A_log` through `-exp`) within an f32 rounding of the value it made.
            let tolerance = if name.ends_with("A_log") || name.ends_with("norm.weight") { 1e-6 } else { 0.0 };
            relative_check(&format!("{model}: {name}"), &ours, &theirs, tolerance);
            if tolerance == 0.0 {
                assert!(ours.iter().zip(&theirs).all(|(a, b)| a.to_bits() == b.to_bits()), "{model}: {name}");
            }
        }
    }
}

#[test]
fn the_bf16_file_gives_the_reference_logits() {
    for model in MODELS {
        let device = Default::default();
        let (_, network) = load_gguf::<B>(gguf_path(model, "bf16"), WeightFormat::F32, &device).unwrap();
        let reference = Reference::open(model);
        for run in ["len7", "len130", "batch2"] {
            let logits = network.forward(reference.input_ids(run, &device));
            let error = assert_close(&reference, &format!("{run}.logits"), logits, 1e-4);
            println!("{model} {run}: logits within {error:.1e} of transformers'");
        }
    }
}

#[test]
fn every_weight_held_as_stored_is_llama_cpps_dequantization() {
    for model in MODELS {
        let config = Qwen35Config::from_file(fixture_path(&format!("{model}/save_pretrained/config.json"))).unwrap();
        let read = tensors_read(&config);
        for ggml_type in files(model) {
            let file = GgufFile::open(gguf_path(model, ggml_type)).unwrap();
            let device = Default::default();
            let auto = GgufSource::new::<B>(&file, &config, WeightChoice::Auto, &device);
            let f32 = GgufSource::new::<B>(&file, &config, WeightChoice::Exactly(WeightFormat::F32), &device);
            let mut held = std::collections::BTreeMap::<String, usize>::new();
            for (name, dims, usage) in &read {
                let Some(usage) = *usage else { continue };
                let stored = auto.stored_format(name).expect("every weight is in the file");
                let format = held_as_stored(stored, name, dims, usage);
                *held.entry(format.to_string()).or_default() += 1;
                let as_stored = f32_of(auto.weight(name, dims, format, usage).unwrap());
                let exact = f32_of(f32.weight(name, dims, WeightFormat::F32, usage).unwrap());
                assert!(
                    as_stored.iter().zip(&exact).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{model}-{ggml_type}: {name} held in {format}"
                );
            }
            // The file's own type holds most weights (the converter keeps rows that are not whole
            // blocks in F16; the gates are f32 in every format). The fixtures' Q4_K_M (Q5_K_M)
            // files are mostly the Q5_0 (Q5_1) llama-quantize gives rows narrower than 256 values,
            // the first held as q8 (the same values), the second in f32; their few Q4_K (Q5_K) weights are held as `q4_k` (`q5_k`), checked
            // above: attention's `o_proj` and the three DeltaNets' `out_proj` (the MoE's with its
            // value heads tiled, as stored: `every_file_gives_the_logits_of_its_values_in_the_checkpoint`).
            if let Some(k_quant) = ggml_type.strip_suffix("_m") {
                assert_eq!(held.get(k_quant), Some(&4), "{model}-{ggml_type}: {held:?}");
            }
            let main = match *ggml_type {
                "bf16" => WeightFormat::Bf16,
                "f16" => WeightFormat::F16,
                "q8_0" => WeightFormat::Q8,
                "q4_0" => WeightFormat::Q4,
                // Mostly the Q5_0 llama-quantize falls back to, held as Q8_0 exactly.
                "q4_k_m" => WeightFormat::Q8,
                _ => WeightFormat::F32,
            };
            assert_eq!(auto.format(), main, "{model}-{ggml_type}: {held:?}");
            let most = held.iter().max_by_key(|(_, count)| **count).unwrap();
            assert_eq!(most.0, &main.to_string(), "{model}-{ggml_type}: {held:?}");
        }
    }
}

/// Every file read in f32 gives the logits of its checkpoint folder holding the file's values
/// (llama.cpp's dequantization) in f32: the same model. In the MoE's k-quant files, whose value
/// heads are half a Q4_K/Q5_K block, the DeltaNets' `out_proj` is read with its columns tiled as
/// stored and the mixer orders its heads to match; the folder gets them put back in grouped order
/// here, by the converter's rule. The folder's values are read through the same GGUF source
/// (names, transforms, rows' reorders: `every_tensor_is_the_checkpoints_under_the_converters_name`
/// holds those to the checkpoint); what this adds is the model on the file against the model on
/// the folder, the tiled `out_proj` included (its direction: the unit tests of `delta_net.rs`
/// and `gguf/heads.rs`, with 3 key heads and 6 value heads). (Held as stored, `auto`, the same weights are multiplied with
/// 8-bit activations: `every_weight_held_as_stored_is_llama_cpps_dequantization` holds the
/// weights, the ops' tests the kernels.)
#[test]
fn every_file_gives_the_logits_of_its_values_in_the_checkpoint() {
    for model in MODELS {
        let config = Qwen35Config::from_file(fixture_path(&format!("{model}/save_pretrained/config.json"))).unwrap();
        let tiles = config.linear_num_value_heads > config.linear_num_key_heads;
        for ggml_type in files(model) {
            let file = GgufFile::open(gguf_path(model, ggml_type)).unwrap();
            let device = Default::default();
            let (values, tiled) = values_in_checkpoint(&file, &config);
            // Only the k-quant files' `out_proj` has heads that are not whole blocks.
            let expected = if tiles && ggml_type.ends_with("_k_m") { 3 } else { 0 };
            assert_eq!(tiled, expected, "{model}-{ggml_type}: the DeltaNets' `out_proj` held tiled");
            let folder = fixture_copy(&format!("{model}/save_pretrained"));
            write_values(&folder.path().join("model.safetensors"), &values);
            let (_, from_file) = load_gguf::<B>(gguf_path(model, ggml_type), WeightFormat::F32, &device).unwrap();
            let (_, from_folder) =
                qwen35::load_model_with_weights::<B>(folder.path(), WeightFormat::F32, &device).unwrap();
            let ids = Reference::open(model).input_ids("len64", &device);
            let ours = from_file.forward(ids.clone()).into_data().to_vec::<f32>().unwrap();
            let theirs = from_folder.forward(ids).into_data().to_vec::<f32>().unwrap();
            let error = relative_check(&format!("{model}-{ggml_type}: logits"), &ours, &theirs, 1e-4);
            println!("{model}-{ggml_type} in f32 against its values in the checkpoint: logits within {error:.1e}");
        }
    }
}

#[test]
fn llama_cpps_q8_0_blocks_are_decider_q8_blocks() {
    for model in MODELS {
        let dir = fixture_path(&format!("{model}/save_pretrained"));
        let config = Qwen35Config::from_file(dir.join("config.json")).unwrap();
        let checkpoint = Checkpoint::open_dir(&dir).unwrap();
        let checkpoint = CheckpointSource::new(&checkpoint).unwrap();
        let file = GgufFile::open(gguf_path(model, "q8_0")).unwrap();
        let device = Default::default();
        let gguf = GgufSource::new::<B>(&file, &config, WeightChoice::Exactly(WeightFormat::Q8), &device);
        let mut compared = 0;
        // The weights a q8 load holds in f32 (the gates, rows that are not whole blocks), as the
        // file has them: llama.cpp quantizes the DeltaNet's `in_proj_a`/`in_proj_b` too.
        let mut unquantized = std::collections::BTreeMap::new();
        for (name, dims, usage) in tensors_read(&config) {
            let Some(usage) = usage else { continue };
            if held_format(WeightFormat::Q8, &name, &dims, usage) != WeightFormat::Q8 {
                let values = f32_of(gguf.weight(&name, &dims, WeightFormat::F32, usage).unwrap());
                unquantized.insert(name, (dims, values));
                continue;
            }
            match (
                gguf.weight(&name, &dims, WeightFormat::Q8, usage),
                checkpoint.weight(&name, &dims, WeightFormat::Q8, usage),
            ) {
                (Ok(WeightValues::Q8(values, scales)), Ok(WeightValues::Q8(ours, our_scales))) => {
                    assert_eq!(scales, our_scales, "{model}: {name}: scales");
                    assert_eq!(values, ours, "{model}: {name}: values");
                    compared += 1;
                }
                // The converter keeps rows it cannot make Q8_0 in F16: quantized here as ours are.
                (Ok(other), Ok(_)) => panic!("{model}: {name} read as {other:?}"),
                (gguf, checkpoint) => panic!("{model}: {name}: {:?} / {:?}", gguf.err(), checkpoint.err()),
            }
        }
        assert!(compared > 20, "{model}: {compared} weights compared");
        // Same blocks, same kernels: the same logits as the checkpoint, with the file's values of
        // the weights it holds in f32, loaded in q8.
        let folder = fixture_copy(&format!("{model}/save_pretrained"));
        rewrite_tensors(&folder.path().join("model.safetensors"), |name, dtype, shape, data| {
            Some(match unquantized.get(name) {
                Some((dims, values)) => {
                    (Dtype::F32, dims.clone(), values.iter().flat_map(|v| v.to_le_bytes()).collect())
                }
                None => (dtype, shape, data),
            })
        });
        let (_, from_file) = load_gguf::<B>(gguf_path(model, "q8_0"), WeightFormat::Q8, &device).unwrap();
        let (_, from_folder) = qwen35::load_model_with_weights::<B>(folder.path(), WeightFormat::Q8, &device).unwrap();
        let reference = Reference::open(model);
        let ids = reference.input_ids("len64", &device);
        let ours = from_file.forward(ids.clone()).into_data().to_vec::<f32>().unwrap();
        let theirs = from_folder.forward(ids).into_data().to_vec::<f32>().unwrap();
        let error = relative_check(&format!("{model}: q8 logits"), &ours, &theirs, 1e-4);
        println!("{model}: Q8_0 file against the folder in q8: logits within {error:.1e}");
    }
}

#[test]
fn a_file_that_is_not_what_its_settings_say_is_refused_naming_the_key_or_tensor() {
    let device = Default::default();
    let error = |path: &std::path::Path| match load_gguf::<B>(path, WeightChoice::Auto, &device) {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(error) => error.to_string(),
    };
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(gguf_path("dense", "bf16")).unwrap();
    let patched = |from: &[u8], to: &[u8]| {
        let at = bytes.windows(from.len()).position(|w| w == from).expect("the pattern is in the file");
        let mut patched = bytes.clone();
        patched[at..at + to.len()].copy_from_slice(to);
        let path = dir.path().join("patched.gguf");
        std::fs::write(&path, patched).unwrap();
        path
    };
    // A key the settings need, renamed.
    let message = error(&patched(b"qwen35.block_count", b"qwen35.block_counx"));
    assert!(message.contains("it has no `qwen35.block_count`"), "{message}");
    // A tensor of the wrong shape: `ffn_down` [32, 96] stored as [96, 32] (the same bytes).
    let name = b"blk.0.ffn_down.weight";
    let entry = [&(name.len() as u64).to_le_bytes()[..], name, &2u32.to_le_bytes(), &96u64.to_le_bytes()].concat();
    let swapped = [&entry[..entry.len() - 8], &32u64.to_le_bytes(), &96u64.to_le_bytes()].concat();
    let message = error(&patched(&[&entry[..], &32u64.to_le_bytes()].concat(), &swapped));
    assert!(message.contains("tensor `blk.0.ffn_down.weight` has shape [96, 32], expected [32, 96]"), "{message}");
    // The block-type fixture is a GGUF file of another architecture.
    let message = error(&fixture_path("gguf/blocks.gguf"));
    assert!(message.contains("architecture is `decider-test`, not Qwen3.5"), "{message}");
    // Asked for q4, a Q8_0 file is refused (its blocks would be rounded twice).
    match load_gguf::<B>(gguf_path("dense", "q8_0"), WeightFormat::Q4, &device) {
        Err(error) => {
            let message = error.to_string();
            assert!(message.contains("stored in q8_0 blocks, asked for q4"), "{message}");
        }
        Ok(_) => panic!("a Q8_0 file loaded in q4"),
    }
}

/// The logits of the model of GGUF file `path` on the reference's `len7` ids, in f32.
fn logits(path: &std::path::Path) -> Vec<f32> {
    let device = Default::default();
    let (_, model) = load_gguf::<B>(path, WeightFormat::F32, &device).unwrap();
    let ids = Reference::open("moe").input_ids("len7", &device);
    model.forward(ids).into_data().to_vec::<f32>().unwrap()
}

/// A file converted without `--no-mtp` counts the multi-token-prediction layers in
/// `block_count` (after the model's, not recurrent) and names their number in
/// `nextn_predict_layers`: the model is the same without them. And a file converted with
/// `--fuse-gate-up-exps` holds each layer's experts' gate and up projections in one
/// `ffn_gate_up_exps` tensor, `[E, 2I, H]` as the checkpoint: the same model again.
#[test]
fn the_mtp_layers_and_fused_experts_leave_the_model_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let file = GgufFile::open(gguf_path("moe", "bf16")).unwrap();
    let expected = logits(&gguf_path("moe", "bf16"));
    let config = config_of(&file).unwrap();
    let layers = config.num_hidden_layers;

    let (mut metadata, mut tensors) = parts(&file);
    for (key, value) in &mut metadata {
        match key.as_str() {
            "qwen35moe.block_count" => *value = Value::U32(layers as u32 + 1),
            "qwen35moe.attention.recurrent_layers" => {
                let Value::Array(qwen35::gguf::Array::Bool(recurrent)) = value else { panic!("{value:?}") };
                recurrent.push(false);
            }
            _ => {}
        }
    }
    metadata.push(("qwen35moe.nextn_predict_layers".into(), Value::U32(1)));
    // The MTP block: a full-attention layer's tensors (the last layer's, changed) as `blk.{layers}`.
    let last = format!("blk.{}.", layers - 1);
    let mtp: Vec<Part> = tensors
        .iter()
        .filter(|part| part.name.starts_with(&last))
        .map(|part| Part {
            name: part.name.replacen(&last, &format!("blk.{layers}."), 1),
            dims: part.dims.clone(),
            ggml_type: part.ggml_type,
            bytes: part.bytes.iter().map(|b| b ^ 0x10).collect(),
        })
        .collect();
    assert!(mtp.len() > 10, "{} MTP tensors", mtp.len());
    tensors.extend(mtp);
    let with_mtp = dir.path().join("mtp.gguf");
    write_gguf(&with_mtp, &metadata, &tensors);
    let read = config_of(&GgufFile::open(&with_mtp).unwrap()).unwrap();
    assert_eq!(read, config);
    assert_eq!(logits(&with_mtp), expected, "with an MTP layer");
    // More MTP layers than blocks is refused, naming the keys.
    let (mut metadata, tensors) = parts(&file);
    metadata.push(("qwen35moe.nextn_predict_layers".into(), Value::U32(layers as u32)));
    let no_layers = dir.path().join("no-layers.gguf");
    write_gguf(&no_layers, &metadata, &tensors);
    let message = config_of(&GgufFile::open(&no_layers).unwrap()).unwrap_err().to_string();
    assert!(message.contains("`qwen35moe.nextn_predict_layers` is 4: no layers are left"), "{message}");

    // Fused experts: each layer's gate and up stacks concatenated along `out`, per expert.
    let (metadata, tensors) = parts(&file);
    let mut fused = Vec::new();
    for part in &tensors {
        if let Some(layer) = part.name.strip_suffix("ffn_gate_exps.weight") {
            let up = tensors.iter().find(|p| p.name == format!("{layer}ffn_up_exps.weight")).unwrap();
            let [experts, rows, width] = part.dims[..] else { panic!("{:?}", part.dims) };
            assert_eq!((part.ggml_type, up.ggml_type), (GgmlType::Bf16, GgmlType::Bf16));
            let each = rows * width * 2;
            let bytes = (0..experts)
                .flat_map(|e| [&part.bytes[e * each..(e + 1) * each], &up.bytes[e * each..(e + 1) * each]].concat())
                .collect();
            fused.push(Part {
                name: format!("{layer}ffn_gate_up_exps.weight"),
                dims: vec![experts, 2 * rows, width],
                ggml_type: GgmlType::Bf16,
                bytes,
            });
        } else if !part.name.ends_with("ffn_up_exps.weight") {
            fused.push(Part {
                name: part.name.clone(),
                dims: part.dims.clone(),
                ggml_type: part.ggml_type,
                bytes: part.bytes.clone(),
            });
        }
    }
    assert_eq!(fused.len(), tensors.len() - layers);
    let with_fused = dir.path().join("fused.gguf");
    write_gguf(&with_fused, &metadata, &fused);
    assert_eq!(logits(&with_fused), expected, "with fused experts");
}
