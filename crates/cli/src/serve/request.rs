//! The fields of a `/v1/systemone` body (the reference's `S1Req`), with pydantic's 422 entries
//! for fields of the wrong type.

use axum::http::StatusCode;
use decider::SystemOneRequest;
use serde_json::{Value, json};

use super::ApiError;

/// One entry of FastAPI's list-shaped 422 `detail`.
pub(super) fn field_error(kind: &str, loc: &[Value], msg: &str, input: &Value) -> Value {
    let mut loc_all = vec![json!("body")];
    loc_all.extend_from_slice(loc);
    json!({"type": kind, "loc": loc_all, "msg": msg, "input": input})
}

/// A 422 of one or more `field_error` entries.
pub(super) fn invalid_fields(errors: Vec<Value>) -> ApiError {
    ApiError(StatusCode::UNPROCESSABLE_ENTITY, Value::Array(errors))
}

/// pydantic's lax boolean.
fn lax_bool(value: &Value) -> Option<bool> {
    match value {
        Value::Bool(b) => Some(*b),
        Value::Number(n) if n.as_f64() == Some(1.0) => Some(true),
        Value::Number(n) if n.as_f64() == Some(0.0) => Some(false),
        Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
            "1" | "on" | "t" | "true" | "y" | "yes" => Some(true),
            "0" | "off" | "f" | "false" | "n" | "no" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

/// `S1Req`: the request, and whether it carries assets (images). The body is consumed: its
/// state moves into the request, never copied.
pub(super) fn systemone_request(body: Value, max_state_tokens: usize) -> Result<(SystemOneRequest, bool), ApiError> {
    let mut fields = match body {
        Value::Object(fields) => fields,
        other => {
            let msg = "Input should be a valid dictionary or object to extract fields from";
            return Err(invalid_fields(vec![field_error("model_attributes_type", &[], msg, &other)]));
        }
    };
    let missing: Vec<&str> = ["state", "questions"].into_iter().filter(|required| !fields.contains_key(*required)).collect();
    let mut errors = Vec::new();
    if let Some(other) = fields.get("questions").filter(|q| !q.is_object()) {
        errors.push(field_error("dict_type", &[json!("questions")], "Input should be a valid dictionary", other));
    }
    for name in ["model", "layout"] {
        if let Some(v) = fields.get(name).filter(|v| !v.is_null() && !v.is_string()) {
            errors.push(field_error("string_type", &[json!(name)], "Input should be a valid string", v));
        }
    }
    let independent = match fields.get("independent") {
        None => true,
        Some(v) => lax_bool(v).unwrap_or_else(|| {
            errors.push(field_error("bool_parsing", &[json!("independent")], "Input should be a valid boolean, unable to interpret input", v));
            true
        }),
    };
    let has_assets = match fields.get("assets") {
        None | Some(Value::Null) => false,
        Some(Value::Object(a)) => !a.is_empty(),
        Some(other) => {
            errors.push(field_error("dict_type", &[json!("assets")], "Input should be a valid dictionary", other));
            false
        }
    };
    if !missing.is_empty() || !errors.is_empty() {
        // pydantic reports missing fields first, each with the whole body as its input.
        let body = Value::Object(fields);
        let mut all: Vec<Value> = missing.iter().map(|field| field_error("missing", &[json!(field)], "Field required", &body)).collect();
        all.append(&mut errors);
        return Err(invalid_fields(all));
    }
    let (Some(state), Some(Value::Object(questions))) = (fields.remove("state"), fields.remove("questions")) else {
        unreachable!("both fields were checked above")
    };
    let mut request = SystemOneRequest::new(state, questions);
    request.independent = independent;
    request.max_state_tokens = max_state_tokens;
    Ok((request, has_assets))
}
