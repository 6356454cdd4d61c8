//! The engine on the demo model: sharing the state's prefix across question rows gives the
//! answers of running every row from scratch; answers have the reference's shape.

use burn::backend::NdArray;
use decider::{Answer, DecideQuestion, Decider, SystemOneRequest};
use serde_json::{Value, json};

type B = NdArray;

fn questions() -> serde_json::Map<String, Value> {
    json!({
        "team": {"type": "choice", "instructions": "Which team should handle this?",
                 "criteria": {"billing": "charges, refunds, invoices", "technical": "log-in and bugs", "sales": null}},
        "urgent": {"type": "noul", "instructions": "Does the customer need an answer today?"},
        "severity": {"type": "score", "instructions": "How severe is the problem?",
                     "criteria": ["0: no problem", "1: minor", "2: serious", "3: critical"]},
        "wide": {"instructions": "Which code applies?", "criteria": (0..12).map(|i| format!("code {i}")).collect::<Vec<_>>()},
        "language": {"type": "choice", "instructions": "Language?", "criteria": ["en", "de"]}
    })
    .as_object()
    .unwrap()
    .clone()
}

fn state() -> Value {
    json!({"ticket": {"subject": "Charged twice", "body": "My card was charged twice for the same order #4471. Please refund one of them.",
           "history": [1, 2, 3, 4, 5, 6, 7, 8, 9]}})
}

#[test]
fn shared_prefix_gives_the_answers_of_separate_rows() {
    let device = Default::default();
    let shared = Decider::<B>::demo(&device);
    let separate = Decider::<B>::demo(&device).with_shared_prefix(false);
    let request = SystemOneRequest::new(state(), questions());
    let plan = shared.prompter().plan(&request).unwrap();
    assert_eq!(plan.rows.len(), 3 + 4 + 1, "one row per question, one per isolated Score level");
    let a = shared.slot_probabilities(&plan.rows).unwrap();
    let b = separate.slot_probabilities(&plan.rows).unwrap();
    let worst = a.iter().flatten().zip(b.iter().flatten()).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
    assert!(worst < 1e-5, "shared-prefix and separate rows differ by {worst}");
    assert_eq!(shared.answer(&request).unwrap(), separate.answer(&request).unwrap());
}

/// What the server does with the requests queued at once: rows of different requests (one-row
/// requests, a several-row request with its shared state, a `/decide` row, an empty request)
/// scored together, single rows padded into shared batches, give each request the
/// probabilities it gets scored alone at batch 1.
#[test]
fn requests_scored_together_answer_as_scored_alone() {
    let decider = Decider::<B>::demo(&Default::default());
    let one = |state: Value, id: &str| {
        let questions = json!({id: questions()[id].clone()}).as_object().unwrap().clone();
        decider.prompter().plan(&SystemOneRequest::new(state, questions)).unwrap().rows
    };
    let long_state = json!({"log": (0..60).map(|i| format!("event {i}: the order was updated")).collect::<Vec<_>>()});
    let requests = [
        one(json!("short"), "urgent"),
        decider.prompter().plan(&SystemOneRequest::new(state(), questions())).unwrap().rows,
        one(long_state, "team"),
        vec![],
        decider
            .prompter()
            .plan_decide("My card was charged twice.", Some(&json!({"Refund?": {"type": "bool"}}).into()))
            .unwrap()
            .rows()
            .to_vec(),
        one(state(), "wide"),
    ];
    let lengths: Vec<usize> = requests.iter().filter(|r| r.len() == 1).map(|r| r[0].ids.len()).collect();
    let padded =
        decider::batch::plan_batches(&lengths).into_iter().any(|g| g.iter().any(|&i| lengths[i] != lengths[g[0]]));
    assert!(padded, "some single rows of unequal length share a batch, so some are padded: {lengths:?}");
    let together = decider.slot_probabilities_of(&requests.iter().map(Vec::as_slice).collect::<Vec<_>>());
    assert_eq!(together.len(), requests.len());
    for (i, (rows, together)) in requests.iter().zip(together).enumerate() {
        let alone = decider.slot_probabilities(rows).unwrap();
        let together = together.unwrap();
        assert_eq!(together.len(), alone.len(), "request {i}: one answer per slot");
        let worst =
            together.iter().flatten().zip(alone.iter().flatten()).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
        assert!(worst < 1e-5, "request {i}: together and alone differ by {worst}");
    }
}

#[test]
fn answers_have_the_reference_shape() {
    let decider = Decider::<B>::demo(&Default::default());
    let response = decider.system_one(state(), questions()).unwrap();
    assert_eq!(response.model, "decider-demo-random-weights");
    let text = serde_json::to_string(&response).unwrap();
    assert!(text.starts_with("{\"model\":"), "{text}");
    let keys: Vec<_> = response.answers.keys().cloned().collect();
    assert_eq!(keys, ["team", "urgent", "severity", "wide", "language"]);
    // The answers as the wire carries them.
    let answers = serde_json::to_value(&response.answers).unwrap();
    let team = &answers["team"];
    assert_eq!(team["type"], "choice");
    let probs = team["probabilities"].as_object().unwrap();
    assert_eq!(probs.keys().collect::<Vec<_>>(), ["billing", "technical", "sales"]);
    let sum: f64 = probs.values().map(|v| v.as_f64().unwrap()).sum();
    assert!((sum - 1.0).abs() < 2e-4, "rounded probabilities sum to {sum}");
    let severity = &answers["severity"];
    assert_eq!(severity["level_fit"].as_object().unwrap().len(), 4, "isolated levels report level_fit");
    assert!(severity["fit_mass"].is_number());
    let urgent = answers["urgent"].as_object().unwrap();
    assert_eq!(urgent.keys().collect::<Vec<_>>(), ["type", "noul"]);
    // usage counts the shared state prefix once.
    let plan = decider.prompter().plan(&SystemOneRequest::new(state(), questions())).unwrap();
    let total: usize = plan.rows.iter().map(|r| r.ids.len()).sum();
    assert!(response.usage.input_tokens < total && response.usage.input_tokens > plan.context_len);
}

#[test]
fn packed_rows_read_every_slot() {
    let decider = Decider::<B>::demo(&Default::default());
    let mut request = SystemOneRequest::new(state(), questions());
    request.independent = false;
    let plan = decider.prompter().plan(&request).unwrap();
    assert_eq!(plan.rows.len(), 1);
    assert_eq!(plan.rows[0].slots.len(), 5, "packed: no isolated levels");
    let response = decider.answer(&request).unwrap();
    assert_eq!(response.answers.len(), 5);
    assert!(matches!(response.answers["severity"], Answer::Score { isolated: None, .. }), "packed: no level_fit");
}

#[test]
fn decide_answers_each_question_in_one_packed_row() {
    let decider = Decider::<B>::demo(&Default::default());
    let questions = [
        DecideQuestion {
            question: "Which team?".into(),
            options: vec!["billing".into(), "technical".into(), "sales".into()],
        },
        DecideQuestion { question: "Sentiment?".into(), options: vec!["negative".into(), "positive".into()] },
    ];
    let answers = decider.decide("My card was charged twice.", &questions, 0.0).unwrap();
    assert_eq!(answers.len(), 2);
    for (answer, q) in answers.iter().zip(&questions) {
        assert_eq!(answer.probs_list.len(), q.options.len());
        assert!((answer.probs_list.iter().sum::<f64>() - 1.0).abs() < 1e-5);
        assert!(q.options.contains(answer.choice.as_ref().unwrap()));
    }
    // decider-ai 1.10.0's `decide/one_question` fixture case: 34 tokens, the slot at 33, A..C as `(A`-style tokens.
    let plan = decider.prompter().plan_decide_questions("My card was charged twice.", &questions[..1]).unwrap();
    let row = &plan.rows()[0];
    assert_eq!((row.ids.len(), row.slots.clone()), (34, vec![33]));
    assert_eq!(row.ids[33], 318, "the slot is the ` (` token");
    let abstained = decider.decide("x", &questions[..1], 1.01).unwrap();
    assert_eq!(abstained[0].choice, None, "p_max below abstain_below leaves the choice empty");
}

/// `Decider::decide`'s typed questions and the `/decide` form with the same choice fields build
/// the same row; past 255 options the library refuses and the form answers over the first 255.
#[test]
fn decide_and_the_decide_form_build_one_row() {
    let prompter = decider::Prompter::demo();
    let options = |n: usize| (0..n).map(|i| format!("option {i}")).collect::<Vec<String>>();
    let questions = [
        DecideQuestion { question: "Which team?".into(), options: vec!["billing".into(), "none of the above".into()] },
        DecideQuestion { question: "Which one?".into(), options: options(255) },
    ];
    let schema = json!({
        "Which team?": {"type": "choice", "options": ["billing", "none of the above"]},
        "Which one?": {"type": "choice", "options": options(255)},
    });
    let schema = decider::python_json::Json::from(schema);
    let typed = prompter.plan_decide_questions("My card was charged twice.", &questions).unwrap();
    let form = prompter.plan_decide("My card was charged twice.", Some(&schema)).unwrap();
    let (typed, form) = (&typed.rows()[0], &form.rows()[0]);
    assert_eq!((&typed.ids, &typed.slots, &typed.nopts), (&form.ids, &form.slots, &form.nopts));

    let many = [DecideQuestion { question: "Which one?".into(), options: options(256) }];
    let err = prompter.plan_decide_questions("x", &many).err().expect("256 options are refused");
    assert!(err.to_string().contains("has 256 options; 1..255 are supported"), "{err}");
    let schema = decider::python_json::Json::from(json!({"Which one?": {"type": "choice", "options": options(256)}}));
    let form = prompter.plan_decide("x", Some(&schema)).unwrap();
    assert_eq!(form.rows()[0].nopts, vec![255], "the form answers over the first 255 options");
}

#[test]
fn invalid_questions_are_refused_with_the_reference_message() {
    let decider = Decider::<B>::demo(&Default::default());
    let bad = json!({"q": {"type": "choice", "instructions": "x", "criteria": ["only one"]}});
    let err = decider.system_one(json!("s"), bad.as_object().unwrap().clone()).unwrap_err();
    assert_eq!(err.to_string(), "choice criteria: a map of 2..255 options");
}

/// The readout projects onto the label rows only; those logits must equal the label columns of
/// the full output head, for tied embeddings (the demo) and for a separate `lm_head`.
#[test]
fn label_logits_equal_the_full_output_head_at_the_label_columns() {
    use burn::tensor::{Int, Tensor, TensorData};
    use decider::Prompter;
    use decider::demo::{demo_config, demo_model};

    let device = Default::default();
    let mut untied = demo_config();
    untied.tie_word_embeddings = false;
    for (name, model) in [("tied", demo_model::<B>(&device)), ("untied lm_head", untied.init::<B>(&device))] {
        let decider = Decider::new(model, Prompter::demo(), &device, name.into()).unwrap();
        let plan = decider.prompter().plan(&SystemOneRequest::new(state(), questions())).unwrap();
        let row = &plan.rows[0];
        let ours = decider.slot_logits(std::slice::from_ref(row));
        let ids: Vec<i64> = row.ids.iter().map(|&i| i as i64).collect();
        let logits =
            decider.model().forward(Tensor::<B, 2, Int>::from_data(TensorData::new(ids, [1, row.ids.len()]), &device));
        let at_slot = logits.slice([0..1, row.slots[0]..row.slots[0] + 1]).into_data().into_vec::<f32>().unwrap();
        let labels = &decider.prompter().tokenizer.labels().ids;
        for (j, &id) in labels.iter().enumerate() {
            let full = at_slot[id as usize];
            assert!(
                (ours[0][j] - full).abs() <= 1e-5 * full.abs().max(1.0),
                "{name}: label {j}: {} vs {full}",
                ours[0][j]
            );
        }
    }
}

#[test]
fn non_finite_logits_are_an_error_not_an_answer() {
    // One NaN in the final norm makes every logit NaN: the request fails, naming the cause,
    // instead of answering probabilities of NaN (`null` on the wire).
    use burn::module::Param;
    use burn::tensor::Tensor;
    let device = Default::default();
    let mut model = decider::demo::demo_model::<B>(&device);
    let [width] = model.norm.weight.dims();
    model.norm.weight = Param::from_tensor(Tensor::full([width], f32::NAN, &device));
    let decider = Decider::new(model, decider::Prompter::demo(), &device, "nan".into()).unwrap();
    let error = decider.system_one(state(), questions()).expect_err("NaN logits are an error");
    assert!(matches!(error, decider::DeciderError::NonFinite(_)), "{error}");
    assert!(error.to_string().contains("are NaN or infinite"), "{error}");
    let error =
        decider.decide_json("context", Some(&json!({"Q?": {"type": "bool"}}).into())).expect_err("and on /decide");
    assert!(error.to_string().contains("are NaN or infinite"), "{error}");
}

#[test]
fn a_tiny_temperature_answers_one_hot_not_null() {
    let decider = Decider::<B>::demo(&Default::default()).with_temperature(1e-300).unwrap();
    let response = decider.system_one(state(), questions()).unwrap();
    let wire = serde_json::to_value(&response).unwrap();
    let team = wire["answers"]["team"]["probabilities"].as_object().unwrap();
    let mut values: Vec<f64> = team.values().map(|p| p.as_f64().expect("a number, not null")).collect();
    values.sort_by(f64::total_cmp);
    assert_eq!(values, [0.0, 0.0, 1.0], "{wire}");
}
