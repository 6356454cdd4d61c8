//! Prompt rows and answer slots: the state-first plain layout of decider-ai 1.10.0
//! (`prompt_fast.build_rows`, `systemone.plan_rows` in decider-ai 1.10.0).
//!
//! A row is `encode("Context:\n" + state)[:cap]` followed by one question piece per question;
//! pieces are tokenized on their own (BPE never merges across a piece boundary). The slot of a
//! question is the last token of its piece, the ` (` of `Answer: (`.

use std::sync::LazyLock;

use regex::Regex;

use crate::error::DeciderError;
use crate::plan_budget::{MAX_TOKEN_BYTES, Meter};
use crate::python_json::{Json, JsonMap};
use crate::question::{AnswerType, RenderedQuestion, render_question, strings_heap_bytes};
use crate::state::{StatePrefix, render_state_prefix, text_prefix};
use crate::tokenizer::MAX_OPTIONS;

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
        questions_heap_bytes(&self.questions) + self.rows.iter().map(Row::heap_bytes).sum::<usize>()
    }
}

/// About the bytes planned questions hold on the heap.
fn questions_heap_bytes(questions: &[PlannedQuestion]) -> usize {
    questions.iter().map(|q| size_of::<PlannedQuestion>() + q.id.len() + q.question.heap_bytes()).sum()
}

impl Row {
    /// About the bytes the row holds on the heap: its ids and per-slot entries.
    pub fn heap_bytes(&self) -> usize {
        size_of::<Row>() + ids_bytes(self.ids.len()) + self.slots.len() * SLOT_BYTES
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
/// the rows, tokenizing through `meter` (which asks its budget first).
pub fn plan(meter: &mut Meter, state: &Json, questions: &JsonMap, options: PlanOptions) -> Result<Plan, DeciderError> {
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
    let entry_bytes =
        |(text, options, _): &RowQuestion| size_of::<RowQuestion>() + text.len() + strings_heap_bytes(options);
    meter.hold(questions_heap_bytes(&planned) + entries.iter().map(entry_bytes).sum::<usize>())?;

    let context = capped_encode(meter, options.max_state_tokens, |bytes| render_state_prefix(state, bytes))?;
    meter.hold(ids_bytes(context.len()))?;
    // Packed, a request without questions is still one (slotless) row, as in the reference.
    let rows = if options.independent {
        entries.iter().map(|entry| row(meter, &context, std::slice::from_ref(entry))).collect::<Result<_, _>>()?
    } else {
        vec![row(meter, &context, &entries)?]
    };
    Ok(Plan { questions: planned, rows, context_len: context.len() })
}

/// A question as one row sees it: text, option texts, answer type.
pub type RowQuestion = (String, Vec<String>, AnswerType);

/// The row `context` + one piece per question (numbered when there are several), held in
/// `meter`'s budget until planning ends.
pub fn row(meter: &mut Meter, context: &[u32], questions: &[RowQuestion]) -> Result<Row, DeciderError> {
    let multi = questions.len() > 1;
    let mut pieces = Vec::with_capacity(questions.len());
    for (k, (text, options, _)) in questions.iter().enumerate() {
        let piece = question_piece(meter, text, options, k, multi)?;
        meter.hold(ids_bytes(piece.len()) + size_of::<Vec<u32>>())?;
        pieces.push(piece);
    }
    // Allocated once at its length, so that it holds what `Row::heap_bytes` says.
    let len = context.len() + pieces.iter().map(Vec::len).sum::<usize>();
    meter.hold(size_of::<Row>() + ids_bytes(len) + questions.len() * SLOT_BYTES)?;
    let n = questions.len();
    let mut row = Row {
        ids: Vec::with_capacity(len),
        slots: Vec::with_capacity(n),
        types: Vec::with_capacity(n),
        nopts: Vec::with_capacity(n),
    };
    row.ids.extend_from_slice(context);
    for (piece, (_, options, kind)) in pieces.into_iter().zip(questions) {
        row.ids.extend(piece);
        row.slots.push(row.ids.len() - 1);
        row.types.push(*kind);
        row.nopts.push(options.len());
    }
    Ok(row)
}

/// Bytes of `n` token ids.
fn ids_bytes(n: usize) -> usize {
    n * size_of::<u32>()
}

/// Bytes a row holds per slot (its slot, answer type and option count).
const SLOT_BYTES: usize = size_of::<usize>() * 2 + size_of::<AnswerType>();

/// `encode("Context:\n" + state)[:cap]` of a text state.
pub fn context_ids(meter: &mut Meter, state: &str, cap: usize) -> Result<Vec<u32>, DeciderError> {
    capped_encode(meter, cap, |bytes| text_prefix(state, bytes))
}

/// Bytes of state rendered per token of the cap at first; doubled while too few tokens come out.
const FIRST_BYTES_PER_TOKEN: usize = 8;

/// Tokens past the cap that a prefix cut where the tokenizer's pre-split may not end a piece
/// must give before its first `cap` tokens are taken (see [`capped_encode`]).
const UNSAFE_CUT_MARGIN: usize = 256;

/// `encode("Context:\n" + state)[:cap]`, from `state_prefix(n)`, the first `n` bytes of the
/// rendered state: only a prefix proportional to `cap` is rendered and tokenized, so a huge state
/// costs no more memory than one at the cap.
///
/// The prefix is cut at a *safe cut*: a point after a letter, mark or number and before a
/// character that is neither a letter nor a mark. There the tokenizer's pre-split
/// (`[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|...`) always ends a piece and starts the next, and NFC
/// composes nothing across it, so the tokens before the cut are the same whatever follows: the
/// result equals tokenizing the whole state. A prefix whose text after its last safe cut is one
/// long run the pre-split cannot break (a run of one letter, of symbols) gives too few tokens
/// before that cut; then the whole prefix is tokenized, and taken when it gives at least
/// [`UNSAFE_CUT_MARGIN`] tokens past the cap: only the tokens next to the cut could differ from
/// the whole state's, and those are dropped. So the text tokenized at once stays within about
/// the bytes `cap + 256` tokens span (at most `(cap + 256) x 512`).
fn capped_encode(
    meter: &mut Meter,
    cap: usize,
    state_prefix: impl Fn(usize) -> StatePrefix,
) -> Result<Vec<u32>, DeciderError> {
    const HEAD: &str = "Context:\n";
    let mut budget = cap.saturating_mul(FIRST_BYTES_PER_TOKEN).max(1024);
    loop {
        let prefix = state_prefix(budget);
        let text = format!("{HEAD}{}", prefix.text);
        let last_try =
            prefix.complete || budget >= cap.saturating_add(UNSAFE_CUT_MARGIN).saturating_mul(MAX_TOKEN_BYTES);
        let cut = if last_try { text.len() } else { safe_cut(&text) };
        let mut ids = if cut > HEAD.len() || last_try { meter.encode_prefix(&text[..cut])? } else { Vec::new() };
        if ids.len() >= cap || last_try {
            ids.truncate(cap);
            return Ok(ids);
        }
        // The text after the last safe cut is most of the prefix: one run the pre-split cannot break.
        if text.len() - cut > text.len() / 2 {
            drop(ids);
            let mut ids = meter.encode_prefix(&text)?;
            if ids.len() >= cap.saturating_add(UNSAFE_CUT_MARGIN) {
                ids.truncate(cap);
                return Ok(ids);
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
pub fn question_piece(
    meter: &mut Meter,
    text: &str,
    options: &[String],
    k: usize,
    multi: bool,
) -> Result<Vec<u32>, DeciderError> {
    let number = if multi { format!(" {}", k + 1) } else { String::new() };
    let head = format!("\n\nQuestion{number}: {text}\nOptions:");
    let tail = format!("\nAnswer{number}: (");
    if options.len() <= NARROW {
        let lines: String = options.iter().zip('A'..='J').map(|(o, letter)| format!("\n({letter}) {o}")).collect();
        return meter.encode(&format!("{head}{lines}{tail}"));
    }
    debug_assert!(options.len() <= MAX_OPTIONS, "render_question caps options");
    let labels = meter.tokenizer().labels();
    // Every part tokenized and held first, so that the piece is allocated once at its length.
    let mut parts = Vec::with_capacity(options.len() + 2);
    for text in std::iter::once(head).chain(options.iter().map(|option| format!(") {option}"))).chain([tail]) {
        let ids = meter.encode(&text)?;
        meter.hold(ids_bytes(ids.len()) + size_of::<Vec<u32>>())?;
        parts.push(ids);
    }
    let per_label = labels.open_ids.len() + 1;
    let len = parts.iter().map(Vec::len).sum::<usize>() + options.len() * per_label;
    meter.hold(ids_bytes(len))?;
    let mut piece = Vec::with_capacity(len);
    let (head, rest) = parts.split_first().expect("a head");
    let (tail, options) = rest.split_last().expect("a tail");
    piece.extend(head);
    for (option, label) in options.iter().zip(&labels.ids) {
        piece.extend(&labels.open_ids);
        piece.push(*label);
        piece.extend(option);
    }
    piece.extend(tail);
    Ok(piece)
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
        let tokenizer = crate::Tokenizer::test_tokenizer();
        let texts = [
            "The fox, it's said, JUMPS over 12 lazy dogs; then naps.\n\n  Then 3.14159 -x",
            "我们今天讨论的是一个很长的句子。没有空格，也没有数字！只有汉字",
            "cafe\u{301} na\u{308}ive e\u{301}le\u{300}ve \u{1100}\u{1161}\u{11a8}\u{1102}\u{1165}x",
            "👍🏽 ok👌 🎉🎉 fine... {\"_index\": 7, \"value\": [1, 2.5e-07]}, ---==>> 'll 'VE",
            "a  \n\n   \t b\r\n  \n c\u{a0}\u{3000}d\u{1c}e  ",
        ];
        for text in texts {
            let whole = tokenizer.encode(text).unwrap();
            for (n, _) in text.char_indices().skip(1) {
                let cut = safe_cut(&text[..n]);
                let ids = tokenizer.encode(&text[..cut]).unwrap();
                assert_eq!(ids[..], whole[..ids.len()], "{text:?} cut at byte {cut} (prefix of {n} bytes)");
            }
        }
    }
}
