//! The figures of a run, per tier, per family and overall (`results.json`).

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::items::{Item, TIERS};
use super::metrics::{Agreement, Metrics, agreement, intelligence};
use super::record::Record;

/// Everything `results.json` holds.
#[derive(Debug, Serialize)]
pub struct Summary {
    pub benchmark: &'static str,
    pub meta: Value,
    /// Items attempted / items selected; a run stopped early leaves some unattempted.
    pub attempted: usize,
    pub selected: usize,
    pub stopped_early: Option<String>,
    pub overall: Metrics,
    /// In tier order: easy, standard, hard.
    pub tiers: Vec<TierSummary>,
    pub families: BTreeMap<String, Metrics>,
    /// Unweighted mean of the family accuracies.
    pub macro_accuracy: f64,
    /// Paraphrase agreement over the standard tier's 36 pairs.
    pub paraphrase: Agreement,
    /// Public-only Intelligence: the board's tier formula on the public items only (no judge
    /// tier, no held-out or sealed items), so not comparable with the board's Intelligence.
    pub intelligence_public_only: PublicIntelligence,
    pub notes: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct TierSummary {
    pub tier: &'static str,
    /// Correct over the tier's full item count (unattempted items count as wrong).
    pub correct: usize,
    pub items: usize,
    pub accuracy: f64,
    pub metrics: Metrics,
    /// 100·max(0, (acc − c)/(1 − c)) with the board's frozen-tier chance level c.
    pub intelligence: f64,
    pub chance_board: f64,
    pub chance_public: f64,
}

#[derive(Debug, Serialize)]
pub struct PublicIntelligence {
    /// (0.14·I_easy + 0.28·I_standard + 0.30·I_hard) / 0.72 over the tiers run.
    pub weighted: Option<f64>,
    pub weights: BTreeMap<String, f64>,
}

fn labels_lookup(items: &[Item]) -> impl Fn(&Record) -> Vec<String> + '_ {
    move |r: &Record| items.iter().find(|i| i.id == r.task_id).map(|i| i.labels.clone()).unwrap_or_default()
}

/// Mean of 1/len(labels) over the given items.
fn chance(items: &[&Item]) -> f64 {
    items.iter().map(|i| 1.0 / i.labels.len() as f64).sum::<f64>() / items.len().max(1) as f64
}

impl Summary {
    pub fn new(items: &[Item], records: &[Record], stopped: Option<String>, meta: Value) -> Summary {
        let labels = labels_lookup(items);
        let all: Vec<&Record> = records.iter().collect();
        let mut tiers = Vec::new();
        let mut weights = BTreeMap::new();
        let (mut weighted, mut weight_sum) = (0.0, 0.0);
        for (tier, board_weight) in TIERS.iter().zip([0.14, 0.28, 0.30]) {
            let tier_items: Vec<&Item> = items.iter().filter(|i| i.tier == tier.name).collect();
            if tier_items.is_empty() {
                continue;
            }
            let tier_records: Vec<&Record> = records.iter().filter(|r| r.tier == tier.name).collect();
            let metrics = Metrics::of(&tier_records, &labels);
            let accuracy = metrics.correct as f64 / tier_items.len() as f64;
            let i = intelligence(accuracy, tier.board_chance);
            weights.insert(tier.name.to_string(), board_weight);
            weighted += board_weight * i;
            weight_sum += board_weight;
            tiers.push(TierSummary {
                tier: tier.name,
                correct: metrics.correct,
                items: tier_items.len(),
                accuracy,
                metrics,
                intelligence: i,
                chance_board: tier.board_chance,
                chance_public: chance(&tier_items),
            });
        }
        let mut family_records: BTreeMap<String, Vec<&Record>> = BTreeMap::new();
        for r in records {
            family_records.entry(r.family.clone()).or_default().push(r);
        }
        let families: BTreeMap<String, Metrics> =
            family_records.into_iter().map(|(f, rs)| (f, Metrics::of(&rs, &labels))).collect();
        let macro_accuracy = families.values().map(|m| m.accuracy).sum::<f64>() / families.len().max(1) as f64;
        let standard: Vec<&Record> = records.iter().filter(|r| r.tier == "standard").collect();
        Summary {
            benchmark: "JevBench public items (accuracy-v1 copy: 48 easy, 72 standard, 111 hard)",
            meta,
            attempted: records.len(),
            selected: items.len(),
            stopped_early: stopped,
            overall: Metrics::of(&all, &labels),
            tiers,
            families,
            macro_accuracy,
            paraphrase: agreement(&standard),
            intelligence_public_only: PublicIntelligence { weighted: (weight_sum > 0.0).then(|| weighted / weight_sum), weights },
            notes: vec![
                "Public items only: the board's tier accuracies include held-out items, its Intelligence has a judge tier (28 %), and v1.4 adds sealed items and a gap penalty; none of those are public, so the public-only figures here are not the board's numbers.".into(),
                "Calibration's probability-fidelity half needs gold_probs, which the public copy lacks; ECE and Brier are reported instead.".into(),
                "Latency is the caller's wall time per item, serial; the board's Speed uses the standard+judge run with a x2 + 0.15 s adjustment for self-hosted endpoints.".into(),
            ],
        }
    }
}
