//! JSON text read as Python's `json.loads(body)` reads it (CPython 3.11: `json.detect_encoding`,
//! `json.decoder.JSONDecoder.decode`, and the scanner in `Modules/_json.c`: `scan_once_unicode`,
//! `_match_number_unicode`, `scanstring_unicode`, `_parse_object_unicode`, `_parse_array_unicode`).
//!
//! Ported rather than taken from a JSON crate because the reference's answers depend on what
//! only this scanner does: `NaN`, `Infinity` and `-Infinity` are accepted, integers keep every
//! digit, `-0` is the integer 0, and a malformed body's 422 carries the scanner's own message at
//! its character offset (FastAPI's `json_invalid`).

use std::borrow::Cow;

use super::value::{Int, Json, JsonMap};

/// Nesting of lists and objects decoded at most. CPython stops at its recursion limit (1,000
/// frames, of which the server's own call stack takes some) with a `RecursionError`; this is
/// below what the reference decodes, and keeps the recursive parse, render and drop of a value
/// far inside a thread's stack.
pub const MAX_DEPTH: usize = 900;

/// Digits an integer may have: CPython's `sys.get_int_max_str_digits()` default, past which
/// `int(text)` raises a `ValueError` (Python 3.11+).
pub const MAX_INT_DIGITS: usize = 4300;

/// Why `json.loads` refused the text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoadError {
    /// `json.JSONDecodeError(msg, doc, pos)`, with `pos` in characters (what FastAPI answers
    /// as a 422 `json_invalid`). Also, in a text Python reads whole, the first `\ud800`-style
    /// escape of half a surrogate pair: Python reads it into a string no Unicode text can hold
    /// (the reference fails later, with a 500).
    Decode { msg: &'static str, pos: usize, line: usize, column: usize },
    /// Any other exception (`UnicodeDecodeError`, `ValueError` for too many digits,
    /// `RecursionError`), which FastAPI answers with a 400.
    Other(String),
}

impl std::fmt::Display for LoadError {
    /// As Python prints the exception.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Decode { msg, pos, line, column } => write!(f, "{msg}: line {line} column {column} (char {pos})"),
            Self::Other(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for LoadError {}

/// `json.loads(bytes)`: decoded in the encoding `json.detect_encoding` finds, then parsed.
pub fn loads(bytes: &[u8]) -> Result<Json, LoadError> {
    loads_text(&decode(bytes)?)
}

/// `json.loads` of the text [`decode`] made of a body (a leading BOM already dropped).
pub fn loads_text(text: &str) -> Result<Json, LoadError> {
    Scanner { text, depth: 0, unpaired: None }.decode().map_err(|fail| match fail {
        Fail::Decode(msg, at) => {
            let before = &text[..at];
            let pos = before.chars().count();
            let line = before.matches('\n').count() + 1;
            let column = before.rfind('\n').map_or(pos + 1, |nl| before[nl + 1..].chars().count() + 1);
            LoadError::Decode { msg, pos, line, column }
        }
        Fail::Other(message) => LoadError::Other(message),
    })
}

/// The text of a body as `json.loads(bytes)` decodes it (`json.detect_encoding`): UTF-8 (a BOM
/// dropped), or UTF-16/32 told by a BOM or by where the zero bytes of the first characters are.
/// Python decodes with `surrogatepass`; a surrogate encoded in the bytes, which no Rust string
/// holds, is refused here as text that is not valid in its encoding (FastAPI's 400).
pub fn decode(b: &[u8]) -> Result<Cow<'_, str>, LoadError> {
    const UTF8_BOM: &[u8] = b"\xef\xbb\xbf";
    let (utf16, utf32) = (|big, bytes| units::<2>(bytes, big), |big, bytes| units::<4>(bytes, big));
    let text = match b {
        [0xff, 0xfe, 0, 0, rest @ ..] => utf32(false, rest),
        [0, 0, 0xfe, 0xff, rest @ ..] => utf32(true, rest),
        [0xff, 0xfe, rest @ ..] => utf16(false, rest),
        [0xfe, 0xff, rest @ ..] => utf16(true, rest),
        _ if b.starts_with(UTF8_BOM) => return utf8(&b[UTF8_BOM.len()..]),
        [0, 0, _, _, ..] => utf32(true, b),
        [0, _, _, _, ..] => utf16(true, b),
        [_, 0, 0, 0, ..] => utf32(false, b),
        [_, 0, _, _, ..] => utf16(false, b),
        [0, _] => utf16(true, b),
        [_, 0] => utf16(false, b),
        _ => return utf8(b),
    };
    text.map(Cow::Owned)
}

fn utf8(bytes: &[u8]) -> Result<Cow<'_, str>, LoadError> {
    std::str::from_utf8(bytes)
        .map(Cow::Borrowed)
        .map_err(|e| LoadError::Other(format!("the body is not valid UTF-8: {e}")))
}

/// UTF-16 (`N` = 2) or UTF-32 (`N` = 4) text.
fn units<const N: usize>(bytes: &[u8], big_endian: bool) -> Result<String, LoadError> {
    let name = if N == 2 { "UTF-16" } else { "UTF-32" };
    let invalid = |what: String| LoadError::Other(format!("the body is not valid {name}: {what}"));
    if !bytes.len().is_multiple_of(N) {
        return Err(invalid(format!("{} bytes are not whole {N}-byte units", bytes.len())));
    }
    let unit = |chunk: &[u8]| {
        let value = chunk.iter().fold(0u32, |acc, &byte| acc << 8 | byte as u32);
        if big_endian {
            value
        } else if N == 2 {
            (value as u16).swap_bytes() as u32
        } else {
            value.swap_bytes()
        }
    };
    let units = bytes.chunks_exact(N).map(unit);
    if N == 2 {
        char::decode_utf16(units.map(|u| u as u16)).collect::<Result<String, _>>().map_err(|e| invalid(e.to_string()))
    } else {
        units.map(|u| char::from_u32(u).ok_or_else(|| invalid(format!("{u:#x} is not a Unicode character")))).collect()
    }
}

/// How a scan failed, at a byte offset of the text.
enum Fail {
    Decode(&'static str, usize),
    Other(String),
}

type Scanned<T> = Result<(T, usize), Fail>;

struct Scanner<'a> {
    text: &'a str,
    depth: usize,
    /// Where the first escape of half a surrogate pair is: refused once the whole text has
    /// parsed, so a syntax error anywhere is reported as Python reports it.
    unpaired: Option<usize>,
}

impl<'a> Scanner<'a> {
    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    fn at(&self, idx: usize) -> Option<u8> {
        self.bytes().get(idx).copied()
    }

    /// The offset after the whitespace at `idx` (`[ \t\n\r]*`).
    fn skip_whitespace(&self, mut idx: usize) -> usize {
        while matches!(self.at(idx), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            idx += 1;
        }
        idx
    }

    /// `JSONDecoder.decode`: one value, whitespace around it, nothing else.
    fn decode(&mut self) -> Result<Json, Fail> {
        let (value, end) = self.scan_once(self.skip_whitespace(0))?;
        let end = self.skip_whitespace(end);
        if end != self.text.len() {
            return Err(Fail::Decode("Extra data", end));
        }
        match self.unpaired {
            Some(at) => {
                Err(Fail::Decode("Unpaired surrogate escape (Python reads it, but no Unicode text holds it)", at))
            }
            None => Ok(value),
        }
    }

    /// `scan_once_unicode`: the value at `idx`. Where none starts, the scanner's
    /// `StopIteration(idx)`, which `raw_decode` reports as "Expecting value" at `idx`.
    fn scan_once(&mut self, idx: usize) -> Scanned<Json> {
        let rest = &self.bytes()[idx.min(self.text.len())..];
        let constants: [(&[u8], Json); 6] = [
            (b"null", Json::Null),
            (b"true", Json::Bool(true)),
            (b"false", Json::Bool(false)),
            (b"NaN", Json::Float(f64::NAN)),
            (b"Infinity", Json::Float(f64::INFINITY)),
            (b"-Infinity", Json::Float(f64::NEG_INFINITY)),
        ];
        match rest.first() {
            Some(b'"') => return self.scan_string(idx + 1).map(|(s, end)| (Json::Str(s), end)),
            Some(b'{') => return self.nested("object", |s| s.parse_object(idx + 1)),
            Some(b'[') => return self.nested("array", |s| s.parse_array(idx + 1)),
            _ => {}
        }
        for (literal, value) in constants {
            if rest.starts_with(literal) {
                return Ok((value, idx + literal.len()));
            }
        }
        self.match_number(idx)
    }

    /// `_Py_EnterRecursiveCall` around an object or array.
    fn nested(&mut self, what: &str, parse: impl FnOnce(&mut Self) -> Scanned<Json>) -> Scanned<Json> {
        if self.depth >= MAX_DEPTH {
            return Err(Fail::Other(format!(
                "maximum recursion depth exceeded while decoding a JSON {what} from a unicode string (nesting deeper than {MAX_DEPTH})"
            )));
        }
        self.depth += 1;
        let scanned = parse(self);
        self.depth -= 1;
        scanned
    }

    /// `_match_number_unicode`: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?`, an `int` of
    /// its text unless a fraction or exponent makes it a `float` (correctly rounded, ±inf past
    /// the range, as `float(text)`).
    fn match_number(&self, start: usize) -> Scanned<Json> {
        let digits_from = |mut idx: usize| {
            while self.at(idx).is_some_and(|b| b.is_ascii_digit()) {
                idx += 1;
            }
            idx
        };
        let mut idx = start + usize::from(self.at(start) == Some(b'-'));
        idx = match self.at(idx) {
            Some(b'1'..=b'9') => digits_from(idx + 1),
            Some(b'0') => idx + 1,
            _ => return Err(Fail::Decode("Expecting value", start)),
        };
        let mut is_float = false;
        if self.at(idx) == Some(b'.') && self.at(idx + 1).is_some_and(|b| b.is_ascii_digit()) {
            is_float = true;
            idx = digits_from(idx + 2);
        }
        if matches!(self.at(idx), Some(b'e' | b'E')) {
            let signed = idx + 1 + usize::from(matches!(self.at(idx + 1), Some(b'-' | b'+')));
            let end = digits_from(signed);
            if end > signed {
                is_float = true;
                idx = end;
            }
        }
        let literal = &self.text[start..idx];
        if is_float {
            let x = literal.parse().expect("the number grammar is a subset of what Rust's float parser reads");
            return Ok((Json::Float(x), idx));
        }
        let digits = literal.trim_start_matches('-').len();
        if digits > MAX_INT_DIGITS {
            return Err(Fail::Other(format!(
                "Exceeds the limit ({MAX_INT_DIGITS} digits) for integer string conversion: value has {digits} digits; use sys.set_int_max_str_digits() to increase the limit"
            )));
        }
        Ok((Json::Int(Int::from_literal(literal)), idx))
    }

    /// `scanstring_unicode` (strict): the string whose opening quote is before `end`, and the
    /// offset after its closing quote.
    fn scan_string(&mut self, mut end: usize) -> Scanned<String> {
        let begin = end - 1;
        let b = self.bytes();
        let len = b.len();
        let mut out = String::new();
        loop {
            let mut next = end;
            while next < len && b[next] != b'"' && b[next] != b'\\' {
                if b[next] <= 0x1f {
                    return Err(Fail::Decode("Invalid control character at", next));
                }
                next += 1;
            }
            if next == len {
                return Err(Fail::Decode("Unterminated string starting at", begin));
            }
            out.push_str(&self.text[end..next]);
            if b[next] == b'"' {
                return Ok((out, next + 1));
            }
            next += 1; // past the backslash
            let Some(escape) = self.at(next) else {
                return Err(Fail::Decode("Unterminated string starting at", begin));
            };
            if escape != b'u' {
                end = next + 1;
                out.push(match escape {
                    b'"' => '"',
                    b'\\' => '\\',
                    b'/' => '/',
                    b'b' => '\u{8}',
                    b'f' => '\u{c}',
                    b'n' => '\n',
                    b'r' => '\r',
                    b't' => '\t',
                    _ => return Err(Fail::Decode("Invalid \\escape", end - 2)),
                });
                continue;
            }
            // `next` is at the `u`; four hex digits and at least one more character must follow.
            let invalid_escape = |u: usize| Fail::Decode("Invalid \\uXXXX escape", u);
            end = next + 5;
            if end >= len {
                return Err(invalid_escape(next));
            }
            let mut c = self.hex4(next + 1).ok_or(invalid_escape(next))?;
            if (0xd800..0xdc00).contains(&c) && end + 6 < len && b[end] == b'\\' && b[end + 1] == b'u' {
                let low = self.hex4(end + 2).ok_or(invalid_escape(end + 1))?;
                if (0xdc00..0xe000).contains(&low) {
                    c = 0x10000 + ((c - 0xd800) << 10) + (low - 0xdc00);
                    end += 6;
                }
            }
            out.push(char::from_u32(c).unwrap_or_else(|| {
                self.unpaired.get_or_insert(next - 1);
                char::REPLACEMENT_CHARACTER
            }));
        }
    }

    /// Four hex digits at `idx`.
    fn hex4(&self, idx: usize) -> Option<u32> {
        let digits = self.bytes().get(idx..idx + 4)?;
        digits.iter().try_fold(0, |acc, &d| Some(acc << 4 | (d as char).to_digit(16)?))
    }

    /// `_parse_object_unicode`: the members after the `{` before `idx`. A repeated key keeps
    /// its first place and takes the last value (`PyDict_SetItem`).
    fn parse_object(&mut self, idx: usize) -> Scanned<Json> {
        let mut map = JsonMap::new();
        let mut idx = self.skip_whitespace(idx);
        if self.at(idx) != Some(b'}') {
            loop {
                if self.at(idx) != Some(b'"') {
                    return Err(Fail::Decode("Expecting property name enclosed in double quotes", idx));
                }
                let (key, next) = self.scan_string(idx + 1)?;
                idx = self.skip_whitespace(next);
                if self.at(idx) != Some(b':') {
                    return Err(Fail::Decode("Expecting ':' delimiter", idx));
                }
                let (value, next) = self.scan_once(self.skip_whitespace(idx + 1))?;
                map.insert(key, value);
                idx = self.skip_whitespace(next);
                if self.at(idx) == Some(b'}') {
                    break;
                }
                if self.at(idx) != Some(b',') {
                    return Err(Fail::Decode("Expecting ',' delimiter", idx));
                }
                idx = self.skip_whitespace(idx + 1);
            }
        }
        Ok((Json::Dict(map), idx + 1))
    }

    /// `_parse_array_unicode`: the elements after the `[` before `idx`.
    fn parse_array(&mut self, idx: usize) -> Scanned<Json> {
        let mut items = Vec::new();
        let mut idx = self.skip_whitespace(idx);
        if self.at(idx) != Some(b']') {
            loop {
                let (value, next) = self.scan_once(idx)?;
                items.push(value);
                idx = self.skip_whitespace(next);
                if self.at(idx) == Some(b']') {
                    break;
                }
                if self.at(idx) != Some(b',') {
                    return Err(Fail::Decode("Expecting ',' delimiter", idx));
                }
                idx = self.skip_whitespace(idx + 1);
            }
        }
        Ok((Json::List(items), idx + 1))
    }
}
