//! JSON text exactly as Python's `json.dumps(value, ensure_ascii=False)` writes it, and
//! `repr`/`str` of JSON values, because the prompt and some error messages are built from them
//! (`systemone.render_state` in decider-ai 1.10.0): separators `", "` and `": "`, keys in request
//! order, integers exact, Python's float repr (`1.0`, `1e-05`, `1e+16`, `NaN`, `Infinity`),
//! non-ASCII characters raw, control characters escaped.

use super::value::Json;

/// `json.dumps(value, ensure_ascii=False)`.
pub fn dumps(value: &Json) -> String {
    let mut out = Bounded::new(usize::MAX);
    let _ = write_json(value, &mut out, usize::MAX);
    out.text
}

/// Text that holds at most `limit` bytes: a write that would pass it is cut at the limit (on a
/// character boundary) and refused, so a writer stops as soon as it has produced enough.
pub struct Bounded {
    pub text: String,
    limit: usize,
}

/// The limit of a [`Bounded`] was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full;

impl Bounded {
    pub fn new(limit: usize) -> Self {
        Self { text: String::new(), limit }
    }

    pub fn push_str(&mut self, s: &str) -> Result<(), Full> {
        let room = self.limit - self.text.len();
        if s.len() <= room {
            self.text.push_str(s);
            return Ok(());
        }
        let mut cut = room;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        self.text.push_str(&s[..cut]);
        self.limit = self.text.len(); // nothing more fits, not even a shorter character
        Err(Full)
    }

    pub fn push(&mut self, c: char) -> Result<(), Full> {
        self.push_str(c.encode_utf8(&mut [0; 4]))
    }
}

/// Writes `value` as `json.dumps` does; every list of at least `index_lists_from` elements is
/// written with each element's position in it, as `render_state` shows lists
/// ([`crate::state::ANNOTATE_MIN`]; `usize::MAX` for plain `json.dumps`): an object element `v`
/// as `{"_index": i, **v}` (`_index` first; `v`'s own `_index` value, if it has one, wins),
/// anything else as `{"_index": i, "value": v}`.
pub fn write_json(value: &Json, out: &mut Bounded, index_lists_from: usize) -> Result<(), Full> {
    match value {
        Json::Null => out.push_str("null"),
        Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Json::Int(i) => out.push_str(i.as_str()),
        Json::Float(x) => out.push_str(&float_repr(*x)),
        Json::Str(s) => write_json_string(s, out),
        Json::List(items) => {
            out.push('[')?;
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ")?;
                }
                if items.len() < index_lists_from {
                    write_json(item, out, index_lists_from)?;
                    continue;
                }
                out.push_str("{\"_index\": ")?;
                match item {
                    Json::Dict(fields) => {
                        match fields.get("_index") {
                            Some(own) => write_json(own, out, index_lists_from)?,
                            None => out.push_str(&i.to_string())?,
                        }
                        for (key, field) in fields.iter().filter(|(key, _)| *key != "_index") {
                            write_member(key, field, out, index_lists_from)?;
                        }
                    }
                    other => {
                        out.push_str(&i.to_string())?;
                        write_member("value", other, out, index_lists_from)?;
                    }
                }
                out.push('}')?;
            }
            out.push(']')
        }
        Json::Dict(map) => {
            out.push('{')?;
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ")?;
                }
                write_json_string(key, out)?;
                out.push_str(": ")?;
                write_json(item, out, index_lists_from)?;
            }
            out.push('}')
        }
    }
}

/// `, "key": value` after the first member of an object.
fn write_member(key: &str, value: &Json, out: &mut Bounded, index_lists_from: usize) -> Result<(), Full> {
    out.push_str(", ")?;
    write_json_string(key, out)?;
    out.push_str(": ")?;
    write_json(value, out, index_lists_from)
}

/// A JSON string literal as Python's encoder writes it with `ensure_ascii=False`.
fn write_json_string(s: &str, out: &mut Bounded) -> Result<(), Full> {
    out.push('"')?;
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\"")?,
            '\\' => out.push_str("\\\\")?,
            '\n' => out.push_str("\\n")?,
            '\r' => out.push_str("\\r")?,
            '\t' => out.push_str("\\t")?,
            '\u{8}' => out.push_str("\\b")?,
            '\u{c}' => out.push_str("\\f")?,
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32))?,
            c => out.push(c)?,
        }
    }
    out.push('"')
}

/// `json.dumps` of a Python float: `repr(x)` (with `NaN`, `Infinity` and `-Infinity`): the
/// shortest round-trip digits, in positional notation when the decimal exponent is in
/// [-4, 16), else scientific with a signed two-digit exponent.
pub fn float_repr(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity".into() } else { "-Infinity".into() };
    }
    // `{:e}` gives the shortest round-trip digits: "-1.2345e-7".
    let sci = format!("{:e}", x);
    let (mantissa, exponent) = sci.split_once('e').expect("LowerExp always writes an exponent");
    let exponent: i32 = exponent.parse().expect("LowerExp writes an integer exponent");
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if negative { "-" } else { "" };
    // Value = 0.DIGITS × 10^point.
    let point = exponent + 1;
    if !(-4 < point && point <= 16) {
        let (first, rest) = digits.split_at(1);
        let fraction = if rest.is_empty() { String::new() } else { format!(".{rest}") };
        let exp_sign = if exponent < 0 { '-' } else { '+' };
        return format!("{sign}{first}{fraction}e{exp_sign}{:02}", exponent.abs());
    }
    let n = digits.len() as i32;
    if point <= 0 {
        format!("{sign}0.{}{digits}", "0".repeat((-point) as usize))
    } else if point >= n {
        format!("{sign}{digits}{}.0", "0".repeat((point - n) as usize))
    } else {
        let (int, frac) = digits.split_at(point as usize);
        format!("{sign}{int}.{frac}")
    }
}

/// `str(value)` of the Python object `json.loads` makes: strings as they are, everything else
/// as `repr` (`None`, `True`, `1.0`, `{'a': [1, 2]}`).
pub fn py_str(value: &Json) -> String {
    match value {
        Json::Str(s) => s.clone(),
        other => py_repr(other),
    }
}

/// `repr(value)` of the Python object `json.loads` makes.
pub fn py_repr(value: &Json) -> String {
    match value {
        Json::Null => "None".into(),
        Json::Bool(b) => if *b { "True" } else { "False" }.into(),
        Json::Int(i) => i.as_str().into(),
        Json::Float(x) => float_repr(*x).replace("Infinity", "inf").replace("NaN", "nan"),
        Json::Str(s) => str_repr(s),
        Json::List(items) => format!("[{}]", items.iter().map(py_repr).collect::<Vec<_>>().join(", ")),
        Json::Dict(map) => format!(
            "{{{}}}",
            map.iter().map(|(k, v)| format!("{}: {}", str_repr(k), py_repr(v))).collect::<Vec<_>>().join(", ")
        ),
    }
}

/// `repr(s)` of a Python string (`unicode_repr` in CPython's `Objects/unicodeobject.c`): single
/// quotes unless the text has a single quote and no double quote; backslash escapes for the
/// quote, the backslash, `\n`, `\r`, `\t` and every character that is not printable.
fn str_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    let mut out = String::new();
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if !python_printable(c) => match c as u32 {
                code @ ..0x100 => out.push_str(&format!("\\x{code:02x}")),
                code @ ..0x10000 => out.push_str(&format!("\\u{code:04x}")),
                code => out.push_str(&format!("\\U{code:08x}")),
            },
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Python's `str.isprintable()` of one character (`Py_UNICODE_ISPRINTABLE`): false for the
/// general categories Cc, Cf, Cs, Co, Cn, Zl, Zp and Zs, the space excepted. The categories are
/// Unicode 16.0's; CPython 3.11 has 14.0's, so the characters assigned since (new CJK, scripts,
/// symbols) are printable here and escaped there.
fn python_printable(c: char) -> bool {
    use unicode_general_category::{GeneralCategory::*, get_general_category};
    c == ' '
        || !matches!(
            get_general_category(c),
            Control
                | Format
                | Surrogate
                | PrivateUse
                | Unassigned
                | LineSeparator
                | ParagraphSeparator
                | SpaceSeparator
        )
}

/// Python's `bool(v)` of a JSON value.
pub fn py_truthy(value: &Json) -> bool {
    match value {
        Json::Null => false,
        Json::Bool(b) => *b,
        Json::Int(i) => !i.is_zero(),
        Json::Float(x) => *x != 0.0,
        Json::Str(s) => !s.is_empty(),
        Json::List(a) => !a.is_empty(),
        Json::Dict(o) => !o.is_empty(),
    }
}

/// `type(value).__name__` of the Python object `json.loads` makes.
pub fn py_type_name(value: &Json) -> &'static str {
    match value {
        Json::Null => "NoneType",
        Json::Bool(_) => "bool",
        Json::Int(_) => "int",
        Json::Float(_) => "float",
        Json::Str(_) => "str",
        Json::List(_) => "list",
        Json::Dict(_) => "dict",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Expected strings are what CPython 3.11 prints for the same values.
    #[test]
    fn floats_print_as_python_repr() {
        let cases = [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (123456789012345680.0, "1.2345678901234568e+17"),
            (-0.0, "-0.0"),
            (3.5, "3.5"),
            (100000.0, "100000.0"),
            (1.5e-7, "1.5e-07"),
            (2.5e300, "2.5e+300"),
            (f64::INFINITY, "Infinity"),
        ];
        for (x, expected) in cases {
            assert_eq!(float_repr(x), expected, "repr({x:e})");
        }
    }

    #[test]
    fn dumps_uses_python_separators_and_escapes() {
        let v = Json::from(json!({"b": [1, 2.0, null, true], "a": "é\"\\\n\u{1}\u{7f}", "c": {}}));
        assert_eq!(dumps(&v), "{\"b\": [1, 2.0, null, true], \"a\": \"é\\\"\\\\\\n\\u0001\u{7f}\", \"c\": {}}");
    }

    #[test]
    fn repr_of_values() {
        assert_eq!(py_repr(&Json::from(json!(null))), "None");
        assert_eq!(py_repr(&Json::from(json!({"a": [1, "it's", false]}))), "{'a': [1, \"it's\", False]}");
        assert_eq!(py_str(&Json::from(json!("x"))), "x");
        assert_eq!(py_str(&Json::from(json!(2.0))), "2.0");
    }
}
