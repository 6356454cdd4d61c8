//! The memory planning a request takes, asked of the caller's budget before it is taken.
//!
//! Tokenizing is the costly part: the tokenizer allocates many times the bytes of the text it
//! encodes at once (its pre-split pieces, BPE symbols and merge queue), so a server that bounds
//! its memory must reserve that before it tokenizes, from the text's length. [`Meter`] does so
//! for every text it encodes, and for the rows it keeps.

use crate::error::DeciderError;
use crate::tokenizer::Tokenizer;

/// Bytes the tokenizer allocates at most while it encodes a text, per byte of the text (the
/// returned ids included). Its cost is per token (each token's id, string, offsets and masks in
/// the tokenizer's `Encoding`), and a byte-level BPE token is at least one byte, so the costliest
/// text is one token per byte: a run of digits (each its own pre-split piece) measured 486 bytes
/// per byte at a length just past a power of two, where the tokenizer's vectors have grown to
/// twice what they hold (`tests/working_memory.rs`, `tokenizing_stays_within_its_bound`, fails
/// if a text shape exceeds this; prose measures about 140).
pub const TOKENIZER_BYTES_PER_BYTE: usize = 512;

/// No token of the Qwen3.5 vocabulary is longer (128 characters, at most 512 bytes): a text of
/// `n` bytes is at least `n / 512` tokens.
pub const MAX_TOKEN_BYTES: usize = 512;

/// What planning asks of its caller before it allocates.
pub trait PlanBudget {
    /// Planning is about to hold `peak_bytes` in all: what it keeps so far and the step it is
    /// about to take (a budget holds the largest it was asked for, since steps free what they
    /// took before the next). `row_text_bytes` is the length of the text
    /// it is about to tokenize when every token of it goes into one row (a question's piece; 0
    /// for a state's prefix, which is cut at its cap): a budget may refuse a text that must be
    /// more tokens than a row may hold (at least `row_text_bytes / MAX_TOKEN_BYTES`) before it
    /// is tokenized. An error stops planning and is its result.
    fn reserve(&mut self, peak_bytes: usize, row_text_bytes: usize) -> Result<(), DeciderError>;
}

/// A budget that refuses nothing and keeps the most planning asked for: the memory a request's
/// planning needs, for a caller that sizes it without bounding it.
#[derive(Debug, Default)]
pub struct PeakAsked(pub usize);

impl PlanBudget for PeakAsked {
    fn reserve(&mut self, peak_bytes: usize, _row_text_bytes: usize) -> Result<(), DeciderError> {
        self.0 = self.0.max(peak_bytes);
        Ok(())
    }
}

/// Encodes texts and builds rows, asking a [`PlanBudget`] (if any) before each allocation.
pub struct Meter<'a> {
    tokenizer: &'a Tokenizer,
    budget: Option<&'a mut dyn PlanBudget>,
    /// Bytes of ids kept so far (the context and the rows built).
    held: usize,
}

impl<'a> Meter<'a> {
    /// Planning within `budget`.
    pub fn new(tokenizer: &'a Tokenizer, budget: &'a mut dyn PlanBudget) -> Self {
        Self { tokenizer, budget: Some(budget), held: 0 }
    }

    /// Planning that asks no budget (the library's own calls).
    pub fn unbounded(tokenizer: &'a Tokenizer) -> Self {
        Self { tokenizer, budget: None, held: 0 }
    }

    pub fn tokenizer(&self) -> &'a Tokenizer {
        self.tokenizer
    }

    /// `tokenizer.encode(text)` of a text whose tokens all go into one row, once the budget
    /// has room for it.
    pub fn encode(&mut self, text: &str) -> Result<Vec<u32>, DeciderError> {
        self.ask(self.tokenizing(text), text.len())?;
        self.tokenizer.encode(text)
    }

    /// `tokenizer.encode(text)` of a state's prefix, whose tokens are cut at a cap, once the
    /// budget has room for it.
    pub fn encode_prefix(&mut self, text: &str) -> Result<Vec<u32>, DeciderError> {
        self.ask(self.tokenizing(text), 0)?;
        self.tokenizer.encode(text)
    }

    /// The bytes held while `text` is tokenized.
    fn tokenizing(&self, text: &str) -> usize {
        self.held.saturating_add(text.len().saturating_mul(TOKENIZER_BYTES_PER_BYTE))
    }

    /// `bytes` more are kept until planning ends, once the budget has room for them.
    pub fn hold(&mut self, bytes: usize) -> Result<(), DeciderError> {
        self.held = self.held.saturating_add(bytes);
        self.ask(self.held, 0)
    }

    fn ask(&mut self, peak_bytes: usize, row_text_bytes: usize) -> Result<(), DeciderError> {
        match &mut self.budget {
            Some(budget) => budget.reserve(peak_bytes, row_text_bytes),
            None => Ok(()),
        }
    }
}
