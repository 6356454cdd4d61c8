//! Per-item scoring as JevBench's `scoring.py` does it: the returned
//! distribution must cover exactly the item's labels with finite values in [0, 1] summing to 1
//! (within 1e-3 strictly, or renormalised within a 2 % band); the prediction is the argmax with
//! ties going to the lexicographically smallest label; an invalid answer is wrong.

use serde_json::{Map, Value};

/// Strict sum tolerance.
pub const STRICT_TOLERANCE: f64 = 1e-3;
/// Sums within this band are renormalised and still count.
pub const RENORMALISE_BAND: f64 = 0.02;

/// The distribution a `/v1/systemone` answer gives over an item's labels, as returned:
/// noul `{"no": 1 − p, "yes": p}`, choice and score their `probabilities`. `None` when the
/// answer has no such field (or a choice names an option outside the labels).
pub fn returned_distribution(kind: &str, answer: &Value, labels: &[String]) -> Option<Map<String, Value>> {
    match kind {
        "noul" => {
            let p = answer.get("noul")?.as_f64()?;
            let mut map = Map::new();
            map.insert("no".into(), Value::from(1.0 - p));
            map.insert("yes".into(), Value::from(p));
            Some(map)
        }
        _ => {
            if kind == "choice"
                && let Some(choice) = answer.get("choice")
                && !labels.iter().any(|l| Some(l.as_str()) == choice.as_str())
            {
                return None;
            }
            answer.get("probabilities")?.as_object().cloned()
        }
    }
}

/// The verdict on a returned distribution.
#[derive(Clone, Debug, PartialEq)]
pub struct Validated {
    /// Probabilities in label order (renormalised if the sum was within the band).
    pub probs: Vec<f64>,
    pub strict_valid: bool,
    pub renormalized: bool,
}

/// `validate_probs`: `None` when the distribution is not usable (wrong label set, a value that is
/// not a finite number in [0, 1], or a sum outside the 2 % band).
pub fn validate(returned: &Map<String, Value>, labels: &[String]) -> Option<Validated> {
    if returned.len() != labels.len() || labels.iter().any(|l| !returned.contains_key(l)) {
        return None;
    }
    let probs: Vec<f64> = labels
        .iter()
        .map(|l| match &returned[l] {
            Value::Number(n) => n.as_f64().filter(|p| p.is_finite() && (0.0..=1.0).contains(p)),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let sum: f64 = probs.iter().sum();
    if (sum - 1.0).abs() <= STRICT_TOLERANCE {
        Some(Validated { probs, strict_valid: true, renormalized: false })
    } else if (sum - 1.0).abs() <= RENORMALISE_BAND {
        Some(Validated { probs: probs.iter().map(|p| p / sum).collect(), strict_valid: false, renormalized: true })
    } else {
        None
    }
}

/// `argmax_label`: labels in sorted order, strict `>`, so ties go to the smallest label.
pub fn argmax_label(labels: &[String], probs: &[f64]) -> String {
    let mut order: Vec<usize> = (0..labels.len()).collect();
    order.sort_by(|&a, &b| labels[a].cmp(&labels[b]));
    let mut best = order[0];
    for &i in &order[1..] {
        if probs[i] > probs[best] {
            best = i;
        }
    }
    labels[best].clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn sums_within_1e3_are_strict_within_2_percent_renormalised_else_invalid() {
        let l = labels(&["a", "b"]);
        let strict = validate(&map(json!({"a": 0.4, "b": 0.6005})), &l).unwrap();
        assert!(strict.strict_valid && !strict.renormalized);
        // 0.995: accepted and rescaled (JevBench's test_rounded_sum_is_renormalized_but_reported).
        let rescaled = validate(&map(json!({"a": 0.495, "b": 0.5})), &l).unwrap();
        assert!(!rescaled.strict_valid && rescaled.renormalized);
        assert!((rescaled.probs[0] - 0.495 / 0.995).abs() < 1e-15);
        // 0.7: rejected.
        assert_eq!(validate(&map(json!({"a": 0.3, "b": 0.4})), &l), None);
    }

    #[test]
    fn label_set_and_values_must_be_exact() {
        let l = labels(&["a", "b"]);
        assert_eq!(validate(&map(json!({"a": 1.0})), &l), None, "missing label");
        assert_eq!(validate(&map(json!({"a": 0.5, "b": 0.5, "c": 0.0})), &l), None, "extra label");
        assert_eq!(validate(&map(json!({"a": true, "b": 0.0})), &l), None, "a bool is not a probability");
        assert_eq!(validate(&map(json!({"a": 1.5, "b": -0.5})), &l), None, "outside [0, 1]");
        assert_eq!(validate(&map(json!({"a": "0.5", "b": 0.5})), &l), None, "a string");
    }

    #[test]
    fn ties_go_to_the_lexicographically_smallest_label() {
        let l = labels(&["yes", "no", "maybe"]);
        assert_eq!(argmax_label(&l, &[0.4, 0.4, 0.2]), "no");
        assert_eq!(argmax_label(&l, &[0.3, 0.3, 0.4]), "maybe");
        assert_eq!(argmax_label(&labels(&["b", "a"]), &[0.5, 0.5]), "a");
    }

    #[test]
    fn noul_reads_p_yes_and_a_choice_outside_the_labels_fails() {
        let l = labels(&["no", "yes"]);
        let d = returned_distribution("noul", &json!({"type": "noul", "noul": 0.8}), &l).unwrap();
        assert_eq!(d["yes"], 0.8);
        assert!((d["no"].as_f64().unwrap() - 0.2).abs() < 1e-15);
        let l = labels(&["x", "y"]);
        assert_eq!(
            returned_distribution("choice", &json!({"choice": "z", "probabilities": {"x": 0.5, "y": 0.5}}), &l),
            None
        );
        assert!(
            returned_distribution("choice", &json!({"choice": "x", "probabilities": {"x": 0.5, "y": 0.5}}), &l)
                .is_some()
        );
    }
}
