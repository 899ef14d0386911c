//! The JSON text CPython 3 writes for `json.dumps(json.loads(text), sort_keys=True)`, byte
//! for byte: the text Powertools for AWS Lambda (Python) hashes into idempotency keys.
//!
//! Python's defaults throughout: `ensure_ascii=True` (every character outside printable
//! ASCII as a `\uXXXX` escape in lowercase hex, above U+FFFF as a UTF-16 surrogate pair),
//! the separators `", "` and `": "`, and `allow_nan=True` (a number too large for a float
//! is `Infinity`). Object members are sorted by code point (the UTF-8 byte order of the
//! keys), and the last of duplicate keys wins, as in the `dict` that `json.loads` builds.
//!
//! Numbers are read from their text, never through `serde_json::Value` (whose integers
//! stop at 64 bits): a literal without `.`, `e` or `E` is a Python `int` and keeps every
//! digit (`-0` is `0`); any other is a `float`, correctly rounded (as Python reads it),
//! written as `float.__repr__` writes it: the fewest digits that read back to it (of two
//! as close, the one ending in an even digit, where Rust's own shortest form takes the
//! upper), in fixed notation when those digits' value is at least 1e-4 and below 1e16
//! (`0.0001`, `1000000000000000.0`, `-0.0`), in scientific notation otherwise (`1e-05`,
//! `1e+16`, `1.5e-07`).
//!
//! Self-contained: it depends on serde_json (which checks the grammar) and on serde's error
//! trait only.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::value::RawValue;

/// The deepest nesting of arrays and objects accepted (serde_json's own limit; CPython's
/// parser stops near 1000, at its recursion limit).
const MAX_DEPTH: usize = 128;

/// The most digits CPython reads an integer literal with: `json.loads` raises `ValueError`
/// for a longer one (`sys.get_int_max_str_digits()`'s default, since 3.11 and in the
/// security releases of 3.7 to 3.10).
const MAX_INT_DIGITS: usize = 4300;

/// The text CPython's `json.dumps(json.loads(text), sort_keys=True)` writes.
///
/// # Errors
///
/// Text that `json.loads` refuses: anything that is not one JSON value (serde_json's
/// message), and an integer literal of more than 4300 digits (`ValueError` with CPython's
/// default `int_max_str_digits`, even where a later duplicate key would replace it).
///
/// Errors too where Python answers:
/// - the literals `NaN`, `Infinity` and `-Infinity`, which `json.loads` accepts as an
///   extension of JSON;
/// - arrays and objects nested more than 128 deep (serde_json's limit; `json.loads` goes
///   to about 1000).
///
/// Escaped lone surrogates (`"\ud800"`), which Python keeps in its `str` and serde_json
/// refuses in a Rust `String`, are supported: they are written back as the same escapes,
/// and sort as their code points.
pub(crate) fn dumps(text: &str) -> Result<String, serde_json::Error> {
    // serde_json checks the grammar, as strictly as `json.loads` (no control character in
    // a string, no leading zero, nothing after the value), without decoding the strings:
    // lone surrogate escapes pass, as in Python. What follows reads checked text.
    let _: &RawValue = serde_json::from_str(text)?;
    let mut out = String::with_capacity(text.len() + text.len() / 4 + 2);
    Reader { text, at: 0 }.value(&mut out, 0)?;
    Ok(out)
}

/// The text CPython's `json.dumps(s)` writes for the Python `str` `s`: quoted, with the
/// escapes of `ensure_ascii=True`. (The tests check the escapes with it, one string at a
/// time.)
#[cfg(test)]
pub(crate) fn dumps_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    push_string(s.chars().map(u32::from), &mut out);
    out
}

fn error(message: std::fmt::Arguments<'_>) -> serde_json::Error {
    <serde_json::Error as serde::de::Error>::custom(message)
}

/// A reader over JSON text that serde_json has checked: it only tells the values apart.
struct Reader<'a> {
    text: &'a str,
    at: usize,
}

impl Reader<'_> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    /// Steps over `byte`, after whitespace.
    fn expect(&mut self, byte: u8) -> Result<(), serde_json::Error> {
        self.skip_whitespace();
        if self.peek() != Some(byte) {
            return Err(self.unexpected());
        }
        self.at += 1;
        Ok(())
    }

    /// Text serde_json accepted and this reader does not: cannot happen.
    fn unexpected(&self) -> serde_json::Error {
        error(format_args!("unexpected JSON text at byte {}", self.at))
    }

    /// Writes the value that starts here (after whitespace), `depth` containers in.
    fn value(&mut self, out: &mut String, depth: usize) -> Result<(), serde_json::Error> {
        self.skip_whitespace();
        match self.peek() {
            Some(b'{') => self.object(out, depth + 1),
            Some(b'[') => self.array(out, depth + 1),
            Some(b'"') => {
                let mut chars = Vec::new();
                self.string(&mut chars)?;
                push_string(chars, out);
                Ok(())
            }
            Some(b'-' | b'0'..=b'9') => {
                let start = self.at;
                while let Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') = self.peek() {
                    self.at += 1;
                }
                push_number(&self.text[start..self.at], out)
            }
            _ => {
                for literal in ["true", "false", "null"] {
                    if self.text[self.at..].starts_with(literal) {
                        self.at += literal.len();
                        out.push_str(literal);
                        return Ok(());
                    }
                }
                Err(self.unexpected())
            }
        }
    }

    fn object(&mut self, out: &mut String, depth: usize) -> Result<(), serde_json::Error> {
        if depth > MAX_DEPTH {
            return Err(error(format_args!(
                "JSON nested deeper than {MAX_DEPTH} levels"
            )));
        }
        // Past the '{'. Keys as code points (Python's `str` order, lone surrogates
        // included); inserting a key again replaces its value, as in a `dict`.
        self.at += 1;
        let mut members: BTreeMap<Vec<u32>, String> = BTreeMap::new();
        self.skip_whitespace();
        if self.peek() == Some(b'}') {
            self.at += 1;
        } else {
            loop {
                self.skip_whitespace();
                let mut key = Vec::new();
                self.string(&mut key)?;
                self.expect(b':')?;
                let mut value = String::new();
                self.value(&mut value, depth)?;
                members.insert(key, value);
                self.skip_whitespace();
                match self.peek() {
                    Some(b',') => self.at += 1,
                    Some(b'}') => {
                        self.at += 1;
                        break;
                    }
                    _ => return Err(self.unexpected()),
                }
            }
        }
        out.push('{');
        for (i, (key, value)) in members.into_iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            push_string(key, out);
            out.push_str(": ");
            out.push_str(&value);
        }
        out.push('}');
        Ok(())
    }

    fn array(&mut self, out: &mut String, depth: usize) -> Result<(), serde_json::Error> {
        if depth > MAX_DEPTH {
            return Err(error(format_args!(
                "JSON nested deeper than {MAX_DEPTH} levels"
            )));
        }
        self.at += 1; // '['
        out.push('[');
        self.skip_whitespace();
        if self.peek() == Some(b']') {
            self.at += 1;
        } else {
            let mut first = true;
            loop {
                if !first {
                    out.push_str(", ");
                }
                first = false;
                self.value(out, depth)?;
                self.skip_whitespace();
                match self.peek() {
                    Some(b',') => self.at += 1,
                    Some(b']') => {
                        self.at += 1;
                        break;
                    }
                    _ => return Err(self.unexpected()),
                }
            }
        }
        out.push(']');
        Ok(())
    }

    /// Decodes the string that starts here into code points, as Python's scanner does: an
    /// escaped high surrogate followed by an escaped low one is one character; any other
    /// escaped surrogate stays alone.
    fn string(&mut self, chars: &mut Vec<u32>) -> Result<(), serde_json::Error> {
        if self.peek() != Some(b'"') {
            return Err(self.unexpected());
        }
        self.at += 1;
        loop {
            let rest = &self.text[self.at..];
            // Both are ASCII: the split is on a character boundary.
            let Some(end) = rest.find(['"', '\\']) else {
                return Err(self.unexpected());
            };
            chars.extend(rest[..end].chars().map(u32::from));
            self.at += end + 1;
            if rest.as_bytes()[end] == b'"' {
                return Ok(());
            }
            let escaped = self.peek().ok_or_else(|| self.unexpected())?;
            self.at += 1;
            let char = match escaped {
                b'"' => 0x22,
                b'\\' => 0x5c,
                b'/' => 0x2f,
                b'b' => 0x08,
                b'f' => 0x0c,
                b'n' => 0x0a,
                b'r' => 0x0d,
                b't' => 0x09,
                b'u' => {
                    let unit = self.hex4(self.at).ok_or_else(|| self.unexpected())?;
                    self.at += 4;
                    let low = if (0xd800..=0xdbff).contains(&unit)
                        && self.text[self.at..].starts_with("\\u")
                    {
                        self.hex4(self.at + 2)
                            .filter(|low| (0xdc00..=0xdfff).contains(low))
                    } else {
                        None
                    };
                    match low {
                        Some(low) => {
                            self.at += 6;
                            0x10000 + ((unit - 0xd800) << 10) + (low - 0xdc00)
                        }
                        None => unit,
                    }
                }
                _ => return Err(self.unexpected()),
            };
            chars.push(char);
        }
    }

    /// The four hex digits at byte `at`.
    fn hex4(&self, at: usize) -> Option<u32> {
        let digits = self.text.get(at..at + 4)?;
        if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u32::from_str_radix(digits, 16).ok()
    }
}

/// Writes a Python `str` (its code points) as `json.dumps` does with `ensure_ascii=True`.
fn push_string(chars: impl IntoIterator<Item = u32>, out: &mut String) {
    out.push('"');
    for c in chars {
        match c {
            0x22 => out.push_str("\\\""),
            0x5c => out.push_str("\\\\"),
            0x0a => out.push_str("\\n"),
            0x0d => out.push_str("\\r"),
            0x09 => out.push_str("\\t"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            0x20..=0x7e => out.push(char::from(c as u8)),
            0x10000.. => {
                let offset = c - 0x10000;
                push_unit(0xd800 | (offset >> 10), out);
                push_unit(0xdc00 | (offset & 0x3ff), out);
            }
            _ => push_unit(c, out),
        }
    }
    out.push('"');
}

/// `\uXXXX`, lowercase.
fn push_unit(unit: u32, out: &mut String) {
    // Writing to a String cannot fail.
    let _ = write!(out, "\\u{unit:04x}");
}

/// Writes a JSON number token (checked by serde_json) as Python reads and writes it.
fn push_number(token: &str, out: &mut String) -> Result<(), serde_json::Error> {
    if token.contains(['.', 'e', 'E']) {
        let value: f64 = token
            .parse()
            .map_err(|_| error(format_args!("unexpected number {token}")))?;
        push_float(value, out);
        return Ok(());
    }
    // An `int`: its digits as they are (valid JSON has no leading zero), but `-0` is 0.
    let digits = token.strip_prefix('-').unwrap_or(token);
    if digits.len() > MAX_INT_DIGITS {
        return Err(error(format_args!(
            "Exceeds the limit ({MAX_INT_DIGITS} digits) for integer string conversion: \
             value has {} digits",
            digits.len()
        )));
    }
    out.push_str(if digits == "0" { digits } else { token });
    Ok(())
}

/// The digits of `float.__repr__(value)` for a finite `value > 0`, and the decimal exponent
/// of the first: the fewest digits that read back to `value`, and of those, the closest;
/// between two as close, the one whose last digit is even.
fn shortest_digits(value: f64) -> (String, i32) {
    let (mut digits, exponent) = scientific_digits(&format!("{value:e}"));
    // Rust's shortest form breaks such a tie upwards, CPython's (David Gay's dtoa) to even
    // (`repr(830578700417789.25)` is `830578700417789.2`). A tie needs the other
    // candidate, one unit away in the last digit, to read back to `value` too: only then
    // is the exact value looked at.
    let last = digits.len() - 1;
    let last_digit = digits.as_bytes()[last] - b'0';
    if last_digit % 2 == 1 {
        for neighbour in [last_digit - 1, last_digit + 1] {
            if neighbour > 9 {
                continue;
            }
            let mut candidate = digits.clone();
            candidate.replace_range(last.., &neighbour.to_string());
            if format!("0.{candidate}e{}", exponent + 1).parse::<f64>() != Ok(value) {
                continue;
            }
            // The midpoint of the two candidates: the lower one's digits, then a 5.
            let lower = if neighbour < last_digit {
                &candidate
            } else {
                &digits
            };
            let midpoint = format!("{lower}5");
            // Every double has at most 767 significant decimal digits: this is exact.
            let (exact, exact_exponent) = scientific_digits(&format!("{value:.767e}"));
            if exact_exponent == exponent
                && exact.starts_with(&midpoint)
                && exact[midpoint.len()..].bytes().all(|b| b == b'0')
            {
                digits = candidate.trim_end_matches('0').to_owned();
                break;
            }
        }
    }
    (digits, exponent)
}

/// The digits and the exponent of Rust's `{:e}` form of a positive number (`d.ddde±x`).
fn scientific_digits(scientific: &str) -> (String, i32) {
    let (mantissa, exponent) = scientific
        .split_once('e')
        .expect("`{:e}` writes an exponent");
    let exponent = exponent.parse().expect("`{:e}` writes an integer exponent");
    (mantissa.replace('.', ""), exponent)
}

/// Writes `value` as `json.dumps` writes a `float`: `float.__repr__`, with `Infinity` and
/// `-Infinity` (and `NaN`) for the values that are not finite.
fn push_float(value: f64, out: &mut String) {
    if value.is_nan() {
        out.push_str("NaN");
        return;
    }
    if value.is_sign_negative() {
        out.push('-');
    }
    if value.is_infinite() {
        out.push_str("Infinity");
        return;
    }
    if value == 0.0 {
        out.push_str("0.0");
        return;
    }
    let (digits, exponent) = shortest_digits(value.abs());
    // The value is 0.<digits> × 10^point; Python's repr is fixed for -4 < point <= 16.
    let point = exponent + 1;
    if -4 < point && point <= 16 {
        if point <= 0 {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', point.unsigned_abs() as usize));
            out.push_str(&digits);
        } else {
            let point = point as usize;
            if point >= digits.len() {
                out.push_str(&digits);
                out.extend(std::iter::repeat_n('0', point - digits.len()));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..point]);
                out.push('.');
                out.push_str(&digits[point..]);
            }
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let sign = if exponent < 0 { '-' } else { '+' };
        // Writing to a String cannot fail.
        let _ = write!(out, "e{sign}{:02}", exponent.unsigned_abs());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (input, what CPython 3.11's `json.dumps(json.loads(input), sort_keys=True)` wrote).
    const PINNED: &[(&str, &str)] = &[
        (r#""plain ascii / with slash""#, r#""plain ascii / with slash""#),
        (r#""quote \" backslash \\ slash \/ escapes \b\f\n\r\t""#, r#""quote \" backslash \\ slash / escapes \b\f\n\r\t""#),
        (r#""controls \u0000\u0001\u001f\u0020 del \u007f c1 \u0080\u009f latin \u00e9\u00ff""#, r#""controls \u0000\u0001\u001f  del \u007f c1 \u0080\u009f latin \u00e9\u00ff""#),
        ("\"raw: é ü ß \u{80} \u{a0} \u{2028} \u{2029} \u{feff} \u{ffff}\"", r#""raw: \u00e9 \u00fc \u00df \u0080 \u00a0 \u2028 \u2029 \ufeff \uffff""#),
        ("\"\u{7f} raw del\"", r#""\u007f raw del""#),
        (r#""CJK 中文 日本語 한국어""#, r#""CJK \u4e2d\u6587 \u65e5\u672c\u8a9e \ud55c\uad6d\uc5b4""#),
        ("\"emoji 😀 🎉 𝄞 \u{10ffff}\"", r#""emoji \ud83d\ude00 \ud83c\udf89 \ud834\udd1e \udbff\udfff""#),
        (r#""escaped pair \ud83d\ude00 upper hex \uD83D\uDE00 \u00E9 \uABCD""#, r#""escaped pair \ud83d\ude00 upper hex \ud83d\ude00 \u00e9 \uabcd""#),
        (r#""lone \ud800 and \udfff and \udc00\ud800 and \ud800\ud800\udc00 and \ud83d\n""#, r#""lone \ud800 and \udfff and \udc00\ud800 and \ud800\ud800\udc00 and \ud83d\n""#),
        (r#""""#, r#""""#),
        (r#"0"#, r#"0"#),
        (r#"-0"#, r#"0"#),
        (r#"7"#, r#"7"#),
        (r#"-7"#, r#"-7"#),
        (r#"123456789"#, r#"123456789"#),
        (r#"-9223372036854775808"#, r#"-9223372036854775808"#),
        (r#"18446744073709551615"#, r#"18446744073709551615"#),
        (r#"18446744073709551616"#, r#"18446744073709551616"#),
        (r#"-340282366920938463463374607431768211457"#, r#"-340282366920938463463374607431768211457"#),
        (r#"123456789012345678901234567890123456789012345678901234567890"#, r#"123456789012345678901234567890123456789012345678901234567890"#),
        (r#"0.0"#, r#"0.0"#),
        (r#"-0.0"#, r#"-0.0"#),
        (r#"0.1"#, r#"0.1"#),
        (r#"1.0"#, r#"1.0"#),
        (r#"2.5"#, r#"2.5"#),
        (r#"-2.5"#, r#"-2.5"#),
        (r#"1e2"#, r#"100.0"#),
        (r#"1E2"#, r#"100.0"#),
        (r#"1e+2"#, r#"100.0"#),
        (r#"1E-2"#, r#"0.01"#),
        (r#"1e16"#, r#"1e+16"#),
        (r#"1e15"#, r#"1000000000000000.0"#),
        (r#"0.0001"#, r#"0.0001"#),
        (r#"1e-05"#, r#"1e-05"#),
        (r#"0.00001"#, r#"1e-05"#),
        (r#"1.5e-07"#, r#"1.5e-07"#),
        (r#"123456789012345678.0"#, r#"1.2345678901234568e+17"#),
        (r#"1e22"#, r#"1e+22"#),
        (r#"5e-324"#, r#"5e-324"#),
        (r#"1.7976931348623157e308"#, r#"1.7976931348623157e+308"#),
        (r#"1e400"#, r#"Infinity"#),
        (r#"-1e400"#, r#"-Infinity"#),
        (r#"1e-400"#, r#"0.0"#),
        (r#"-1e-400"#, r#"-0.0"#),
        (r#"0e0"#, r#"0.0"#),
        (r#"-0E-0"#, r#"-0.0"#),
        (r#"0.30000000000000004"#, r#"0.30000000000000004"#),
        (r#"100.0"#, r#"100.0"#),
        (r#"9007199254740993.0"#, r#"9007199254740992.0"#),
        (r#"1234567890123456.7"#, r#"1234567890123456.8"#),
        (r#"12345678901234567.0"#, r#"1.2345678901234568e+16"#),
        (r#"0.000123456789"#, r#"0.000123456789"#),
        (r#"1.000000000000000000000000000001"#, r#"1.0"#),
        (r#"2.4703282292062327e-324"#, r#"0.0"#),
        (r#"2.4703282292062328e-324"#, r#"5e-324"#),
        (r#"1e-7"#, r#"1e-07"#),
        (r#"123e-20"#, r#"1.23e-18"#),
        (r#"1e100"#, r#"1e+100"#),
        (r#"-1.5E+300"#, r#"-1.5e+300"#),
        (r#"4.35"#, r#"4.35"#),
        (r#"10000000000000000.0"#, r#"1e+16"#),
        (r#"9999999999999998.0"#, r#"9999999999999998.0"#),
        // Two shortest forms as close: CPython takes the even last digit.
        (r#"830578700417789.25"#, r#"830578700417789.2"#),
        (r#"830578700417789.75"#, r#"830578700417789.8"#),
        (r#"225214200072046.625"#, r#"225214200072046.62"#),
        (r#"-225214200072046.375"#, r#"-225214200072046.38"#),
        (r#"true"#, r#"true"#),
        (r#"false"#, r#"false"#),
        (r#"null"#, r#"null"#),
        (r#"[]"#, r#"[]"#),
        (r#"{}"#, r#"{}"#),
        (r#" [ 1 , 2 ] "#, r#"[1, 2]"#),
        (r#"[1,[2,[3,{}]],[]]"#, r#"[1, [2, [3, {}]], []]"#),
        ("\t\n\r {\"a\" :\n1 }\r\n", r#"{"a": 1}"#),
        (r#"{"b": 1, "a": 2, "c": {"z": [], "y": {}}}"#, r#"{"a": 2, "b": 1, "c": {"y": {}, "z": []}}"#),
        (r#"{"b": 1, "a": 2, "b": 3}"#, r#"{"a": 2, "b": 3}"#),
        (r#"{"a": {"x": 1}, "a": {"y": 2}}"#, r#"{"a": {"y": 2}}"#),
        ("{\"é\": 1, \"z\": 2, \"Z\": 3, \"😀\": 4, \"\u{ffff}\": 5, \"\u{e000}\": 6, \"\": 7, \"a\": 8, \"aa\": 9, \"A\": 10}", r#"{"": 7, "A": 10, "Z": 3, "a": 8, "aa": 9, "z": 2, "\u00e9": 1, "\ue000": 6, "\uffff": 5, "\ud83d\ude00": 4}"#),
        (r#"{"\ud800": 1, "\ue000": 2, "\ud7ff": 3, "\ud83d\ude00": 4, "\u00e9": 5, "e\u0301": 6}"#, r#"{"e\u0301": 6, "\u00e9": 5, "\ud7ff": 3, "\ud800": 1, "\ue000": 2, "\ud83d\ude00": 4}"#),
        (r#"[1, 1.0, -0, -0.0, "1", true, null, {"k": [false]}]"#, r#"[1, 1.0, 0, -0.0, "1", true, null, {"k": [false]}]"#),
        (r#"{"a":[{"c":3,"b":2}],"A":null}"#, r#"{"A": null, "a": [{"b": 2, "c": 3}]}"#),
    ];

    #[test]
    fn pinned_cases_match_cpython() {
        for (input, expected) in PINNED {
            let written = dumps(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
            assert_eq!(&written, expected, "for {input:?}");
        }
    }

    #[test]
    fn dumps_str_escapes_as_ensure_ascii() {
        // json.dumps(s) for each s, from CPython.
        let cases = [
            ("", r#""""#),
            ("plain / text", r#""plain / text""#),
            ("\"\\\n\r\t\u{8}\u{c}", r#""\"\\\n\r\t\b\f""#),
            ("\u{0}\u{1f} \u{7f}\u{80}", r#""\u0000\u001f \u007f\u0080""#),
            (
                "é中😀\u{10ffff}",
                r#""\u00e9\u4e2d\ud83d\ude00\udbff\udfff""#,
            ),
            ("\u{e000}\u{fffd}\u{ffff}", r#""\ue000\ufffd\uffff""#),
        ];
        for (s, expected) in cases {
            assert_eq!(dumps_str(s), expected, "for {s:?}");
        }
    }

    #[test]
    fn integers_past_cpythons_digit_limit_are_errors() {
        let limit = "7".repeat(MAX_INT_DIGITS);
        assert_eq!(dumps(&limit).unwrap(), limit);
        let negative = format!("-{limit}");
        assert_eq!(dumps(&negative).unwrap(), negative);
        let over = "7".repeat(MAX_INT_DIGITS + 1);
        assert!(dumps(&over).is_err());
        assert!(dumps(&format!("-{over}")).is_err());
        // Even as a value a later duplicate key replaces: Python reads it first.
        assert!(dumps(&format!(r#"{{"a": {over}, "a": 1}}"#)).is_err());
        // A float may have any number of digits.
        assert_eq!(dumps(&format!("{over}.0")).unwrap(), "Infinity");
        assert_eq!(
            dumps(&format!("{over}e-4290")).unwrap(),
            "77777777777.77777"
        );
    }

    #[test]
    fn nesting_is_limited_to_128() {
        let nested =
            |depth: usize| format!("{}{}", "[{\"a\":".repeat(depth / 2), "}]".repeat(depth / 2));
        let ok = format!("{}1{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(dumps(&ok).is_ok());
        let deep = format!(
            "{}1{}",
            "[".repeat(MAX_DEPTH + 1),
            "]".repeat(MAX_DEPTH + 1)
        );
        assert!(dumps(&deep).is_err());
        let objects = nested(MAX_DEPTH).replace("\"a\":}", "\"a\":1}");
        assert!(dumps(&objects).is_ok(), "{objects}");
        let objects = nested(MAX_DEPTH + 2).replace("\"a\":}", "\"a\":1}");
        assert!(dumps(&objects).is_err());
        // Far deeper, an error too, not a stack overflow.
        let deeper = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(dumps(&deeper).is_err());
    }

    #[test]
    fn what_json_loads_refuses_is_an_error() {
        for input in [
            "",
            " ",
            "[1,]",
            "{\"a\":1,}",
            "01",
            "1.",
            ".5",
            "1e",
            "+1",
            "- 1",
            "[1 2]",
            "{1:2}",
            "{\"a\"}",
            "\"\u{1}\"",
            "\"\n\"",
            "\"\\x\"",
            "\"\\u12\"",
            "\"\\u12g4\"",
            "1 2",
            "nul",
            "True",
            "'a'",
            "\u{feff}1",
            "[1]x",
            "\"unterminated",
        ] {
            assert!(dumps(input).is_err(), "{input:?} should be refused");
        }
    }

    #[test]
    fn pythons_nan_and_infinity_literals_are_errors() {
        // json.loads accepts them (an extension of JSON); serde_json does not.
        for input in ["NaN", "Infinity", "-Infinity", "[NaN]"] {
            assert!(dumps(input).is_err(), "{input:?}");
        }
    }

    /// xorshift64*: deterministic, no dependency.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        /// In `0..n`.
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        fn one_in(&mut self, n: u64) -> bool {
            self.below(n) == 0
        }

        fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
            &items[self.below(items.len() as u64) as usize]
        }
    }

    /// Random JSON text, in the textual variety of real payloads and then some.
    struct Gen {
        rng: Rng,
        doc: String,
    }

    impl Gen {
        fn whitespace(&mut self) {
            while self.rng.one_in(4) {
                let c = *self.rng.pick(&[' ', '\t', '\n', '\r']);
                self.doc.push(c);
            }
        }

        fn digits(&mut self, count: u64, first_nonzero: bool) {
            for i in 0..count {
                let low = if i == 0 && first_nonzero { 1 } else { 0 };
                let digit = low + self.rng.below(10 - low);
                self.doc.push(char::from(b'0' + digit as u8));
            }
        }

        fn value(&mut self, depth: u32) {
            self.whitespace();
            let kinds = if depth < 5 { 9 } else { 6 };
            match self.rng.below(kinds) {
                0 => {
                    let literal = *self.rng.pick(&["true", "false", "null"]);
                    self.doc.push_str(literal);
                }
                1 => self.integer(),
                2 | 3 => self.float(),
                4 | 5 => self.string(),
                6 | 7 => self.object(depth),
                _ => self.array(depth),
            }
            self.whitespace();
        }

        fn integer(&mut self) {
            if self.rng.one_in(2) {
                self.doc.push('-');
            }
            match self.rng.below(6) {
                0 => self.doc.push('0'),
                1 | 2 => {
                    let n = self.rng.below(1000);
                    let _ = write!(self.doc, "{n}");
                }
                3 => {
                    let n = self.rng.next();
                    let _ = write!(self.doc, "{n}");
                }
                4 => {
                    let count = 1 + self.rng.below(60);
                    self.digits(count, true);
                }
                _ => {
                    // Around CPython's limit on an integer's digits, now and then.
                    let count = if self.rng.one_in(50) {
                        MAX_INT_DIGITS as u64 - 2 + self.rng.below(4)
                    } else {
                        19 + self.rng.below(3)
                    };
                    self.digits(count, true);
                }
            }
        }

        fn float(&mut self) {
            match self.rng.below(7) {
                0 | 1 => {
                    // Any finite double, in one of Rust's forms.
                    let value = loop {
                        let value = f64::from_bits(self.rng.next());
                        if value.is_finite() {
                            break value;
                        }
                    };
                    let _ = match self.rng.below(4) {
                        0 => write!(self.doc, "{value:e}"),
                        1 => write!(self.doc, "{value:E}"),
                        2 => write!(self.doc, "{value:?}"),
                        _ => write!(self.doc, "{value}"),
                    };
                }
                2 => {
                    // A few digits, scaled around the fixed/scientific boundaries.
                    if self.rng.one_in(2) {
                        self.doc.push('-');
                    }
                    let n = 1 + self.rng.below(99_999);
                    let exponent = self.rng.below(51) as i64 - 25;
                    let e = *self.rng.pick(&["e", "E", ".0e", "e+", "E+"]);
                    let e = if exponent < 0 {
                        e.trim_end_matches('+')
                    } else {
                        e
                    };
                    let _ = write!(self.doc, "{n}{e}{exponent}");
                }
                3 => {
                    // Near the ends of the range: overflow, subnormals, underflow.
                    if self.rng.one_in(2) {
                        self.doc.push('-');
                    }
                    let base = *self.rng.pick(&[
                        "1.797693134862315",
                        "2.225073858507201",
                        "4.940656458412465",
                        "2.470328229206232",
                        "1",
                        "9.9",
                    ]);
                    self.doc.push_str(base);
                    let count = self.rng.below(8);
                    self.digits(count, false);
                    let exponent = *self.rng.pick(&[
                        "e308", "e309", "e-308", "e-324", "e-323", "e-325", "e400", "e-400",
                    ]);
                    self.doc.push_str(exponent);
                }
                4 => {
                    // Doubles written exactly, between 2^45 and 2^66, where two shortest
                    // forms are often as close (CPython takes the even one).
                    if self.rng.one_in(2) {
                        self.doc.push('-');
                    }
                    let magnitude = 2f64.powi(45 + self.rng.below(22) as i32);
                    let fraction = (self.rng.next() >> 12) as f64 / 2f64.powi(52);
                    let value = magnitude * (1.0 + fraction);
                    let _ = write!(self.doc, "{value:.7}");
                }
                _ => {
                    // Plain text: integer part, fraction, exponent, any of them long.
                    if self.rng.one_in(2) {
                        self.doc.push('-');
                    }
                    if self.rng.one_in(3) {
                        self.doc.push('0');
                    } else {
                        let count = 1 + self.rng.below(25);
                        self.digits(count, true);
                    }
                    let fraction = self.rng.one_in(2);
                    if fraction {
                        self.doc.push('.');
                        let count = 1 + self.rng.below(30);
                        self.digits(count, false);
                    }
                    if !fraction || self.rng.one_in(2) {
                        let e = *self.rng.pick(&["e", "E", "e+", "E-", "e-", "e0"]);
                        self.doc.push_str(e);
                        let count = 1 + self.rng.below(3);
                        self.digits(count, false);
                    }
                }
            }
        }

        /// A `\uXXXX` escape, in either case.
        fn escape(&mut self, unit: u32) {
            let _ = if self.rng.one_in(2) {
                write!(self.doc, "\\u{unit:04x}")
            } else {
                write!(self.doc, "\\u{unit:04X}")
            };
        }

        fn string(&mut self) {
            self.doc.push('"');
            let length = self.rng.below(12);
            for _ in 0..length {
                self.character();
            }
            self.doc.push('"');
        }

        fn character(&mut self) {
            let c = match self.rng.below(10) {
                0..=2 => char::from(0x20 + self.rng.below(0x5f) as u8),
                3 => *self
                    .rng
                    .pick(&['"', '\\', '/', '\u{7f}', '\u{2028}', '\u{feff}', '\u{ffff}']),
                4 => char::from(self.rng.below(0x20) as u8),
                5 => char::from_u32(0x80 + self.rng.below(0x780) as u32).unwrap(),
                6 => loop {
                    if let Some(c) = char::from_u32(0x800 + self.rng.below(0xf800) as u32) {
                        break c;
                    }
                },
                7 => char::from_u32(0x10000 + self.rng.below(0x100000) as u32).unwrap(),
                8 => *self.rng.pick(&['é', 'e', 'E', 'é', '中', '😀', '\u{e000}']),
                _ => {
                    // A surrogate escape, paired or not.
                    let unit = 0xd800 + self.rng.below(0x800) as u32;
                    self.escape(unit);
                    return;
                }
            };
            match c {
                '"' | '\\' if self.rng.one_in(2) => {
                    self.doc.push('\\');
                    self.doc.push(c);
                }
                '/' if self.rng.one_in(2) => self.doc.push_str("\\/"),
                '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' if self.rng.one_in(2) => {
                    let short = match c {
                        '\n' => "\\n",
                        '\r' => "\\r",
                        '\t' => "\\t",
                        '\u{8}' => "\\b",
                        _ => "\\f",
                    };
                    self.doc.push_str(short);
                }
                '"' | '\\' | '\u{0}'..='\u{1f}' => self.escape(u32::from(c)),
                _ if self.rng.one_in(3) => {
                    let mut units = [0; 2];
                    for unit in c.encode_utf16(&mut units) {
                        self.escape(u32::from(*unit));
                    }
                }
                _ => self.doc.push(c),
            }
        }

        fn object(&mut self, depth: u32) {
            self.doc.push('{');
            self.whitespace();
            let count = self.rng.below(7);
            for i in 0..count {
                if i > 0 {
                    self.doc.push(',');
                }
                self.whitespace();
                if self.rng.one_in(2) {
                    // Keys from a small set, so that some repeat (in other spellings, too).
                    let key = *self.rng.pick(&[
                        "a",
                        "b",
                        "A",
                        "aa",
                        "",
                        "\\u0061",
                        "é",
                        "\\u00e9",
                        "e\\u0301",
                        "中",
                        "😀",
                        "\\ud83d\\ude00",
                        "\\ue000",
                        "\\uffff",
                        "\\ud800",
                        "\\udfff",
                        "~",
                        "\\u007f",
                        "\\n",
                    ]);
                    let _ = write!(self.doc, "\"{key}\"");
                } else {
                    self.string();
                }
                self.whitespace();
                self.doc.push(':');
                self.value(depth + 1);
            }
            self.doc.push('}');
        }

        fn array(&mut self, depth: u32) {
            self.doc.push('[');
            self.whitespace();
            let count = self.rng.below(6);
            for i in 0..count {
                if i > 0 {
                    self.doc.push(',');
                }
                self.value(depth + 1);
            }
            self.doc.push(']');
        }
    }

    /// What CPython writes for each document (one `json.dumps(json.loads(doc),
    /// sort_keys=True)` a line, `ERROR` where `json.loads` raises), from one python3
    /// process.
    fn cpython(documents: &[String]) -> Vec<String> {
        let path = std::env::temp_dir().join(format!(
            "python_json_differential_{}_{:?}.jsonl",
            std::process::id(),
            std::thread::current().id(),
        ));
        // A line holds a document as a JSON string, so documents may hold line breaks.
        let mut lines = String::new();
        for document in documents {
            lines.push_str(&serde_json::to_string(document).unwrap());
            lines.push('\n');
        }
        std::fs::write(&path, lines).unwrap();
        const SCRIPT: &str = r#"
import json, sys
out = []
with open(sys.argv[1], "rb") as f:
    for line in f.read().split(b"\n")[:-1]:
        document = json.loads(line.decode("utf-8"))
        try:
            out.append(json.dumps(json.loads(document), sort_keys=True))
        except (ValueError, RecursionError):
            out.append("ERROR")
sys.stdout.write("\n".join(out) + "\n")
"#;
        // -I: no PYTHON* variable (PYTHONINTMAXSTRDIGITS) or user site changes json's behaviour.
        let output = std::process::Command::new("python3")
            .arg("-I")
            .arg("-c")
            .arg(SCRIPT)
            .arg(&path)
            .output();
        let _ = std::fs::remove_file(&path);
        let output = output.expect(
            "the differential test runs CPython: python3 must be on PATH (install python3)",
        );
        assert!(
            output.status.success(),
            "python3 failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let stdout = String::from_utf8(output.stdout).expect("CPython writes ASCII");
        stdout.lines().map(str::to_owned).collect()
    }

    #[test]
    fn random_documents_match_cpython() {
        let mut generator = Gen {
            rng: Rng(0x5eed_2c0f_fee1_dead),
            doc: String::new(),
        };
        let mut documents = Vec::new();
        for i in 0..6000 {
            generator.doc.clear();
            match i % 3 {
                // Top-level numbers and strings alone, for a closer look at them.
                0 if i % 2 == 0 => generator.float(),
                0 => generator.string(),
                _ => generator.value(0),
            }
            documents.push(generator.doc.clone());
        }
        let expected = cpython(&documents);
        assert_eq!(
            expected.len(),
            documents.len(),
            "one line per document from python3"
        );
        let mut mismatches = Vec::new();
        let mut errors = 0;
        for (document, expected) in documents.iter().zip(&expected) {
            let written = match dumps(document) {
                Ok(written) => written,
                Err(_) => {
                    errors += 1;
                    "ERROR".to_owned()
                }
            };
            if &written != expected {
                mismatches.push(format!(
                    "document {document:?}\n  python3: {expected}\n  dumps:   {written}"
                ));
            }
        }
        assert!(
            mismatches.is_empty(),
            "{} of {} documents differ from CPython:\n{}",
            mismatches.len(),
            documents.len(),
            mismatches[..mismatches.len().min(10)].join("\n")
        );
        // The oversized integers, and nothing else, are refused.
        assert!(errors < documents.len() / 20, "{errors} errors");
    }
}
