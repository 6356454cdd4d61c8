//! `cargo xtask accuracy`: how far each weight format moves the decision probabilities of the 231
//! JevBench public items away from f32, beside how far llama.cpp's plain Q8_0 / Q4_0 rounding of
//! the same weights moves them in the reference implementation (the yardstick, computed with
//! transformers by `xtask/accuracy/reference.py`, which also builds the model).
//!
//! The yardstick rounds the weights alone; this project's q8 and q4 paths also round each
//! activation row to integer blocks for their integer dot products (8 bits as llama.cpp's CPU
//! path does, or 16 for the products of activations q8's `out_proj`, `o_proj` and `down_proj`
//! read: `decider_ops::ActivationBits`). Both are
//! reported: each format as computed, and its weights alone (a `decider quantize`d folder loaded
//! in f32). The bound the formats are held to is relative: mean |Δp| as computed ≤ [`BOUND`] ×
//! the yardstick's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail, ensure};
use decider::{Decider, Qwen35Ops, SystemOneRequest};
use decider_cli::backend::{BackendName, GenericTask};
use qwen35::{WeightChoice, WeightFormat};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::jevbench::client::request_body;
use crate::jevbench::items::TIERS;
use crate::jevbench::{assets_dir, select_items};

/// A format's mean |Δp| may be at most this multiple of the yardstick's.
pub const BOUND: f64 = 1.25;

#[derive(clap::Args, Clone)]
pub struct AccuracyArgs {
    /// The model folder `reference.py model` wrote.
    #[arg(long)]
    pub model: PathBuf,
    /// The file `reference.py yardstick` wrote for that model.
    #[arg(long)]
    pub reference: PathBuf,
    /// Weight formats to measure against f32 (q8 and q4 beside the reference's llama.cpp
    /// rounding of the weights; bf16 and f16 alone).
    #[arg(long, value_delimiter = ',', default_value = "q8,q4,bf16,f16")]
    pub formats: Vec<WeightFormat>,
    /// GGUF files of the same model (llama.cpp's converter and `llama-quantize`, a
    /// `decider_config.json` beside each) to measure too: each as stored (`auto`), and its
    /// values dequantized to f32 (the rounding of the weights alone).
    #[arg(long, value_delimiter = ',')]
    pub gguf: Vec<PathBuf>,
    #[arg(long, value_enum, default_value_t = BackendName::default_name())]
    pub backend: BackendName,
}

/// `reference.py yardstick`'s output.
#[derive(Deserialize)]
pub struct Reference {
    pub items: Vec<ReferenceItem>,
}

#[derive(Deserialize)]
pub struct ReferenceItem {
    pub id: String,
    pub rows: Vec<ReferenceRow>,
    /// Each slot's option probabilities, by weight set (`f32`, `q8`, `q4`).
    pub probabilities: BTreeMap<String, Vec<Vec<f64>>>,
}

#[derive(Deserialize)]
pub struct ReferenceRow {
    pub len: usize,
    pub ids_sha256: String,
}

/// The SHA-256 of a row's ids written as decimal numbers joined by commas (as the reference
/// script hashes them).
pub fn ids_digest(ids: &[u32]) -> String {
    let text = ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    format!("{:x}", Sha256::digest(text.as_bytes()))
}

/// Every slot's probabilities of every item, item by item.
pub type Probabilities = Vec<Vec<Vec<f64>>>;

/// How far one set of answers lies from another.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shift {
    /// Mean and max of |Δp| over every option of every slot.
    pub mean: f64,
    pub max: f64,
    /// Slots whose most probable option (the first on ties) differs.
    pub top_changed: usize,
    pub slots: usize,
}

/// The shift from `base` to `other`; they must hold the same slots and options.
pub fn shift(base: &Probabilities, other: &Probabilities) -> anyhow::Result<Shift> {
    ensure!(base.len() == other.len(), "{} items against {}", base.len(), other.len());
    let (mut sum, mut max, mut options, mut top_changed, mut slots) = (0.0, 0.0f64, 0usize, 0, 0);
    for (item, (a, b)) in base.iter().zip(other).enumerate() {
        ensure!(a.len() == b.len(), "item {item}: {} slots against {}", a.len(), b.len());
        for (p, q) in a.iter().zip(b) {
            ensure!(p.len() == q.len(), "item {item}: {} options against {}", p.len(), q.len());
            for (x, y) in p.iter().zip(q) {
                sum += (x - y).abs();
                max = max.max((x - y).abs());
            }
            options += p.len();
            top_changed += usize::from(argmax(p) != argmax(q));
            slots += 1;
        }
    }
    ensure!(options > 0, "no options to compare");
    Ok(Shift { mean: sum / options as f64, max, top_changed, slots })
}

/// The first index of the largest value.
fn argmax(p: &[f64]) -> usize {
    p.iter().enumerate().fold(0, |best, (i, &x)| if x > p[best] { i } else { best })
}

/// Mean over slots of the top probability: how far the answers are from uniform.
pub fn mean_top(probabilities: &Probabilities) -> (f64, f64) {
    let slots: Vec<&Vec<f64>> = probabilities.iter().flatten().collect();
    let top = slots.iter().map(|p| p[argmax(p)]).sum::<f64>() / slots.len() as f64;
    let uniform = slots.iter().map(|p| 1.0 / p.len() as f64).sum::<f64>() / slots.len() as f64;
    (top, uniform)
}

impl Reference {
    pub fn read(path: &std::path::Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("{} is not a reference.py yardstick file", path.display()))
    }

    /// Whether the reference scored the weight set `set`.
    pub fn has(&self, set: &str) -> bool {
        self.items.first().is_some_and(|item| item.probabilities.contains_key(set))
    }

    /// One weight set's probabilities, item by item.
    pub fn probabilities(&self, set: &str) -> anyhow::Result<Probabilities> {
        self.items
            .iter()
            .map(|item| {
                item.probabilities
                    .get(set)
                    .cloned()
                    .with_context(|| format!("item {}: no {set:?} probabilities in the reference", item.id))
            })
            .collect()
    }
}

/// This project's probabilities for every item from model folder `model` in `format`.
fn probabilities<B: Qwen35Ops>(
    model: &Path,
    format: WeightFormat,
    reference: &Reference,
    device: &B::Device,
) -> anyhow::Result<Probabilities> {
    let decider = Decider::<B>::load_with_weights(model, format, device)
        .with_context(|| format!("loading {} in {format}", model.display()))?;
    scored(&decider, &format!("{} in {format}", model.display()), reference)
}

/// The probabilities of GGUF file `path`'s model with its weights in `weights`.
fn gguf_probabilities<B: Qwen35Ops>(
    path: &Path,
    weights: WeightChoice,
    reference: &Reference,
    device: &B::Device,
) -> anyhow::Result<Probabilities> {
    let decider = Decider::<B>::load_gguf(path, weights, device)
        .with_context(|| format!("loading {} in {weights}", path.display()))?;
    scored(&decider, &format!("{} in {weights}", path.display()), reference)
}

/// `decider`'s probabilities for every item, checking each item's rows against the reference's
/// (same ids, so both sides scored the same prompts).
fn scored<B: Qwen35Ops>(decider: &Decider<B>, about: &str, reference: &Reference) -> anyhow::Result<Probabilities> {
    let items = select_items(&assets_dir(), &TIERS.map(|t| t.name.to_string()), None)?;
    ensure!(items.len() == reference.items.len(), "{} items, the reference has {}", items.len(), reference.items.len());
    let started = std::time::Instant::now();
    let mut out = Vec::with_capacity(items.len());
    for (item, expected) in items.iter().zip(&reference.items) {
        ensure!(item.id == expected.id, "item {} where the reference has {}", item.id, expected.id);
        let body = request_body(item, "decider");
        let questions = body["questions"].as_object().cloned().unwrap_or_default();
        let plan = decider.prompter().plan(&SystemOneRequest::new(body["state"].clone(), questions))?;
        let rows: Vec<(usize, String)> = plan.rows.iter().map(|r| (r.ids.len(), ids_digest(&r.ids))).collect();
        let expected_rows: Vec<(usize, String)> = expected.rows.iter().map(|r| (r.len, r.ids_sha256.clone())).collect();
        if rows != expected_rows {
            bail!(
                "item {}: this project's prompt rows (length, ids SHA-256) {rows:?} differ from the reference's {expected_rows:?}",
                item.id
            );
        }
        out.push(decider.slot_probabilities(&plan.rows)?);
    }
    eprintln!("{about}: {} items in {:.0} s", items.len(), started.elapsed().as_secs_f64());
    Ok(out)
}

impl GenericTask for &AccuracyArgs {
    fn run<B: Qwen35Ops>(self, device: &B::Device) -> anyhow::Result<()> {
        let reference = Reference::read(&self.reference)?;
        let reference_f32 = reference.probabilities("f32")?;
        let ours_f32 = probabilities::<B>(&self.model, WeightFormat::F32, &reference, device)?;
        let parity = shift(&reference_f32, &ours_f32)?;
        let (top, uniform) = mean_top(&ours_f32);
        println!(
            "model {} on {}: {} slots; mean top probability {top:.3} (uniform answers: {uniform:.3})",
            self.model.display(),
            self.backend,
            parity.slots
        );
        println!(
            "f32 against transformers f32: mean |Δp| {:.2e}, max {:.2e}, top choice changed {}",
            parity.mean, parity.max, parity.top_changed
        );
        println!();
        println!(
            "| weights | mean \\|Δp\\| | max \\|Δp\\| | top choice changed | llama.cpp rounding (transformers): mean \\|Δp\\| | max \\|Δp\\| | top changed | ratio of means | ≤ {BOUND} |"
        );
        println!("|---|---|---|---|---|---|---|---|---|");
        let mut failed = Vec::new();
        for &format in &self.formats {
            let ours = shift(&ours_f32, &probabilities::<B>(&self.model, format, &reference, device)?)?;
            // The 16-bit formats and q4_k (whose blocks are llama.cpp's own) have no llama.cpp
            // rounding of their own to compare with: their own error is the figure.
            let yardstick = match reference.has(&format.to_string()) {
                true => Some(shift(&reference_f32, &reference.probabilities(&format.to_string())?)?),
                false => None,
            };
            let compared = match &yardstick {
                Some(y) => format!("{:.5} | {:.4} | {}", y.mean, y.max, y.top_changed),
                None => "(no yardstick) | |".to_owned(),
            };
            let verdict = match &yardstick {
                Some(y) if ours.mean / y.mean > BOUND => {
                    failed.push(format);
                    format!("{:.2} | **fails**", ours.mean / y.mean)
                }
                Some(y) => format!("{:.2} | holds", ours.mean / y.mean),
                None => " | ".to_owned(),
            };
            println!("| {format} (as computed) | {} | {compared} | {verdict} |", columns(&ours));
            if format.half().is_some() {
                continue;
            }
            // The same weights with f32 activations (a quantized folder loaded in f32): the
            // rounding scheme alone, against llama.cpp's.
            let folder = std::env::temp_dir().join(format!("decider-accuracy-{}-{format}", std::process::id()));
            let _ = std::fs::remove_dir_all(&folder);
            qwen35::quantize::quantize_folder::<B>(&self.model, &folder, format, device)
                .with_context(|| format!("writing {}", folder.display()))?;
            let alone = probabilities::<B>(&folder, WeightFormat::F32, &reference, device);
            std::fs::remove_dir_all(&folder).with_context(|| format!("removing {}", folder.display()))?;
            let alone = shift(&ours_f32, &alone?)?;
            let ratio = yardstick.map_or(String::new(), |y| format!("{:.2}", alone.mean / y.mean));
            println!("| {format} weights alone (f32 activations) | {} | {compared} | {ratio} | |", columns(&alone));
        }
        for path in &self.gguf {
            let name =
                path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
            let stored = shift(&ours_f32, &gguf_probabilities::<B>(path, WeightChoice::Auto, &reference, device)?)?;
            println!("| {name} as stored (`auto`, as computed) | {} | (no yardstick) | | | | |", columns(&stored));
            let exact = WeightChoice::Exactly(WeightFormat::F32);
            let alone = shift(&ours_f32, &gguf_probabilities::<B>(path, exact, &reference, device)?)?;
            println!(
                "| {name} weights alone (dequantized, f32 activations) | {} | (no yardstick) | | | | |",
                columns(&alone)
            );
        }
        ensure!(failed.is_empty(), "mean |Δp| above {BOUND} x the yardstick's for {failed:?}");
        Ok(())
    }
}

/// A shift's table cells: mean, max, top choice changed.
fn columns(shift: &Shift) -> String {
    format!("{:.5} | {:.4} | {} of {}", shift.mean, shift.max, shift.top_changed, shift.slots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shift_is_the_mean_and_max_over_options_and_counts_changed_tops() {
        let base = vec![vec![vec![0.7, 0.3]], vec![vec![0.2, 0.5, 0.3]]];
        // item 0 moves by 0.1 per option, top unchanged; item 1 swaps its top (first index on ties).
        let other = vec![vec![vec![0.6, 0.4]], vec![vec![0.5, 0.5, 0.0]]];
        let s = shift(&base, &other).unwrap();
        assert!((s.mean - (0.1 + 0.1 + 0.3 + 0.0 + 0.3) / 5.0).abs() < 1e-12, "{s:?}");
        assert!((s.max - 0.3).abs() < 1e-12, "{s:?}");
        assert_eq!((s.top_changed, s.slots), (1, 2));
    }

    #[test]
    fn shift_refuses_answers_of_other_shapes() {
        let base = vec![vec![vec![0.5, 0.5]]];
        assert!(
            shift(&base, &vec![vec![vec![1.0, 0.0, 0.0]]]).unwrap_err().to_string().contains("2 options against 3")
        );
        assert!(shift(&base, &vec![]).unwrap_err().to_string().contains("1 items against 0"));
    }

    #[test]
    fn ids_digest_hashes_the_ids_as_the_reference_script_does() {
        // Python: hashlib.sha256(",".join(map(str, [1, 22, 333])).encode()).hexdigest()
        assert_eq!(ids_digest(&[1, 22, 333]), "8915516745284e69425d3f566025a855f5a5718d6d44f09451fb19d0f61fc185");
    }
}
