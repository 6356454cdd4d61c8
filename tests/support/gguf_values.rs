//! A GGUF file's values as the checkpoint folder it was converted from holds them: what a model
//! reads from the file, by checkpoint name, dequantized as llama.cpp does (the f32 load), with the
//! converter's reorders undone here by its own rule, for tests that compare a file with a folder.

use std::collections::BTreeMap;
use std::path::Path;

use burn::backend::NdArray;
use decider_ops::{dequantize_q4, dequantize_q4k, dequantize_q5k, dequantize_q6k, dequantize_q8};
use qwen35::gguf::{GgufFile, GgufSource};
use qwen35::loader::{Load, TensorSource};
use qwen35::value_heads::ValueHeadOrder;
use qwen35::weight::WeightValues;
use qwen35::weight_format::WeightUse;
use qwen35::{LoadError, Qwen35Config, WeightChoice, WeightFormat};
use safetensors::Dtype;

use crate::rewrite_tensors;

/// The names and shapes of every tensor a model of `config` reads, in order, with whether each
/// is a weight (read through `TensorSource::weight`).
pub fn tensors_read(config: &Qwen35Config) -> Vec<(String, Vec<usize>, Option<WeightUse>)> {
    struct Recorder(std::cell::RefCell<Vec<(String, Vec<usize>, Option<WeightUse>)>>);
    impl TensorSource for Recorder {
        fn text_prefix(&self) -> &str {
            "model"
        }
        fn f32(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, LoadError> {
            self.0.borrow_mut().push((name.to_owned(), shape.to_vec(), None));
            Ok(vec![0.0; shape.iter().product()])
        }
        fn weight(
            &self,
            name: &str,
            dims: &[usize],
            _format: WeightFormat,
            usage: WeightUse,
        ) -> Result<WeightValues, LoadError> {
            self.0.borrow_mut().push((name.to_owned(), dims.to_vec(), Some(usage)));
            Ok(WeightValues::F32(vec![0.0; dims.iter().product()]))
        }
    }
    let recorder = Recorder(Default::default());
    let device = Default::default();
    let load = Load::<NdArray>::from(&recorder, &device, WeightFormat::F32).reading_only();
    let model = config.load(&load.root());
    load.finish(model).unwrap();
    recorder.0.into_inner()
}

/// The f32 values `values` stand for.
pub fn f32_of(values: WeightValues) -> Vec<f32> {
    match values {
        WeightValues::F32(values) => values,
        WeightValues::Half(half, bits) => bits.into_iter().map(|b| half.to_f32(b)).collect(),
        WeightValues::Q8(values, scales) => dequantize_q8(&values, &scales),
        WeightValues::Q4(packed, scales) => dequantize_q4(&packed, &scales),
        WeightValues::Q4K(packed, supers, subs) => dequantize_q4k(&packed, &supers, &subs),
        WeightValues::Q5K(values, supers, subs) => dequantize_q5k(&values, &supers, &subs),
        WeightValues::Q6K(values, supers, subs) => dequantize_q6k(&values, &supers, &subs),
    }
}

/// `values`, a GGUF file's `out_proj` (rows of `row`; each row `Hv` runs of one value head's
/// entries in the converter's tiled order, `[k0 v0, k1 v0 | k0 v1, k1 v1]`), with each row's runs
/// in the checkpoint's grouped order (`[k0: v0 v1 | k1: v0 v1]`): `_reorder_v_heads` of
/// `convert_hf_to_gguf.py`, inverted.
pub fn grouped(values: &[f32], row: usize, config: &Qwen35Config) -> Vec<f32> {
    let (hk, hv) = (config.linear_num_key_heads, config.linear_num_value_heads);
    let run = row / hv;
    let mut grouped = values.to_vec();
    for (tiled, to) in values.chunks(row).zip(grouped.chunks_mut(row)) {
        for (at, head) in to.chunks_mut(run).enumerate() {
            let (key, nth) = (at / (hv / hk), at % (hv / hk));
            let from = nth * hk + key;
            head.copy_from_slice(&tiled[from * run..(from + 1) * run]);
        }
    }
    grouped
}

/// Every tensor a model of `config` reads from `file` in f32, under the names and in the shapes a
/// `save_pretrained` folder has (each expert's projections apart: `experts.{e}.gate_proj.weight`),
/// `out_proj`'s value heads in grouped order where the file holds them tiled; and how many
/// weights were held tiled.
pub fn values_in_checkpoint(
    file: &GgufFile,
    config: &Qwen35Config,
) -> (BTreeMap<String, (Vec<usize>, Vec<f32>)>, usize) {
    let device = Default::default();
    let source = GgufSource::new::<NdArray>(file, config, WeightChoice::Exactly(WeightFormat::F32), &device);
    let mut values = BTreeMap::new();
    let mut tiled = 0;
    for (name, dims, usage) in tensors_read(config) {
        let mut read = match usage {
            None => source.f32(&name, &dims).unwrap(),
            Some(usage) => f32_of(source.weight(&name, &dims, WeightFormat::F32, usage).unwrap()),
        };
        if source.value_head_order(&name) == ValueHeadOrder::Tiled {
            assert!(name.ends_with("linear_attn.out_proj.weight"), "{name}");
            read = grouped(&read, dims[1], config);
            tiled += 1;
        }
        match name.strip_suffix("gate_up_proj").or(name.strip_suffix("down_proj")) {
            Some(experts) if dims.len() == 3 => {
                let (d_out, d_in) = (dims[1], dims[2]);
                for (e, expert) in read.chunks(d_out * d_in).enumerate() {
                    let mut part = |part: &str, part_values: &[f32]| {
                        let shape = vec![part_values.len() / d_in, d_in];
                        values.insert(format!("{experts}{e}.{part}.weight"), (shape, part_values.to_vec()));
                    };
                    match name.ends_with("gate_up_proj") {
                        true => {
                            let (gate, up) = expert.split_at(expert.len() / 2);
                            part("gate_proj", gate);
                            part("up_proj", up);
                        }
                        false => part("down_proj", expert),
                    }
                }
            }
            _ => {
                values.insert(name, (dims, read));
            }
        }
    }
    (values, tiled)
}

/// Replaces every tensor of the safetensors file at `path` with `values`, in f32, in the shape
/// `values` gives it; a tensor `values` does not hold is a panic (the folder holds nothing the
/// model does not read).
pub fn write_values(path: &Path, values: &BTreeMap<String, (Vec<usize>, Vec<f32>)>) {
    rewrite_tensors(path, |name, _, _, _| {
        let (dims, values) = values.get(name).unwrap_or_else(|| panic!("{name} is read"));
        Some((Dtype::F32, dims.clone(), values.iter().flat_map(|v| v.to_le_bytes()).collect()))
    });
}
