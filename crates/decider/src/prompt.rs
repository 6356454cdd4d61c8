//! Prompt rows and answer slots: the state-first plain layout of decider-ai 1.10.0
//! (`prompt_fast.build_rows`, `systemone.plan_rows` in decider-ai 1.10.0).
//!
//! A row is `encode("Context:\n" + state)[:cap]` followed by one question piece per question;
//! pieces are tokenized on their own (BPE never merges across a piece boundary). The slot of a
//! question is the last token of its piece, the ` (` of `Answer: (`.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value};

use crate::error::DeciderError;
use crate::question::{AnswerType, RenderedQuestion, render_question};
use crate::state::render_state;
use crate::tokenizer::{MAX_OPTIONS, Tokenizer};

/// Options rendered as `(A) text` in one string; more use one label token per option.
pub const NARROW: usize = 10;

/// The state cap of `system_one` and `/v1/systemone` (`DECIDER_MAX_STATE_TOKENS`).
pub const MAX_STATE_TOKENS: usize = 32_768;

/// One forward row: its ids, and per question in it the slot, answer type and option count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub ids: Vec<u32>,
    pub slots: Vec<usize>,
    pub types: Vec<AnswerType>,
    pub nopts: Vec<usize>,
}

/// How the rows of a request answer its questions.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedQuestion {
    pub id: String,
    pub question: RenderedQuestion,
    /// The question's first slot in request order (rows in order, slots in row order).
    pub first_slot: usize,
    /// Slots the question reads: one, or one yes/no slot per level of an isolated Score.
    pub slot_count: usize,
    /// Whether its slots are isolated Score levels.
    pub isolated_levels: bool,
}

/// A request turned into rows.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub questions: Vec<PlannedQuestion>,
    pub rows: Vec<Row>,
    /// Tokens of the (truncated) state segment every row starts with.
    pub context_len: usize,
}

impl Plan {
    /// `usage.input_tokens`: all rows' tokens with their common prefix counted once.
    pub fn input_tokens(&self) -> usize {
        unique_tokens(&self.rows)
    }
}

/// How to lay a request out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanOptions {
    /// One row per question (`true`, the default) or all questions in one row.
    pub independent: bool,
    /// Score levels in rows of their own (the model's `isolated_levels`; only when independent).
    pub isolated_levels: bool,
    /// Cap on the state segment's tokens.
    pub max_state_tokens: usize,
}

impl Default for PlanOptions {
    fn default() -> Self {
        Self { independent: true, isolated_levels: false, max_state_tokens: MAX_STATE_TOKENS }
    }
}

/// The text of an isolated Score level's yes/no question.
fn isolated_level_question(question: &str, level: &str) -> String {
    format!("{question}\nProposed answer: {}\nDoes the proposed answer fit?", strip_level_number(level))
}

/// `"2: somewhat"` -> `"somewhat"`: removes a leading `\s*-?\d+\s*:\s*` with Python's
/// Unicode classes (its `\s` also takes the separators U+001C..U+001F).
pub fn strip_level_number(text: &str) -> &str {
    static LEVEL_NUMBER: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^[\s\x1c-\x1f]*-?\d+[\s\x1c-\x1f]*:[\s\x1c-\x1f]*").expect("valid regex"));
    match LEVEL_NUMBER.find(text) {
        Some(m) => &text[m.end()..],
        None => text,
    }
}

/// Renders and plans a request (`serve.prepare`): validates every question first, then builds
/// the rows.
pub fn plan(tokenizer: &Tokenizer, state: &Value, questions: &Map<String, Value>, options: PlanOptions) -> Result<Plan, DeciderError> {
    let mut rendered = Vec::with_capacity(questions.len());
    for (id, spec) in questions {
        let spec = spec
            .as_object()
            .ok_or_else(|| DeciderError::InvalidQuestion(format!("question {id:?} must be an object")))?;
        rendered.push((id.clone(), render_question(spec)?));
    }
    let isolated = options.isolated_levels && options.independent;

    // Each question becomes one (text, options, type) entry, or one per isolated level.
    let mut entries: Vec<RowQuestion> = Vec::new();
    let mut planned = Vec::with_capacity(rendered.len());
    for (id, question) in rendered {
        let first_slot = entries.len();
        let isolated_levels = isolated && question.kind == AnswerType::Score && question.isolated;
        if isolated_levels {
            for level in &question.legend {
                entries.push((isolated_level_question(&question.text, level), vec!["no".into(), "yes".into()], AnswerType::Score));
            }
        } else {
            entries.push((question.text.clone(), question.options.clone(), question.kind));
        }
        let slot_count = entries.len() - first_slot;
        planned.push(PlannedQuestion { id, question, first_slot, slot_count, isolated_levels });
    }

    let context = context_ids(tokenizer, &render_state(state), options.max_state_tokens);
    // Packed, a request without questions is still one (slotless) row, as in the reference.
    let rows = if options.independent {
        entries.iter().map(|entry| row(tokenizer, &context, std::slice::from_ref(entry))).collect()
    } else {
        vec![row(tokenizer, &context, &entries)]
    };
    Ok(Plan { questions: planned, rows, context_len: context.len() })
}

/// A question as one row sees it: text, option texts, answer type.
pub type RowQuestion = (String, Vec<String>, AnswerType);

/// The row `context` + one piece per question (numbered when there are several).
pub fn row(tokenizer: &Tokenizer, context: &[u32], questions: &[RowQuestion]) -> Row {
    let multi = questions.len() > 1;
    let mut row = Row { ids: context.to_vec(), slots: vec![], types: vec![], nopts: vec![] };
    for (k, (text, options, kind)) in questions.iter().enumerate() {
        row.ids.extend(question_piece(tokenizer, text, options, k, multi));
        row.slots.push(row.ids.len() - 1);
        row.types.push(*kind);
        row.nopts.push(options.len());
    }
    row
}

/// `encode("Context:\n" + state)[:cap]`.
pub fn context_ids(tokenizer: &Tokenizer, state: &str, max_state_tokens: usize) -> Vec<u32> {
    let mut ids = tokenizer.encode(&format!("Context:\n{state}"));
    ids.truncate(max_state_tokens);
    ids
}

/// The ids of question `k` (numbered when the row holds several): its header, options and
/// `Answer: (`. Up to [`NARROW`] options are one string with `(A)`..`(J)`; more are built from
/// ids, `\n(` + label token + `) text`, so every label is one token.
pub fn question_piece(tokenizer: &Tokenizer, text: &str, options: &[String], k: usize, multi: bool) -> Vec<u32> {
    let number = if multi { format!(" {}", k + 1) } else { String::new() };
    let head = format!("\n\nQuestion{number}: {text}\nOptions:");
    let tail = format!("\nAnswer{number}: (");
    if options.len() <= NARROW {
        let lines: String = options.iter().zip('A'..='J').map(|(o, letter)| format!("\n({letter}) {o}")).collect();
        return tokenizer.encode(&format!("{head}{lines}{tail}"));
    }
    debug_assert!(options.len() <= MAX_OPTIONS, "render_question caps options");
    let labels = tokenizer.labels();
    let mut piece = tokenizer.encode(&head);
    for (option, label) in options.iter().zip(&labels.ids) {
        piece.extend(&labels.open_ids);
        piece.push(*label);
        piece.extend(tokenizer.encode(&format!(") {option}")));
    }
    piece.extend(tokenizer.encode(&tail));
    piece
}

/// Tokens of rows that share a prefix, the prefix counted once; 0 for no rows.
pub fn unique_tokens(rows: &[Row]) -> usize {
    match rows {
        [] => 0,
        [row] => row.ids.len(),
        _ => {
            let prefix = common_prefix(rows);
            prefix + rows.iter().map(|r| r.ids.len() - prefix).sum::<usize>()
        }
    }
}

/// Length of the longest common prefix of the rows' ids.
pub fn common_prefix(rows: &[Row]) -> usize {
    let Some((first, rest)) = rows.split_first() else { return 0 };
    rest.iter().fold(first.ids.len(), |len, row| first.ids[..len].iter().zip(&row.ids).take_while(|(a, b)| a == b).count())
}
