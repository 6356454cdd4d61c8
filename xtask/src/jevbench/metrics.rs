//! Aggregate figures of a run, as JevBench's `summarize.py`/`metrics.py` compute them
//! (JevBench's `scoring.py`): accuracy, schema validity, Brier, ECE, ordinal MAE, paraphrase
//! agreement, latency percentiles, and the chance-corrected Intelligence per tier.

use std::collections::BTreeMap;

use serde::Serialize;

use super::record::Record;

/// Figures of one block of records (a tier, a family, or the whole run).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Metrics {
    pub n: usize,
    pub correct: usize,
    pub accuracy: f64,
    /// Valid distributions (2 % band) / n.
    pub schema_validity: f64,
    /// Strictly valid distributions (1e-3) / n.
    pub schema_validity_strict: f64,
    /// Mean Σ_k (p_k − y_k)² over items with a valid distribution.
    pub brier: Option<f64>,
    /// Top-label ECE, 10 equal-width bins.
    pub ece: Option<f64>,
    pub ece_bins: Vec<EceBin>,
    /// Mean |Σ k p_k − expected| over score items.
    pub ordinal_mae: Option<f64>,
    pub latency_p50_s: Option<f64>,
    pub latency_p95_s: Option<f64>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct EceBin {
    pub lower: f64,
    pub upper: f64,
    pub n: usize,
    pub accuracy: f64,
    pub confidence: f64,
}

impl Metrics {
    pub fn of(records: &[&Record], labels: impl Fn(&Record) -> Vec<String>) -> Metrics {
        let n = records.len();
        let correct = records.iter().filter(|r| r.correct).count();
        let ratio = |k: usize| if n == 0 { 0.0 } else { k as f64 / n as f64 };
        let with_probs: Vec<(&Record, Vec<f64>)> =
            records.iter().filter_map(|r| r.prob_values().map(|p| (*r, p))).collect();
        let brier = mean(with_probs.iter().map(|(r, p)| {
            labels(r).iter().zip(p).map(|(l, pk)| (pk - if *l == r.expected { 1.0 } else { 0.0 }).powi(2)).sum()
        }));
        let (ece, ece_bins) = ece(with_probs.iter().map(|(r, p)| (p.iter().cloned().fold(0.0, f64::max), r.correct)));
        let ordinal_mae =
            mean(records.iter().filter_map(|r| Some((r.ordinal_ev? - r.expected.parse::<f64>().ok()?).abs())));
        let latencies: Vec<f64> = records.iter().map(|r| r.latency_s).collect();
        Metrics {
            n,
            correct,
            accuracy: ratio(correct),
            schema_validity: ratio(records.iter().filter(|r| r.valid).count()),
            schema_validity_strict: ratio(records.iter().filter(|r| r.strict_valid).count()),
            brier,
            ece,
            ece_bins,
            ordinal_mae,
            latency_p50_s: percentile(&latencies, 0.50),
            latency_p95_s: percentile(&latencies, 0.95),
        }
    }
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, count) = values.fold((0.0, 0usize), |(s, c), v| (s + v, c + 1));
    (count > 0).then(|| sum / count as f64)
}

/// Top-label ECE: bin `min(int(conf·10), 9)`, Σ (n_b/N)·|acc_b − conf_b| over non-empty bins.
pub fn ece(points: impl Iterator<Item = (f64, bool)>) -> (Option<f64>, Vec<EceBin>) {
    let mut bins = vec![(0usize, 0usize, 0.0f64); 10];
    let mut total = 0;
    for (confidence, correct) in points {
        let b = ((confidence * 10.0) as usize).min(9);
        bins[b].0 += 1;
        bins[b].1 += correct as usize;
        bins[b].2 += confidence;
        total += 1;
    }
    if total == 0 {
        return (None, vec![]);
    }
    let report: Vec<EceBin> = bins
        .iter()
        .enumerate()
        .filter(|(_, b)| b.0 > 0)
        .map(|(i, &(n, c, conf))| EceBin {
            lower: i as f64 / 10.0,
            upper: (i + 1) as f64 / 10.0,
            n,
            accuracy: c as f64 / n as f64,
            confidence: conf / n as f64,
        })
        .collect();
    let ece = report.iter().map(|b| b.n as f64 / total as f64 * (b.accuracy - b.confidence).abs()).sum();
    (Some(ece), report)
}

/// `percentile(values, q)` with linear interpolation between order statistics at k = (n−1)q.
pub fn percentile(values: &[f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let k = (sorted.len() - 1) as f64 * q;
    let (lo, hi) = (k.floor() as usize, k.ceil() as usize);
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * (k - lo as f64))
}

/// Chance-corrected accuracy: 100·max(0, (acc − c)/(1 − c)).
pub fn intelligence(accuracy: f64, chance: f64) -> f64 {
    100.0 * ((accuracy - chance) / (1.0 - chance)).max(0.0)
}

/// Paraphrase consistency over groups of exactly two records.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Agreement {
    pub pairs: usize,
    /// Pairs where both answers are valid.
    pub both_valid: usize,
    /// Among both-valid pairs, the share with the same predicted label.
    pub agreement: Option<f64>,
    /// Pairs with both answers correct, over all pairs.
    pub both_correct_rate_all_pairs: Option<f64>,
}

pub fn agreement(records: &[&Record]) -> Agreement {
    let mut groups: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
    for r in records {
        if let Some(g) = &r.group {
            groups.entry(g).or_default().push(r);
        }
    }
    let pairs: Vec<_> = groups.values().filter(|g| g.len() == 2).collect();
    let both_valid: Vec<_> = pairs.iter().filter(|g| g[0].valid && g[1].valid).collect();
    let same = both_valid.iter().filter(|g| g[0].predicted == g[1].predicted).count();
    let both_correct = pairs.iter().filter(|g| g[0].correct && g[1].correct).count();
    Agreement {
        pairs: pairs.len(),
        both_valid: both_valid.len(),
        agreement: (!both_valid.is_empty()).then(|| same as f64 / both_valid.len() as f64),
        both_correct_rate_all_pairs: (!pairs.is_empty()).then(|| both_correct as f64 / pairs.len() as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Map, Value};

    fn record(expected: &str, probs: &[(&str, f64)], group: Option<&str>, latency: f64) -> Record {
        let labels: Vec<String> = probs.iter().map(|(l, _)| l.to_string()).collect();
        let values: Vec<f64> = probs.iter().map(|(_, p)| *p).collect();
        let predicted = super::super::scoring::argmax_label(&labels, &values);
        let map: Map<String, Value> = probs.iter().map(|(l, p)| (l.to_string(), Value::from(*p))).collect();
        Record {
            task_id: "t".into(),
            tier: "easy",
            family: "f".into(),
            split: "public".into(),
            group: group.map(str::to_owned),
            ok: true,
            valid: true,
            strict_valid: true,
            renormalized: false,
            correct: predicted == expected,
            expected: expected.into(),
            predicted: Some(predicted),
            probs: Some(map.clone()),
            probs_as_returned: Some(map),
            ordinal_ev: None,
            latency_s: latency,
            usage: None,
            error: None,
        }
    }

    fn labels_of(r: &Record) -> Vec<String> {
        r.probs.as_ref().unwrap().keys().cloned().collect()
    }

    #[test]
    fn brier_counts_every_label_and_accuracy_is_n_over_n() {
        // Hand-computed: (0.8-1)² + (0.2-0)² = 0.08; (0.3-1)² + (0.7-0)² = 0.98; mean 0.53.
        let a = record("yes", &[("no", 0.2), ("yes", 0.8)], None, 0.1);
        let b = record("yes", &[("no", 0.7), ("yes", 0.3)], None, 0.3);
        let m = Metrics::of(&[&a, &b], labels_of);
        assert_eq!((m.n, m.correct, m.accuracy), (2, 1, 0.5));
        assert!((m.brier.unwrap() - 0.53).abs() < 1e-12);
    }

    #[test]
    fn ece_bins_by_top_confidence() {
        // conf 0.95 right, 0.95 wrong -> bin 9: acc 0.5, conf 0.95, gap 0.45, weight 2/3;
        // conf 0.55 right -> bin 5: acc 1, conf 0.55, gap 0.45, weight 1/3. ECE = 0.45.
        let (e, bins) = ece([(0.95, true), (0.95, false), (0.55, true)].into_iter());
        assert!((e.unwrap() - 0.45).abs() < 1e-12);
        assert_eq!(bins.iter().map(|b| b.n).collect::<Vec<_>>(), [1, 2]);
        // Confidence 1.0 falls into the last bin, not an eleventh.
        let (_, bins) = ece([(1.0, true)].into_iter());
        assert_eq!((bins[0].lower, bins[0].n), (0.9, 1));
    }

    #[test]
    fn percentiles_interpolate_linearly() {
        let v = [0.4, 0.1, 0.3, 0.2];
        // k = 3·0.5 = 1.5 -> 0.2 + 0.5·(0.3 − 0.2) = 0.25; k = 3·0.95 = 2.85 -> 0.3 + 0.85·0.1 = 0.385.
        assert!((percentile(&v, 0.5).unwrap() - 0.25).abs() < 1e-12);
        assert!((percentile(&v, 0.95).unwrap() - 0.385).abs() < 1e-12);
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn intelligence_is_chance_corrected_and_floored() {
        // decider-2b on the v1.3 board: frozen tiers easy/standard/judge/hard
        // at 72/72, 82/96, 113/146, 104/220 with chance 0.28403/0.31667/0.29224/0.33644 give
        // the published I = 61.24.
        let i = 0.14 * intelligence(1.0, 0.28403)
            + 0.28 * intelligence(82.0 / 96.0, 0.31667)
            + 0.28 * intelligence(113.0 / 146.0, 0.29224)
            + 0.30 * intelligence(104.0 / 220.0, 0.33644);
        assert!((i - 61.24).abs() < 0.005, "{i}");
        assert_eq!(intelligence(0.2, 0.33644), 0.0);
        assert_eq!(intelligence(1.0, 0.28403), 100.0);
    }

    #[test]
    fn agreement_over_pairs() {
        let a0 = record("x", &[("x", 0.9), ("y", 0.1)], Some("g1"), 0.1);
        let a1 = record("x", &[("x", 0.6), ("y", 0.4)], Some("g1"), 0.1);
        let b0 = record("y", &[("x", 0.9), ("y", 0.1)], Some("g2"), 0.1);
        let b1 = record("y", &[("x", 0.2), ("y", 0.8)], Some("g2"), 0.1);
        let lone = record("y", &[("x", 0.2), ("y", 0.8)], Some("g3"), 0.1);
        let ag = agreement(&[&a0, &a1, &b0, &b1, &lone]);
        assert_eq!((ag.pairs, ag.both_valid), (2, 2));
        assert_eq!(ag.agreement, Some(0.5));
        assert_eq!(ag.both_correct_rate_all_pairs, Some(0.5));
    }

    #[test]
    fn ordinal_mae_uses_the_expected_value() {
        let mut r = record("2", &[("0", 0.1), ("1", 0.2), ("2", 0.7)], None, 0.1);
        r.ordinal_ev = Some(0.2 + 1.4);
        let m = Metrics::of(&[&r], labels_of);
        assert!((m.ordinal_mae.unwrap() - 0.4).abs() < 1e-12);
    }
}
