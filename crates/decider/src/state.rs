//! The state as the prompt shows it (`systemone.render_state`): a string as it
//! is, any other JSON as Python's `json.dumps` of it with long lists annotated by position.

use crate::python_json::{Bounded, Json, write_json};

/// Lists at least this long get an `_index` on every element (`annotate_indices`): an object
/// element `v` becomes `{"_index": i, **v}`, anything else `{"_index": i, "value": v}`, so a path
/// like `records[47]` is a lookup for the model rather than a count.
pub const ANNOTATE_MIN: usize = 8;

/// The state text after `Context:\n`.
pub fn render_state(state: &Json) -> String {
    render_state_prefix(state, usize::MAX).text
}

/// The first bytes of a rendered state.
pub struct StatePrefix {
    /// At most the requested bytes, cut on a character boundary.
    pub text: String,
    /// Whether `text` is the whole rendered state.
    pub complete: bool,
}

/// The first `max_bytes` bytes of [`render_state`]'s text, written without rendering the rest:
/// the work and memory are bounded by `max_bytes`, not by the state.
pub fn render_state_prefix(state: &Json, max_bytes: usize) -> StatePrefix {
    match state {
        Json::Str(s) => text_prefix(s, max_bytes),
        other => {
            let mut out = Bounded::new(max_bytes);
            let complete = write_json(other, &mut out, ANNOTATE_MIN).is_ok();
            StatePrefix { text: out.text, complete }
        }
    }
}

/// The first `max_bytes` bytes of a text state.
pub fn text_prefix(text: &str, max_bytes: usize) -> StatePrefix {
    let mut out = Bounded::new(max_bytes);
    let complete = out.push_str(text).is_ok();
    StatePrefix { text: out.text, complete }
}
