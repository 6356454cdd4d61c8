//! The state as the prompt shows it (`systemone.render_state`): a string as it
//! is, any other JSON as Python's `json.dumps` of it with long lists annotated by position.

use serde_json::{Map, Value};

use crate::python_json::dumps;

/// Lists at least this long get an `_index` on every element.
pub const ANNOTATE_MIN: usize = 8;

/// The state text after `Context:\n`.
pub fn render_state(state: &Value) -> String {
    match state {
        Value::String(s) => s.clone(),
        other => dumps(&annotate_indices(other)),
    }
}

/// `annotate_indices`: every list of [`ANNOTATE_MIN`] or more elements, at any depth, writes each
/// element's position into it, so a path like `records[47]` is a lookup for the model rather
/// than a count: an object element `v` becomes `{"_index": i, **v}` (so `_index` comes first
/// unless `v` has its own), anything else `{"_index": i, "value": v}`.
pub fn annotate_indices(value: &Value) -> Value {
    match value {
        Value::Array(items) if items.len() >= ANNOTATE_MIN => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, item)| {
                    let mut annotated = Map::new();
                    annotated.insert("_index".into(), Value::from(i));
                    match annotate_indices(item) {
                        // `{"_index": i, **v}`: a key `_index` in v overrides the value, in place.
                        Value::Object(fields) => annotated.extend(fields),
                        other => {
                            annotated.insert("value".into(), other);
                        }
                    }
                    Value::Object(annotated)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(annotate_indices).collect()),
        Value::Object(fields) => Value::Object(fields.iter().map(|(k, v)| (k.clone(), annotate_indices(v))).collect()),
        other => other.clone(),
    }
}
