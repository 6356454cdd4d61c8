//! Helpers shared by the integration tests: fixture paths, the reference tensors written by
//! `tests/fixtures/generate.py` (transformers 5.23.0), and the tolerance check.

use std::path::{Path, PathBuf};

pub mod counting;
pub mod fuzz;
pub mod gguf_values;
pub mod gguf_writer;
pub mod server;

use burn::tensor::{Int, Tensor, TensorData, backend::Backend};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};

/// Path of a file under `tests/fixtures/`.
pub fn fixture_path(relative: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(relative)
}

/// A memory figure in bytes of the process `pid` (`"self"` for this one) from Linux's
/// `/proc/PID/status`: `"VmRSS:"` (resident now) or `"VmHWM:"` (peak resident); `None` where
/// there is none.
pub fn process_memory_bytes(pid: &str, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: u64 = status.lines().find(|l| l.starts_with(field))?.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// A copy of every file of the fixture folder `relative` in a temporary folder, to break.
pub fn fixture_copy(relative: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture_path(relative)).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    dir
}

/// A copy of the dense fixture (`dense/save_pretrained`) with a `vocab`-row bf16 embedding of
/// small values of varied sizes (every block gets its own scale), its value at flat index `nan`
/// (if any) NaN: one tensor that dominates the checkpoint, as the real models' embeddings do.
pub fn dense_with_vocab(vocab: usize, nan: Option<usize>) -> tempfile::TempDir {
    let dir = fixture_copy("dense/save_pretrained");
    let config_path = dir.path().join("config.json");
    let mut config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    config["vocab_size"] = vocab.into();
    std::fs::write(&config_path, config.to_string()).unwrap();
    rewrite_tensors(&dir.path().join("model.safetensors"), |name, dtype, shape, data| {
        Some(match name.ends_with("embed_tokens.weight") {
            true => {
                let value =
                    |i: usize| if Some(i) == nan { f32::NAN } else { ((i * 7919) % 1999) as f32 / 1999.0 - 0.5 };
                let values = (0..vocab * shape[1]).flat_map(|i| half::bf16::from_f32(value(i)).to_le_bytes());
                (Dtype::BF16, vec![vocab, shape[1]], values.collect())
            }
            false => (dtype, shape, data),
        })
    });
    dir
}

/// Rewrites the safetensors file at `path` through `edit`, which gets each (name, dtype, shape,
/// bytes) and returns the tensor to write instead, or `None` to drop it.
pub fn rewrite_tensors(
    path: &Path,
    edit: impl Fn(&str, Dtype, Vec<usize>, Vec<u8>) -> Option<(Dtype, Vec<usize>, Vec<u8>)>,
) {
    let bytes = std::fs::read(path).unwrap();
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
    safetensors::serialize_to_file(views, None, path).unwrap();
}

/// The two reference models.
pub const MODELS: [&str; 2] = ["dense", "moe"];
/// Their two checkpoint layouts (docs/weights.md).
pub const LAYOUTS: [&str; 2] = ["save_pretrained", "hf_layout"];

/// Whether the long cases run: `DECIDER_LONG_TESTS=1` (the README's "Test it" names it).
pub fn long_tests() -> bool {
    std::env::var_os("DECIDER_LONG_TESTS").is_some_and(|value| value == "1")
}

/// The checkpoint layouts a suite repeated on every backend loads on `backend`: both on ndarray,
/// the released one alone on the others unless [`long_tests`]. The layouts differ only in what the
/// loader reads on the host (the names, fused or per-expert experts), the same on every backend; a
/// model on wgpu's software driver takes minutes a layout.
pub fn layouts_on(backend: &str) -> &'static [&'static str] {
    match backend == "ndarray" || long_tests() {
        true => &LAYOUTS,
        false => &LAYOUTS[1..],
    }
}
/// The runs of every reference: single sequences crossing 0, 1 and 2 chunk boundaries, a batch.
pub const RUNS: [&str; 5] = ["len1", "len7", "len64", "len130", "batch2"];

/// The runs a suite repeated on every backend checks on `backend`: all of them on the CPU
/// backends; on wgpu, unless [`long_tests`], one token, the run across two chunk boundaries and
/// the batch. The runs between take the same generic code on every backend (checked on the
/// others), and wgpu in CI is a software driver on which each run's new shapes are compiled and
/// tuned: about 20 s a run and model.
pub fn runs_on(backend: &str) -> &'static [&'static str] {
    const WGPU_RUNS: [&str; 3] = ["len1", "len130", "batch2"];
    match backend != "wgpu" || long_tests() {
        true => &RUNS,
        false => &WGPU_RUNS,
    }
}

/// `reference.safetensors` of one model: inputs and outputs of transformers' forward.
pub struct Reference {
    bytes: Vec<u8>,
}

impl Reference {
    pub fn open(model: &str) -> Self {
        let path = fixture_path(&format!("{model}/reference.safetensors"));
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        Self { bytes }
    }

    fn tensors(&self) -> SafeTensors<'_> {
        SafeTensors::deserialize(&self.bytes).expect("reference file is valid safetensors")
    }

    /// An f32 tensor: values and shape.
    pub fn f32(&self, name: &str) -> (Vec<f32>, Vec<usize>) {
        let tensors = self.tensors();
        let view = tensors.tensor(name).unwrap_or_else(|_| panic!("reference has no tensor `{name}`"));
        assert_eq!(view.dtype(), Dtype::F32, "{name}");
        let values = view.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        (values, view.shape().to_vec())
    }

    /// The token ids `[batch, len]` of a run, as a burn Int tensor.
    pub fn input_ids<B: Backend>(&self, run: &str, device: &B::Device) -> Tensor<B, 2, Int> {
        let tensors = self.tensors();
        let view = tensors.tensor(&format!("{run}.input_ids")).expect("input ids");
        assert_eq!(view.dtype(), Dtype::I64);
        let ids: Vec<i64> = view.data().chunks_exact(8).map(|b| i64::from_le_bytes(b.try_into().unwrap())).collect();
        let shape = [view.shape()[0], view.shape()[1]];
        Tensor::from_data(TensorData::new(ids, shape), device)
    }
}

/// Compares `actual` with the reference tensor `name`: same shape and
/// `max |actual - reference| <= tolerance * max(1, max |reference|)`. Returns the achieved
/// relative error (max abs difference over that scale) so callers can report it.
pub fn assert_close<B: Backend, const D: usize>(
    reference: &Reference,
    name: &str,
    actual: Tensor<B, D>,
    tolerance: f32,
) -> f32 {
    let (expected, shape) = reference.f32(name);
    assert_eq!(actual.dims().to_vec(), shape, "{name}: shape");
    let actual = actual.into_data().convert::<f32>().to_vec::<f32>().unwrap();
    relative_check(name, &actual, &expected, tolerance)
}

/// The tolerance check of [`assert_close`] on plain slices.
pub fn relative_check(name: &str, actual: &[f32], expected: &[f32], tolerance: f32) -> f32 {
    assert_eq!(actual.len(), expected.len(), "{name}: length");
    let scale = expected.iter().fold(1.0f32, |m, v| m.max(v.abs()));
    let mut worst = 0.0f32;
    for (a, e) in actual.iter().zip(expected) {
        let diff = (a - e).abs();
        assert!(!diff.is_nan(), "{name}: NaN (actual {a}, expected {e})");
        worst = worst.max(diff);
    }
    let relative = worst / scale;
    assert!(
        relative <= tolerance,
        "{name}: max abs difference {worst} is {relative:.2e} of the scale {scale}, over {tolerance:.0e}"
    );
    relative
}
