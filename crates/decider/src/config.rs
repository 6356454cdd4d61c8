//! `decider_config.json` of a model folder: name, temperatures and prompt
//! switches, validated as decider-ai 1.10.0 validates them (`temperature.from_config`).

use std::path::Path;

use qwen35::model_file::{CONFIG_BYTES, read_bounded_text};

use crate::error::DeciderError;
use crate::python_json::{Json, JsonMap, loads, py_repr, py_str, py_truthy, py_type_name};
use crate::question::AnswerType;

const WHERE: &str = "decider_config.json";
const KEYS_TEXT: &str = "the keys are \"choice\", \"noul\" and \"score\" (a /decide \"bool\" field is \"noul\", a \"scale\" field is \"score\"; a /v1/systemone \"bool\" question is \"noul\")";

/// The state-first temperatures: one per answer type, or a function of the option count.
#[derive(Clone, Debug, PartialEq)]
pub enum Temperatures {
    /// `temperature_by_type[type]`, else `temperature`.
    ByType { default: f64, choice: Option<f64>, noul: Option<f64>, score: Option<f64> },
    /// `temperature_by_options`: T(n) = max(min, a + b ln max(n, 2)).
    ByOptions { a: f64, b: f64, min: f64 },
}

impl Temperatures {
    /// The temperature of an answer of type `kind` with `n_options` options.
    pub fn of(&self, kind: AnswerType, n_options: usize) -> f64 {
        match *self {
            Self::ByType { default, choice, noul, score } => match kind {
                AnswerType::Choice => choice,
                AnswerType::Noul => noul,
                AnswerType::Score => score,
            }
            .unwrap_or(default),
            Self::ByOptions { a, b, min } => min.max(a + b * (n_options.max(2) as f64).ln()),
        }
    }
}

/// What the runtime reads from `decider_config.json`.
#[derive(Clone, Debug, PartialEq)]
pub struct DeciderConfig {
    /// `"decider-" + str(version)`, `decider-dev` without a version.
    pub model_name: String,
    pub release_date: String,
    /// The `temperature` value (reported by `/health`).
    pub temperature: f64,
    pub temperatures: Temperatures,
    /// Score levels judged in rows of their own (v8+).
    pub isolated_levels: bool,
    /// Rewrite "none of the above"-like options (library and `/decide`, not `/v1/systemone`).
    pub neutralize_none: bool,
}

impl Default for DeciderConfig {
    /// A model folder without `decider_config.json` (a raw base model).
    fn default() -> Self {
        Self::from_value(&Json::Dict(JsonMap::new())).expect("the empty config is valid")
    }
}

impl DeciderConfig {
    /// Reads `decider_config.json` in `dir`; a folder without one gets the defaults.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Self, DeciderError> {
        let path = dir.as_ref().join(WHERE);
        if !path.exists() {
            return Ok(Self::default());
        }
        let text =
            read_bounded_text(&path, CONFIG_BYTES).map_err(|e| DeciderError::Io { path: path.clone(), source: e })?;
        Self::from_json(&text).map_err(|e| e.in_file(&path))
    }

    /// The `decider_config.json` beside GGUF file `gguf` (in its folder), which must be there: a
    /// GGUF file carries the model, not decider's settings.
    pub fn beside_gguf(gguf: &Path) -> Result<Self, DeciderError> {
        let dir = gguf.parent().filter(|dir| !dir.as_os_str().is_empty()).unwrap_or(Path::new("."));
        match dir.join(WHERE).is_file() {
            true => Self::from_dir(dir),
            false => Err(DeciderError::Config(format!(
                "{} has no {WHERE} beside it: a GGUF file holds the model but not decider's settings (option labels, temperatures, prompt layout); put the model's {WHERE} in {}",
                gguf.display(),
                dir.display()
            ))),
        }
    }

    /// Parses and validates the file's text.
    pub fn from_json(text: &str) -> Result<Self, DeciderError> {
        let value = loads(text.as_bytes()).map_err(|e| DeciderError::Config(format!("not valid JSON: {e}")))?;
        Self::from_value(&value)
    }

    /// Validates a parsed config.
    pub fn from_value(value: &Json) -> Result<Self, DeciderError> {
        let cfg = value.as_dict().ok_or_else(|| DeciderError::Config(format!("{WHERE} must be a JSON object")))?;
        check_layout(cfg)?;
        // The order of the reference's checks, so a config with several faults names the same one.
        let temperature =
            positive(cfg.get("temperature").unwrap_or(&Json::Float(1.0)), &format!("{WHERE} \"temperature\""))?;
        let per_type = by_type(cfg.get("temperature_by_type"), &format!("{WHERE} \"temperature_by_type\""))?;
        // Schema-first temperatures are not used here (no schema cache), but a config the
        // reference refuses is refused here too.
        by_type(cfg.get("temperature_schema_first_by_type"), &format!("{WHERE} \"temperature_schema_first_by_type\""))?;
        let by_options = by_options(cfg.get("temperature_by_options"), &format!("{WHERE} \"temperature_by_options\""))?;
        let temperatures = match by_options {
            Some(_) if cfg.get("temperature_by_type").and_then(Json::as_dict).is_some_and(|m| !m.is_empty()) => {
                return Err(DeciderError::Config(format!(
                    "{WHERE}: \"temperature_by_options\" and \"temperature_by_type\" cannot both be set"
                )));
            }
            Some((a, b, min)) => Temperatures::ByOptions { a, b, min },
            None => Temperatures::ByType {
                default: temperature,
                choice: per_type[0],
                noul: per_type[1],
                score: per_type[2],
            },
        };
        if let Some(t) = cfg.get("temperature_schema_first") {
            positive(t, &format!("{WHERE} \"temperature_schema_first\""))?;
        }
        Ok(Self {
            model_name: format!("decider-{}", cfg.get("version").map_or_else(|| "dev".to_string(), py_str)),
            release_date: cfg.get("release_date").map_or_else(|| "2026-09-17".to_string(), py_str),
            temperature,
            temperatures,
            isolated_levels: cfg.get("isolated_levels").is_some_and(py_truthy),
            neutralize_none: cfg.get("neutralize_none").is_none_or(py_truthy),
        })
    }

    /// Replaces `temperature` and switches the per-type map off (`Decider(temperature=...)`).
    pub fn with_temperature(mut self, temperature: f64) -> Result<Self, DeciderError> {
        let t = positive(&Json::Float(temperature), "temperature")?;
        self.temperature = t;
        self.temperatures = Temperatures::ByType { default: t, choice: None, noul: None, score: None };
        Ok(self)
    }
}

/// Only the plain layout is implemented; a chat-layout or unknown layout is refused rather
/// than read wrong.
fn check_layout(cfg: &JsonMap) -> Result<(), DeciderError> {
    let chat_template = cfg.get("chat_template") == Some(&Json::Bool(true));
    match cfg.get("layout") {
        None | Some(Json::Null) if !chat_template => Ok(()),
        Some(Json::Str(s)) if s == "plain" && !chat_template => Ok(()),
        Some(Json::Str(s)) if s == "plain" => Err(DeciderError::Config(format!(
            "{WHERE} says \"layout\": \"plain\" and \"chat_template\": true; these contradict each other"
        ))),
        Some(Json::Str(s)) if s == "chat" => Err(DeciderError::Config(format!(
            "{WHERE} names the chat prompt layout; this runtime reads only the plain layout of the released decider models"
        ))),
        None | Some(Json::Null) => Err(DeciderError::Config(format!(
            "{WHERE} sets \"chat_template\": true (the chat prompt layout); this runtime reads only the plain layout"
        ))),
        Some(other) => Err(DeciderError::Config(format!(
            "{WHERE} names the prompt layout {}; this runtime knows 'plain'",
            py_repr(other)
        ))),
    }
}

/// `temperature.positive`: a number, or a numeric string, finite and > 0.
fn positive(value: &Json, where_: &str) -> Result<f64, DeciderError> {
    let number = match value {
        Json::Int(_) | Json::Float(_) => value.as_f64(),
        Json::Str(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    match number {
        Some(t) if t.is_finite() && t > 0.0 => Ok(t),
        _ => Err(DeciderError::Config(format!("{where_} must be a finite number > 0, got {}", py_repr(value)))),
    }
}

/// `temperature.by_type`: `[choice, noul, score]`.
fn by_type(map: Option<&Json>, where_: &str) -> Result<[Option<f64>; 3], DeciderError> {
    let mut out = [None; 3];
    let map = match map {
        None | Some(Json::Null) => return Ok(out),
        Some(Json::Dict(map)) => map,
        Some(other) => {
            return Err(DeciderError::Config(format!(
                "{where_} must be a map {{answer type: temperature}}, got {}; {KEYS_TEXT}",
                py_type_name(other)
            )));
        }
    };
    for (key, value) in map {
        let slot = match key.as_str() {
            "choice" => 0,
            "noul" => 1,
            "score" => 2,
            _ => {
                return Err(DeciderError::Config(format!(
                    "{where_} has the unknown key {}; {KEYS_TEXT}",
                    py_repr(&Json::Str(key.clone()))
                )));
            }
        };
        let inner = format!("{where_}[{}]", py_repr(&Json::Str(key.clone())));
        if value.as_f64().is_none() {
            return Err(DeciderError::Config(format!("{inner} must be a finite number > 0, got {}", py_repr(value))));
        }
        out[slot] = Some(positive(value, &inner)?);
    }
    Ok(out)
}

/// `temperature.by_options`: `{"a": number, "b": number, "min": number > 0 (optional)}`.
fn by_options(spec: Option<&Json>, where_: &str) -> Result<Option<(f64, f64, f64)>, DeciderError> {
    let spec = match spec {
        None | Some(Json::Null) => return Ok(None),
        Some(spec) => spec,
    };
    let form = || {
        DeciderError::Config(format!(
            "{where_} must be {{\"a\": number, \"b\": number, \"min\": number > 0 (optional)}}, got {}",
            py_repr(spec)
        ))
    };
    let map = spec.as_dict().ok_or_else(form)?;
    if map.keys().any(|k| !matches!(k.as_str(), "a" | "b" | "min")) || !map.contains_key("a") || !map.contains_key("b")
    {
        return Err(form());
    }
    let mut ab = [0.0; 2];
    for (i, key) in ["a", "b"].into_iter().enumerate() {
        ab[i] = map[key].as_f64().filter(|v| v.is_finite()).ok_or_else(|| {
            DeciderError::Config(format!("{where_}['{key}'] must be a finite number, got {}", py_repr(&map[key])))
        })?;
    }
    let min = positive(map.get("min").unwrap_or(&Json::Float(0.05)), &format!("{where_}['min']"))?;
    Ok(Some((ab[0], ab[1], min)))
}
