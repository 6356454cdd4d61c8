//! Backend parity of whole decisions: the demo model (same seeded weights on every backend)
//! gives every backend the label logits and probabilities of ndarray, through the shared-prefix
//! fork and the batched question rows, within 1e-4 (on ndarray itself: two independent builds,
//! and bit for bit in `ndarray_decisions_are_deterministic`). One forward pass a backend: the
//! answers are made from the logits checked.

use decider::{Answer, Decider, SystemOneRequest, SystemOneResponse};
use qwen35::Qwen35Ops;
use serde_json::json;

fn request() -> SystemOneRequest {
    let questions = json!({
        "team": {"type": "choice", "instructions": "Which team?", "criteria": {"billing": "charges", "technical": null, "sales": null}},
        "urgent": {"type": "noul", "instructions": "Is it urgent?"},
        "severity": {"type": "score", "instructions": "How severe?", "criteria": ["none", "minor", "major", "critical"]},
        "code": {"instructions": "Which code?", "criteria": (0..30).map(|i| format!("code {i}")).collect::<Vec<_>>()}
    });
    let state = json!({"ticket": {"subject": "Charged twice", "body": "My card was charged twice for order 4471.", "tags": [1, 2, 3, 4, 5, 6, 7, 8, 9]}});
    SystemOneRequest::new(state, questions.as_object().unwrap().clone())
}

/// The label logits of the request's slots and the answers made from them: one forward pass.
fn decide<B: Qwen35Ops>() -> (Vec<Vec<f32>>, SystemOneResponse) {
    let decider = Decider::<B>::demo(&Default::default());
    let plan = decider.prompter().plan(&request()).unwrap();
    let logits = decider.slot_logits(&plan.rows);
    let probabilities = decider.slot_probabilities_from_logits(&plan.rows, &logits).unwrap();
    let answers = decider.respond(&plan, &probabilities);
    (logits, answers)
}

fn check<B: Qwen35Ops>(backend: &str) {
    let (reference, expected) = decide::<burn::backend::NdArray>();
    let (ours, answers) = decide::<B>();
    assert_eq!(ours.len(), reference.len());
    let mut worst = 0.0f32;
    for (a, b) in ours.iter().flatten().zip(reference.iter().flatten()) {
        let error = (a - b).abs() / b.abs().max(1.0);
        worst = worst.max(error);
    }
    println!("{backend}: {} slots x 255 label logits, worst error {worst:.1e} against ndarray", ours.len());
    assert!(worst <= 1e-4, "{backend}: label logits differ from ndarray by {worst}");
    // The probabilities an answer reports (P(yes) for a noul question).
    let probs = |a: &Answer| match a {
        Answer::Choice { probabilities, .. } | Answer::Score { probabilities, .. } => {
            probabilities.values().copied().collect::<Vec<_>>()
        }
        Answer::Noul { noul } => vec![*noul],
    };
    assert_eq!(answers.answers.len(), expected.answers.len());
    for (id, answer) in &answers.answers {
        let expected = &expected.answers[id];
        assert_eq!(
            std::mem::discriminant(answer),
            std::mem::discriminant(expected),
            "{backend} {id}: answer types differ"
        );
        let (p, q) = (probs(answer), probs(expected));
        assert_eq!(p.len(), q.len(), "{backend} {id}");
        assert!(p.iter().zip(&q).all(|(x, y)| (x - y).abs() <= 2e-4), "{backend} {id}: {p:?} vs {q:?}");
    }
}

macro_rules! decisions_equal_ndarray {
    ($name:ident, $backend:ty, $about:literal) => {
        mod $name {
            #[test]
            fn decisions_equal_ndarray() {
                super::check::<$backend>(stringify!($name));
            }
        }
    };
}

decider_ops::for_each_backend!(decisions_equal_ndarray);

#[test]
fn ndarray_decisions_are_deterministic() {
    // The reference for the other backends: two independent builds of the demo model agree.
    assert_eq!(decide::<burn::backend::NdArray>().0, decide::<burn::backend::NdArray>().0);
}
