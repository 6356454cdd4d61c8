//! Answer objects (`systemone.format_answer` / `assemble`): probabilities are
//! renormalised in f64, summarised (`confidence`, `x_p_max`, `certainty`) and rounded as
//! Python's `round` rounds.

use indexmap::IndexMap;
use serde::Serialize;

use crate::prompt::PlannedQuestion;
use crate::question::{AnswerType, RenderedQuestion};

/// One question's answer object, written as the reference writes it: `type` first, then the
/// fields of its type in the reference's order. Values are rounded as `format_answer` rounds them.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Answer {
    Choice {
        /// The most probable option's name (the first on ties).
        choice: String,
        /// TypeSafe's confidence ([`choice_confidence`]).
        confidence: f64,
        /// The most probable option's probability.
        x_p_max: f64,
        certainty: f64,
        /// Each option's probability, by name in option order.
        probabilities: IndexMap<String, f64>,
    },
    Score {
        /// The expected level.
        score: f64,
        /// TypeSafe's confidence ([`score_confidence`]).
        confidence: f64,
        x_p_max: f64,
        certainty: f64,
        /// Each level's description, by level (`"0"`, `"1"`, …).
        legend: IndexMap<String, String>,
        probabilities: IndexMap<String, f64>,
        /// Levels judged in rows of their own: each level's P(yes) and their sum.
        #[serde(flatten)]
        isolated: Option<LevelFit>,
    },
    Noul {
        /// P(yes).
        noul: f64,
    },
}

/// What an isolated Score reports besides its answer (`assemble`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LevelFit {
    /// Each level's P(yes), by level.
    pub level_fit: IndexMap<String, f64>,
    /// Their sum (the probabilities are the fits divided by it).
    pub fit_mass: f64,
}

/// Python's `round(x, digits)`: the double nearest the correctly rounded decimal (ties to even
/// on the exact binary value, which is what Rust's formatting does).
pub fn py_round(x: f64, digits: usize) -> f64 {
    format!("{x:.digits$}").parse().expect("a formatted float parses")
}

/// Probabilities rounded to 4 digits, keyed as given.
pub(crate) fn rounded_by<'a>(
    keys: impl IntoIterator<Item = String>,
    p: impl IntoIterator<Item = &'a f64>,
) -> IndexMap<String, f64> {
    keys.into_iter().zip(p).map(|(key, x)| (key, py_round(*x, 4))).collect()
}

/// Keys `"0"`, `"1"`, … for a Score's levels.
fn levels(n: usize) -> impl Iterator<Item = String> {
    (0..n).map(|i| i.to_string())
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
pub fn format_answer(question: &RenderedQuestion, probabilities: &[f64]) -> Answer {
    let n = question.options.len().min(probabilities.len());
    let raw = &probabilities[..n];
    let total: f64 = raw.iter().sum();
    let total = if total == 0.0 { 1.0 } else { total };
    let p: Vec<f64> = raw.iter().map(|x| x / total).collect();
    let j = argmax(&p);
    match question.kind {
        AnswerType::Noul => Answer::Noul { noul: py_round(p[1], 4) },
        AnswerType::Choice => Answer::Choice {
            choice: question.names[j].clone(),
            confidence: py_round(choice_confidence(&p), 4),
            x_p_max: py_round(p[j], 4),
            certainty: py_round(certainty(&p), 4),
            probabilities: rounded_by(question.names.iter().cloned(), &p),
        },
        AnswerType::Score => Answer::Score {
            score: py_round(p.iter().enumerate().map(|(i, x)| i as f64 * x).sum(), 2),
            confidence: py_round(score_confidence(&p), 4),
            x_p_max: py_round(p[j], 4),
            certainty: py_round(certainty(&p), 4),
            legend: levels(question.legend.len()).zip(question.legend.iter().cloned()).collect(),
            probabilities: rounded_by(levels(p.len()), &p),
            isolated: None,
        },
    }
}

/// `assemble`: every question's answer, keyed by id in request order, from the probabilities of
/// every slot in plan order. An isolated Score combines its levels' P(yes):
/// p = fit / Σ fit, with `level_fit` and `fit_mass` reported.
pub fn assemble(questions: &[PlannedQuestion], slot_probabilities: &[Vec<f64>]) -> IndexMap<String, Answer> {
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
                let Answer::Score { isolated, .. } = &mut answer else {
                    unreachable!("only Score questions have isolated levels")
                };
                *isolated =
                    Some(LevelFit { level_fit: rounded_by(levels(fit.len()), &fit), fit_mass: py_round(mass, 4) });
                answer
            } else {
                format_answer(&q.question, &slots[0])
            };
            (q.id.clone(), answer)
        })
        .collect()
}
