//! The fields of a `/v1/systemone` body (the reference's `S1Req`), with pydantic's 422 entries
//! for fields of the wrong type.

use axum::http::StatusCode;
use decider::SystemOneRequest;
use decider::python_json::{Bounded, Json, write_json};
use serde_json::{Value, json};

use super::error::ApiError;

/// One entry of FastAPI's list-shaped 422 `detail`.
pub(super) fn field_error(kind: &str, loc: &[Value], msg: &str, input: &Json) -> Value {
    let mut loc_all = vec![json!("body")];
    loc_all.extend_from_slice(loc);
    json!({"type": kind, "loc": loc_all, "msg": msg, "input": echoed(input)})
}

/// Bytes of JSON an input is echoed in a 422 with at most. A refused body is echoed after its
/// memory reservation is gone, and escaping can make it six times longer: past this it is
/// replaced by a note of its size (FastAPI echoes it whole). The size is measured as Python
/// writes the JSON (a space after each `,` and `:`, so about the echo's size or more). The echo
/// is JSON as serde_json writes it: an integer past 64 bits as the nearest float, `NaN` or
/// `Infinity` as `null` (FastAPI cannot write those and answers 500 instead).
const ECHO_LIMIT: usize = 64 << 10;

fn echoed(input: &Json) -> Value {
    // Written only up to the limit, so a long input is neither written nor copied whole.
    match write_json(input, &mut Bounded::new(ECHO_LIMIT), usize::MAX) {
        Ok(()) => input.to_serde(),
        Err(_) => Value::String(format!("(more than {ECHO_LIMIT} bytes of JSON, not echoed)")),
    }
}

/// A 422 of one or more `field_error` entries.
pub(super) fn invalid_fields(errors: Vec<Value>) -> ApiError {
    ApiError(StatusCode::UNPROCESSABLE_ENTITY, Value::Array(errors))
}

/// pydantic's 422 for a model body that is not an object (`input` is what it got).
pub(super) fn not_an_object(input: &Json) -> ApiError {
    let msg = "Input should be a valid dictionary or object to extract fields from";
    invalid_fields(vec![field_error("model_attributes_type", &[], msg, input)])
}

/// pydantic's lax boolean: `true`/`false`, 0 and 1 (also as 0.0 and 1.0), and the strings it
/// knows; otherwise its error type and message for the input.
fn lax_bool(value: &Json) -> Result<bool, (&'static str, &'static str)> {
    const PARSING: (&str, &str) = ("bool_parsing", "Input should be a valid boolean, unable to interpret input");
    const TYPE: (&str, &str) = ("bool_type", "Input should be a valid boolean");
    match value {
        Json::Bool(b) => Ok(*b),
        Json::Int(_) | Json::Float(_) => match value.as_f64() {
            Some(0.0) => Ok(false),
            Some(1.0) => Ok(true),
            // A whole number is read as an integer, which is no boolean; a fraction is no number it reads.
            Some(x) if x.fract() == 0.0 => Err(PARSING),
            _ => Err(TYPE),
        },
        Json::Str(s) => match s.trim().to_ascii_lowercase().as_str() {
            "1" | "on" | "t" | "true" | "y" | "yes" => Ok(true),
            "0" | "off" | "f" | "false" | "n" | "no" => Ok(false),
            _ => Err(PARSING),
        },
        _ => Err(TYPE),
    }
}

/// `S1Req`: the request, and whether it carries assets (images). The body is consumed: its
/// state moves into the request, never copied. Errors are reported as pydantic does: every
/// field's, in the order the model declares them (`state`, `questions`, `model`,
/// `independent`, `layout`).
pub(super) fn systemone_request(body: Json, max_state_tokens: usize) -> Result<(SystemOneRequest, bool), ApiError> {
    let mut fields = match body {
        Json::Dict(fields) => fields,
        other => return Err(not_an_object(&other)),
    };
    // (field, error type, message, whether the input is the whole body); filled in order.
    let mut errors: Vec<(&str, &str, &str, bool)> = Vec::new();
    if !fields.contains_key("state") {
        errors.push(("state", "missing", "Field required", true));
    }
    match fields.get("questions") {
        None => errors.push(("questions", "missing", "Field required", true)),
        Some(q) if !q.is_dict() => errors.push(("questions", "dict_type", "Input should be a valid dictionary", false)),
        Some(_) => {}
    }
    let string_field = |name| {
        fields.get(name).is_some_and(|v: &Json| !v.is_null() && !v.is_str()).then_some((
            name,
            "string_type",
            "Input should be a valid string",
            false,
        ))
    };
    errors.extend(string_field("model"));
    let independent = match fields.get("independent").map(lax_bool) {
        None => true,
        Some(Ok(independent)) => independent,
        Some(Err((kind, msg))) => {
            errors.push(("independent", kind, msg, false));
            true
        }
    };
    errors.extend(string_field("layout"));
    let has_assets = match fields.get("assets") {
        None | Some(Json::Null) => false,
        Some(Json::Dict(a)) => !a.is_empty(),
        Some(_) => {
            errors.push(("assets", "dict_type", "Input should be a valid dictionary", false));
            false
        }
    };
    if !errors.is_empty() {
        let body = Json::Dict(fields);
        let entries = errors
            .into_iter()
            .map(|(field, kind, msg, whole)| {
                field_error(
                    kind,
                    &[json!(field)],
                    msg,
                    if whole { &body } else { body.get(field).unwrap_or(&Json::Null) },
                )
            })
            .collect();
        return Err(invalid_fields(entries));
    }
    let (Some(state), Some(Json::Dict(questions))) = (fields.shift_remove("state"), fields.shift_remove("questions"))
    else {
        unreachable!("both fields were checked above")
    };
    let mut request = SystemOneRequest::new(state, questions);
    request.independent = independent;
    request.max_state_tokens = max_state_tokens;
    Ok((request, has_assets))
}
