//! Answer objects (`systemone.format_answer` / `assemble`): probabilities are
//! renormalised in f64, summarised (`confidence`, `x_p_max`, `certainty`) and rounded as
//! Python's `round` rounds.

use serde_json::{Map, Value};

use crate::prompt::PlannedQuestion;
use crate::question::{AnswerType, RenderedQuestion};

/// Python's `round(x, digits)`: the double nearest the correctly rounded decimal (ties to even
/// on the exact binary value, which is what Rust's formatting does).
pub fn py_round(x: f64, digits: usize) -> f64 {
    format!("{x:.digits$}").parse().expect("a formatted float parses")
}

fn rounded(x: f64, digits: usize) -> Value {
    Value::from(py_round(x, digits))
}

/// Probabilities scaled to sum 1; a zero total counts as uniform.
fn normalised(p: &[f64]) -> Vec<f64> {
    let total: f64 = p.iter().sum();
    if total == 0.0 { vec![1.0 / p.len() as f64; p.len()] } else { p.iter().map(|x| x / total).collect() }
}

/// Index of the largest probability, the first one on ties.
pub fn argmax(p: &[f64]) -> usize {
    p.iter().enumerate().fold(0, |best, (i, &x)| if x > p[best] { i } else { best })
}

/// 1 − H/ln n: 1 when all mass is on one option, 0 when the distribution is flat.
pub fn certainty(p: &[f64]) -> f64 {
    if p.len() <= 1 {
        return 1.0;
    }
    let entropy: f64 = -p.iter().filter(|&&x| x > 0.0).map(|&x| x * x.ln()).sum::<f64>();
    (1.0 - entropy / (p.len() as f64).ln()).max(0.0)
}

/// TypeSafe's Choice confidence: (n·p_max − 1)/(n − 1), clipped to [0, 1].
pub fn choice_confidence(p: &[f64]) -> f64 {
    let n = p.len();
    if n <= 1 {
        return 1.0;
    }
    let p = normalised(p);
    let max = p.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    ((n as f64 * max - 1.0) / (n as f64 - 1.0)).clamp(0.0, 1.0)
}

/// TypeSafe's Score confidence: 1 − Σ pᵢ|i − k| / D, k the argmax, D the mean distance of the
/// levels from the middle of the scale; clipped to [0, 1].
pub fn score_confidence(p: &[f64]) -> f64 {
    let n = p.len();
    if n <= 1 {
        return 1.0;
    }
    let p = normalised(p);
    let k = argmax(&p) as f64;
    let spread: f64 = p.iter().enumerate().map(|(i, x)| x * (i as f64 - k).abs()).sum();
    let middle = (n as f64 - 1.0) / 2.0;
    let uniform = (0..n).map(|i| (i as f64 - middle).abs()).sum::<f64>() / n as f64;
    (1.0 - spread / uniform).clamp(0.0, 1.0)
}

/// `format_answer`: the answer object of one question from its option probabilities.
pub fn format_answer(question: &RenderedQuestion, probabilities: &[f64]) -> Map<String, Value> {
    let n = question.options.len().min(probabilities.len());
    let raw = &probabilities[..n];
    let total: f64 = raw.iter().sum();
    let total = if total == 0.0 { 1.0 } else { total };
    let p: Vec<f64> = raw.iter().map(|x| x / total).collect();
    let j = argmax(&p);
    let mut answer = Map::new();
    answer.insert("type".into(), question.kind.as_str().into());
    match question.kind {
        AnswerType::Noul => {
            answer.insert("noul".into(), rounded(p[1], 4));
        }
        AnswerType::Choice => {
            answer.insert("choice".into(), question.names[j].clone().into());
            answer.insert("confidence".into(), rounded(choice_confidence(&p), 4));
            answer.insert("x_p_max".into(), rounded(p[j], 4));
            answer.insert("certainty".into(), rounded(certainty(&p), 4));
            let probs = question.names.iter().zip(&p).map(|(name, x)| (name.clone(), rounded(*x, 4))).collect();
            answer.insert("probabilities".into(), Value::Object(probs));
        }
        AnswerType::Score => {
            let expected: f64 = p.iter().enumerate().map(|(i, x)| i as f64 * x).sum();
            answer.insert("score".into(), rounded(expected, 2));
            answer.insert("confidence".into(), rounded(score_confidence(&p), 4));
            answer.insert("x_p_max".into(), rounded(p[j], 4));
            answer.insert("certainty".into(), rounded(certainty(&p), 4));
            let legend = question.legend.iter().enumerate().map(|(i, d)| (i.to_string(), Value::from(d.clone()))).collect();
            answer.insert("legend".into(), Value::Object(legend));
            let probs = p.iter().enumerate().map(|(i, x)| (i.to_string(), rounded(*x, 4))).collect();
            answer.insert("probabilities".into(), Value::Object(probs));
        }
    }
    answer
}

/// `assemble`: every question's answer, keyed by id in request order, from the probabilities of
/// every slot in plan order. An isolated Score combines its levels' P(yes):
/// p = fit / Σ fit, with `level_fit` and `fit_mass` reported.
pub fn assemble(questions: &[PlannedQuestion], slot_probabilities: &[Vec<f64>]) -> Map<String, Value> {
    questions
        .iter()
        .map(|q| {
            let slots = &slot_probabilities[q.first_slot..q.first_slot + q.slot_count];
            let answer = if q.isolated_levels {
                let fit: Vec<f64> = slots.iter().map(|p| p[1]).collect();
                let mass: f64 = fit.iter().sum();
                let divisor = if mass == 0.0 { 1e-9 } else { mass };
                let p: Vec<f64> = fit.iter().map(|f| f / divisor).collect();
                let mut answer = format_answer(&q.question, &p);
                let level_fit = fit.iter().enumerate().map(|(i, f)| (i.to_string(), rounded(*f, 4))).collect();
                answer.insert("level_fit".into(), Value::Object(level_fit));
                answer.insert("fit_mass".into(), rounded(mass, 4));
                answer
            } else {
                format_answer(&q.question, &slots[0])
            };
            (q.id.clone(), Value::Object(answer))
        })
        .collect()
}
