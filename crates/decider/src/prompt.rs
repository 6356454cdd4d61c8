//! Prompt rows and answer slots: the state-first plain layout of decider-ai 1.10.0
//! (`prompt_fast.build_rows`, `systemone.plan_rows` in decider-ai 1.10.0).
//!
//! A row is `encode("Context:\n" + state)[:cap]` followed by one question piece per question;
//! pieces are tokenized on their own (BPE never merges across a piece boundary). The slot of a
//! question is the last token of its piece, the ` (` of `Answer: (`.

use std::sync::LazyLock;

use regex::Regex;

use crate::error::DeciderError;
use crate::python_json::{Json, JsonMap};
use crate::question::{AnswerType, RenderedQuestion, render_question};
use crate::state::{StatePrefix, render_state_prefix, text_prefix};
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

    /// About the bytes the plan holds on the heap (what a server holds while it is queued).
    pub fn heap_bytes(&self) -> usize {
        let questions: usize =
            self.questions.iter().map(|q| size_of::<PlannedQuestion>() + q.id.len() + q.question.heap_bytes()).sum();
        questions + self.rows.iter().map(Row::heap_bytes).sum::<usize>()
    }
}

impl Row {
    /// About the bytes the row holds on the heap: its ids and per-slot entries.
    pub fn heap_bytes(&self) -> usize {
        size_of::<Row>()
            + self.ids.len() * size_of::<u32>()
            + self.slots.len() * (size_of::<usize>() * 2 + size_of::<AnswerType>())
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
    /// Options that read like "none of the above" shown as "not listed here" ([`neutralize`]):
    /// the library's path with the model's `neutralize_none`; the server's never does.
    pub neutralize_none: bool,
}

impl Default for PlanOptions {
    fn default() -> Self {
        Self { independent: true, isolated_levels: false, max_state_tokens: MAX_STATE_TOKENS, neutralize_none: false }
    }
}

/// `infer.neutralize_options` for one option: "none of the above"-like options read as
/// "not listed here", the phrasing the model was trained to treat neutrally.
pub fn neutralize(option: &str) -> String {
    let key = option.trim().to_lowercase();
    if key.starts_with("none of the above") || matches!(key.as_str(), "none" | "n/a" | "none of these") {
        "not listed here".into()
    } else {
        option.into()
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
pub fn plan(
    tokenizer: &Tokenizer,
    state: &Json,
    questions: &JsonMap,
    options: PlanOptions,
) -> Result<Plan, DeciderError> {
    let mut rendered = Vec::with_capacity(questions.len());
    for (id, spec) in questions {
        let spec = spec
            .as_dict()
            .ok_or_else(|| DeciderError::InvalidQuestion(format!("question {id:?} must be an object")))?;
        rendered.push((id.clone(), render_question(spec)?));
    }
    let isolated = options.isolated_levels && options.independent;

    // Each question becomes one (text, options shown, type) entry, or one per isolated level.
    let shown = |texts: &[String]| -> Vec<String> {
        texts.iter().map(|o| if options.neutralize_none { neutralize(o) } else { o.clone() }).collect()
    };
    let mut entries: Vec<RowQuestion> = Vec::new();
    let mut planned = Vec::with_capacity(rendered.len());
    for (id, question) in rendered {
        let first_slot = entries.len();
        let isolated_levels = isolated && question.kind == AnswerType::Score && question.isolated;
        if isolated_levels {
            for level in &question.legend {
                entries.push((
                    isolated_level_question(&question.text, level),
                    shown(&["no".into(), "yes".into()]),
                    AnswerType::Score,
                ));
            }
        } else {
            entries.push((question.text.clone(), shown(&question.options), question.kind));
        }
        let slot_count = entries.len() - first_slot;
        planned.push(PlannedQuestion { id, question, first_slot, slot_count, isolated_levels });
    }

    let context = capped_encode(tokenizer, options.max_state_tokens, |bytes| render_state_prefix(state, bytes));
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

/// `encode("Context:\n" + state)[:cap]` of a text state.
pub fn context_ids(tokenizer: &Tokenizer, state: &str, cap: usize) -> Vec<u32> {
    capped_encode(tokenizer, cap, |bytes| text_prefix(state, bytes))
}

/// Bytes of state rendered per token of the cap at first; doubled while too few tokens come out.
const FIRST_BYTES_PER_TOKEN: usize = 8;

/// No token of the Qwen3.5 vocabulary is longer (128 characters, at most 512 bytes); see
/// [`capped_encode`].
const MAX_TOKEN_BYTES: usize = 512;

/// `encode("Context:\n" + state)[:cap]`, from `state_prefix(n)`, the first `n` bytes of the
/// rendered state: only a prefix proportional to `cap` is rendered and tokenized, so a huge state
/// costs no more memory than one at the cap.
///
/// The prefix is cut at a *safe cut*: a point after a letter, mark or number and before a
/// character that is neither a letter nor a mark. There the tokenizer's pre-split
/// (`[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|...`) always ends a piece and starts the next, and NFC
/// composes nothing across it, so the tokens before the cut are the same whatever follows: the
/// result equals tokenizing the whole state. Only a state with no safe cut in its first
/// `cap x 512` bytes (one unbroken run of letters) is cut at that length instead.
fn capped_encode(tokenizer: &Tokenizer, cap: usize, state_prefix: impl Fn(usize) -> StatePrefix) -> Vec<u32> {
    const HEAD: &str = "Context:\n";
    let mut budget = cap.saturating_mul(FIRST_BYTES_PER_TOKEN).max(1024);
    loop {
        let prefix = state_prefix(budget);
        let text = format!("{HEAD}{}", prefix.text);
        let last_try = prefix.complete || budget >= cap.saturating_mul(MAX_TOKEN_BYTES);
        let cut = if last_try { text.len() } else { safe_cut(&text) };
        if cut > HEAD.len() || last_try {
            let mut ids = tokenizer.encode(&text[..cut]);
            if ids.len() >= cap || last_try {
                ids.truncate(cap);
                return ids;
            }
        }
        budget = budget.saturating_mul(2);
    }
}

/// The last safe cut of `text` (see [`capped_encode`]), or 0.
fn safe_cut(text: &str) -> usize {
    static LETTER_OR_MARK: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^[\p{L}\p{M}]$").expect("valid regex"));
    static LETTER_MARK_OR_NUMBER: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"^[\p{L}\p{M}\p{N}]$").expect("valid regex"));
    let is = |re: &Regex, c: char| re.is_match(c.encode_utf8(&mut [0; 4]));
    let mut after: Option<char> = None;
    for (i, c) in text.char_indices().rev() {
        if let Some(next) = after
            && is(&LETTER_MARK_OR_NUMBER, c)
            && !is(&LETTER_OR_MARK, next)
        {
            return i + c.len_utf8();
        }
        after = Some(c);
    }
    0
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
    rest.iter()
        .fold(first.ids.len(), |len, row| first.ids[..len].iter().zip(&row.ids).take_while(|(a, b)| a == b).count())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The claim [`capped_encode`] rests on: the tokens of a text cut at a safe cut are the first
    /// tokens of the whole text, for a cut found in every prefix of texts that stress it.
    #[test]
    fn tokens_before_a_safe_cut_do_not_depend_on_what_follows() {
        let tokenizer = Tokenizer::test_tokenizer();
        let texts = [
            "The fox, it's said, JUMPS over 12 lazy dogs; then naps.\n\n  Then 3.14159 -x",
            "我们今天讨论的是一个很长的句子。没有空格，也没有数字！只有汉字",
            "cafe\u{301} na\u{308}ive e\u{301}le\u{300}ve \u{1100}\u{1161}\u{11a8}\u{1102}\u{1165}x",
            "👍🏽 ok👌 🎉🎉 fine... {\"_index\": 7, \"value\": [1, 2.5e-07]}, ---==>> 'll 'VE",
            "a  \n\n   \t b\r\n  \n c\u{a0}\u{3000}d\u{1c}e  ",
        ];
        for text in texts {
            let whole = tokenizer.encode(text);
            for (n, _) in text.char_indices().skip(1) {
                let cut = safe_cut(&text[..n]);
                let ids = tokenizer.encode(&text[..cut]);
                assert_eq!(ids[..], whole[..ids.len()], "{text:?} cut at byte {cut} (prefix of {n} bytes)");
            }
        }
    }
}
