//! A JSON value as the Python object `json.loads` makes of it: integers of any size (`int`),
//! floats including `nan` and `±inf` (`float`), objects keeping their keys' first order with
//! the last value of a repeated key (`dict`). `serde_json::Value` holds neither big integers nor
//! non-finite floats, and reads `-0` as a float, so a request read with it renders a different
//! prompt than the reference's.

use indexmap::IndexMap;

/// A JSON object: keys in the order they first appear.
pub type JsonMap = IndexMap<String, Json>;

/// A JSON value with Python's number semantics.
#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    /// An integer of any size.
    Int(Int),
    Float(f64),
    Str(String),
    List(Vec<Json>),
    Dict(JsonMap),
}

/// An integer of any size, kept as its decimal digits: a prompt only ever prints it, and
/// `int(text)` then `str(i)` gives back the digits of a JSON integer (whose grammar has no
/// leading zeros and no `+`) except for `-0`, which is `0`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Int(String);

impl Int {
    /// The integer a JSON integer literal spells (`-?(0|[1-9][0-9]*)`).
    pub fn from_literal(literal: &str) -> Self {
        debug_assert!(literal.trim_start_matches('-').bytes().all(|b| b.is_ascii_digit()));
        Self(if literal == "-0" { "0".into() } else { literal.into() })
    }

    /// `str(i)`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn as_i64(&self) -> Option<i64> {
        self.0.parse().ok()
    }

    /// The nearest double, ±inf past the range (where Python's `float(i)` raises `OverflowError`).
    pub fn as_f64(&self) -> f64 {
        self.0.parse().expect("an integer's digits parse as a float")
    }

    pub fn is_zero(&self) -> bool {
        self.0 == "0"
    }
}

impl From<i64> for Int {
    fn from(i: i64) -> Self {
        Self(i.to_string())
    }
}

impl Json {
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_dict(&self) -> Option<&JsonMap> {
        match self {
            Self::Dict(map) => Some(map),
            _ => None,
        }
    }

    /// `float(v)` of an `int` or `float`; `None` for anything else.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Self::Int(i) => Some(i.as_f64()),
            Self::Float(x) => Some(*x),
            _ => None,
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self, Self::Null)
    }

    pub fn is_str(&self) -> bool {
        matches!(self, Self::Str(_))
    }

    pub fn is_dict(&self) -> bool {
        matches!(self, Self::Dict(_))
    }

    /// A dict's value for `key`.
    pub fn get(&self, key: &str) -> Option<&Json> {
        self.as_dict()?.get(key)
    }

    /// The value, leaving `null` in its place.
    pub fn take(&mut self) -> Json {
        std::mem::replace(self, Json::Null)
    }

    /// The nearest `serde_json::Value`, for echoing a value in a JSON answer: integers beyond
    /// 64 bits become the nearest float and non-finite floats `null` (what serde_json writes
    /// for them), the only values it cannot hold.
    pub fn to_serde(&self) -> serde_json::Value {
        use serde_json::Value;
        match self {
            Json::Null => Value::Null,
            Json::Bool(b) => Value::Bool(*b),
            Json::Int(i) => match (i.as_i64(), i.as_str().parse::<u64>()) {
                (Some(i), _) => Value::from(i),
                (None, Ok(u)) => Value::from(u),
                (None, Err(_)) => Value::from(i.as_f64()),
            },
            Json::Float(x) => Value::from(*x),
            Json::Str(s) => Value::String(s.clone()),
            Json::List(items) => Value::Array(items.iter().map(Json::to_serde).collect()),
            Json::Dict(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), v.to_serde())).collect()),
        }
    }
}

/// What serde_json read is what Python reads, except integers it had to read as floats (past
/// 64 bits) and `-0`, which it reads as `-0.0`: a caller with such numbers parses the JSON text
/// with [`super::loads`] instead.
impl From<serde_json::Value> for Json {
    fn from(value: serde_json::Value) -> Self {
        use serde_json::Value;
        match value {
            Value::Null => Json::Null,
            Value::Bool(b) => Json::Bool(b),
            Value::Number(n) => match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => Json::Int(Int::from(i)),
                (None, Some(u)) => Json::Int(Int(u.to_string())),
                _ => Json::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            Value::String(s) => Json::Str(s),
            Value::Array(items) => Json::List(items.into_iter().map(Json::from).collect()),
            Value::Object(map) => Json::Dict(map.into_iter().map(|(k, v)| (k, Json::from(v))).collect()),
        }
    }
}

impl From<&str> for Json {
    fn from(s: &str) -> Self {
        Json::Str(s.into())
    }
}

impl From<String> for Json {
    fn from(s: String) -> Self {
        Json::Str(s)
    }
}
