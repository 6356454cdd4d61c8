//! One item's outcome, as a JevBench-style record (`records.jsonl`).

use serde::Serialize;
use serde_json::{Map, Value};

use super::items::Item;
use super::scoring::{argmax_label, returned_distribution, validate};

#[derive(Clone, Debug, Serialize)]
pub struct Record {
    pub task_id: String,
    pub tier: &'static str,
    pub family: String,
    pub split: String,
    pub group: Option<String>,
    /// The request got a 200 with an answer for the question.
    pub ok: bool,
    /// The distribution passed validation (2 % band).
    pub valid: bool,
    pub strict_valid: bool,
    pub renormalized: bool,
    pub correct: bool,
    pub expected: String,
    pub predicted: Option<String>,
    /// The validated distribution in label order, keyed by label.
    pub probs: Option<Map<String, Value>>,
    pub probs_as_returned: Option<Map<String, Value>>,
    /// Σ k·p_k for score items.
    pub ordinal_ev: Option<f64>,
    pub latency_s: f64,
    pub usage: Option<Value>,
    /// Why the item failed, when it did (HTTP status and message, or a malformed answer).
    pub error: Option<String>,
}

impl Record {
    /// Scores a `/v1/systemone` response body (or the failure to get one) for `item`.
    pub fn score(item: &Item, response: Result<Value, String>, latency_s: f64) -> Record {
        let mut record = Record {
            task_id: item.id.clone(),
            tier: item.tier,
            family: item.family.clone(),
            split: item.split.clone(),
            group: item.group.clone(),
            ok: false,
            valid: false,
            strict_valid: false,
            renormalized: false,
            correct: false,
            expected: item.expected.clone(),
            predicted: None,
            probs: None,
            probs_as_returned: None,
            ordinal_ev: None,
            latency_s,
            usage: None,
            error: None,
        };
        let body = match response {
            Ok(body) => body,
            Err(e) => {
                record.error = Some(e);
                return record;
            }
        };
        record.usage = body.get("usage").cloned();
        let Some(answer) = body.get("answers").and_then(|a| a.get("decision")) else {
            record.error = Some("the response has no answers.decision".into());
            return record;
        };
        record.ok = true;
        let returned = returned_distribution(item.kind(), answer, &item.labels);
        record.probs_as_returned = returned.clone();
        let Some(validated) = returned.as_ref().and_then(|r| validate(r, &item.labels)) else {
            record.error = Some("the returned distribution is not valid over the item's labels".into());
            return record;
        };
        let predicted = argmax_label(&item.labels, &validated.probs);
        record.valid = true;
        record.strict_valid = validated.strict_valid;
        record.renormalized = validated.renormalized;
        record.correct = predicted == item.expected;
        record.predicted = Some(predicted);
        if item.kind() == "score" {
            record.ordinal_ev = Some(validated.probs.iter().enumerate().map(|(k, p)| k as f64 * p).sum());
        }
        record.probs = Some(item.labels.iter().cloned().zip(validated.probs.iter().map(|&p| Value::from(p))).collect());
        record
    }

    /// The validated probabilities in label order.
    pub fn prob_values(&self) -> Option<Vec<f64>> {
        self.probs.as_ref().map(|m| m.values().map(|v| v.as_f64().unwrap_or(0.0)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn item(kind: &str, labels: &[&str], expected: &str) -> Item {
        Item {
            tier: "standard",
            id: "t".into(),
            family: "f".into(),
            split: "public".into(),
            group: None,
            state: json!("s"),
            question: json!({"type": kind, "instructions": "q"}),
            labels: labels.iter().map(|s| s.to_string()).collect(),
            expected: expected.into(),
        }
    }

    #[test]
    fn a_score_is_judged_by_its_argmax_level_not_its_mean() {
        // Mean 0·0.4 + 1·0 + 2·0.1 + 3·0.5 = 1.7 would round to 2; the argmax level is 3.
        let answer = json!({"answers": {"decision": {"type": "score", "score": 1.7, "probabilities": {"0": 0.4, "1": 0.0, "2": 0.1, "3": 0.5}}}});
        let r = Record::score(&item("score", &["0", "1", "2", "3"], "3"), Ok(answer), 0.1);
        assert_eq!((r.predicted.as_deref(), r.correct), (Some("3"), true));
        assert!((r.ordinal_ev.unwrap() - 1.7).abs() < 1e-12);
    }

    #[test]
    fn noul_at_one_half_predicts_no() {
        // P(yes) = 0.5 is a tie, and ties go to the smallest label, "no".
        let answer = json!({"answers": {"decision": {"type": "noul", "noul": 0.5}}});
        let r = Record::score(&item("noul", &["no", "yes"], "yes"), Ok(answer), 0.1);
        assert_eq!((r.predicted.as_deref(), r.correct, r.valid), (Some("no"), false, true));
    }

    #[test]
    fn failures_and_invalid_answers_are_wrong() {
        let r = Record::score(&item("noul", &["no", "yes"], "yes"), Err("HTTP 500: boom".into()), 0.1);
        assert!(!r.ok && !r.valid && !r.correct && r.error.as_deref() == Some("HTTP 500: boom"));
        let answer =
            json!({"answers": {"decision": {"type": "choice", "choice": "a", "probabilities": {"a": 0.9, "b": 0.5}}}});
        let r = Record::score(&item("choice", &["a", "b"], "a"), Ok(answer), 0.1);
        assert!(r.ok && !r.valid && !r.correct, "a sum of 1.4 is outside the 2 % band");
    }
}
