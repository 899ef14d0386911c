//! Canonical JSON with exact numbers: the form that key material and payload hashes are
//! built from.
//!
//! It works on the JSON text (through `serde_json::value::RawValue`), never on
//! `serde_json::Value` numbers, so `0.1` and `0.10000000000000000001` stay different,
//! integers past `u64` keep every digit, and the bytes do not depend on serde_json's
//! `arbitrary_precision` or `preserve_order` features, which another crate in the build may
//! switch on.
//!
//! The form: no whitespace; object members sorted by the UTF-8 bytes of their keys (the last
//! of duplicate keys wins, as in `serde_json::Value`); strings decoded, then written as
//! serde_json escapes them; numbers by exact decimal value as `[-]<digits>e<exponent>` with
//! no leading or trailing zeros in the digits (`1`, `1.0` and `10e-1` are all `1e0`; zero
//! is `0`).
//!
//! A Rust value's canonical JSON (a function's arguments) is this form
//! of the text serde_json writes for it, with the elements of its hash sets sorted.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::value::RawValue;

mod value;

pub(crate) use value::serialized_text;

/// The deepest nesting accepted, as serde_json's own parser (`RawValue` skips nested values
/// without that limit, so it is enforced here: a deeper body is an error, never a stack
/// overflow).
pub(crate) const MAX_DEPTH: usize = 128;

/// The canonical form of the JSON text `raw` (one JSON value).
pub(crate) fn canonical(raw: &str) -> Result<String, serde_json::Error> {
    // Room for a few exponents (`-3` becomes `-3e0`), so that a small body's form is
    // written without growing the string.
    let mut out = String::with_capacity(raw.len() + 16);
    write_value(raw, &mut out, 0)?;
    Ok(out)
}

pub(crate) fn too_deep() -> serde_json::Error {
    serde::de::Error::custom(format_args!("JSON nested deeper than {MAX_DEPTH} levels"))
}

fn write_value(raw: &str, out: &mut String, depth: usize) -> Result<(), serde_json::Error> {
    if depth > MAX_DEPTH {
        return Err(too_deep());
    }
    let raw = raw.trim_matches(|c: char| matches!(c, ' ' | '\t' | '\n' | '\r'));
    match raw.as_bytes().first() {
        Some(b'{') => {
            // Keys without escapes (the usual case) are borrowed from the text; a key with
            // an escape makes serde_json refuse the borrow, and the keys are decoded instead.
            match serde_json::from_str::<BTreeMap<&str, &RawValue>>(raw) {
                // No escape in the text: none needed in the output either.
                Ok(members) => write_members(&members, out, depth, |key, out| {
                    out.push('"');
                    out.push_str(key);
                    out.push('"');
                    Ok(())
                })?,
                Err(_) => {
                    let members: BTreeMap<String, &RawValue> = serde_json::from_str(raw)?;
                    write_members(&members, out, depth, |key, out| {
                        out.push_str(&serde_json::to_string(key)?);
                        Ok(())
                    })?;
                }
            }
        }
        Some(b'[') => {
            let items: Vec<&RawValue> = serde_json::from_str(raw)?;
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item.get(), out, depth + 1)?;
            }
            out.push(']');
        }
        Some(b'"') => {
            // A value inside an object or array was checked, escapes and all, when its
            // container was parsed (serde_json checks what it reads into a `RawValue`): only
            // a string at the top is checked here. Without escapes the text is already the
            // form serde_json writes: a valid JSON string holds no quote, backslash or control
            // character unescaped.
            let plain =
                !raw.contains('\\') && (depth > 0 || serde_json::from_str::<&str>(raw).is_ok());
            if plain {
                out.push_str(raw);
            } else {
                let text: String = serde_json::from_str(raw)?;
                out.push_str(&serde_json::to_string(&text)?);
            }
        }
        _ => {
            // `true`, `false`, `null` or a number: checked by its container, or here at the top.
            if depth == 0 {
                let _: &RawValue = serde_json::from_str(raw)?;
            }
            match raw {
                "true" | "false" | "null" => out.push_str(raw),
                number => write_number(number, out),
            }
        }
    }
    Ok(())
}

/// Writes an object's `members`, already in key order, each key as `write_key` writes it.
fn write_members<K: AsRef<str>>(
    members: &BTreeMap<K, &RawValue>,
    out: &mut String,
    depth: usize,
    write_key: impl Fn(&str, &mut String) -> Result<(), serde_json::Error>,
) -> Result<(), serde_json::Error> {
    out.push('{');
    for (i, (key, value)) in members.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_key(key.as_ref(), out)?;
        out.push(':');
        write_value(value.get(), out, depth + 1)?;
    }
    out.push('}');
    Ok(())
}

/// Writes a JSON number token (already checked by serde_json) by its exact decimal value;
/// integers, the usual case, without building the general form.
fn write_number(token: &str, out: &mut String) {
    let unsigned = token.strip_prefix('-').unwrap_or(token);
    if !unsigned.bytes().all(|b| b.is_ascii_digit()) {
        out.push_str(&exact_number(token));
        return;
    }
    let digits = unsigned.trim_start_matches('0');
    let significant = digits.trim_end_matches('0');
    if significant.is_empty() {
        out.push('0');
        return;
    }
    if unsigned.len() < token.len() {
        out.push('-');
    }
    out.push_str(significant);
    out.push('e');
    // Writing to a String cannot fail.
    let _ = write!(out, "{}", digits.len() - significant.len());
}

/// A JSON number token (already checked by serde_json) by its exact decimal value.
fn exact_number(token: &str) -> String {
    let (negative, unsigned) = match token.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, token),
    };
    let (mantissa, exponent_text) = match unsigned.find(['e', 'E']) {
        Some(at) => (&unsigned[..at], &unsigned[at + 1..]),
        None => (unsigned, "0"),
    };
    let (integer, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits: String = integer.chars().chain(fraction.chars()).collect();
    let digits = digits.trim_start_matches('0');
    let significant = digits.trim_end_matches('0');
    if significant.is_empty() {
        return "0".into();
    }
    // The value is significant × 10^(exponent − fraction digits + trailing zeros dropped).
    // The shift is at most the token's length; the exponent may have any number of digits.
    let shift = (digits.len() - significant.len()) as i128 - fraction.len() as i128;
    let exponent_negative = exponent_text.starts_with('-');
    let exponent_digits = exponent_text.trim_start_matches(['+', '-']);
    let exponent = shifted(exponent_negative, exponent_digits, shift);
    let sign = if negative { "-" } else { "" };
    format!("{sign}{significant}e{exponent}")
}

/// The decimal integer `±magnitude` (digits, any length) plus `shift`, as canonical text.
fn shifted(negative: bool, magnitude: &str, shift: i128) -> String {
    let magnitude = magnitude.trim_start_matches('0');
    if magnitude.len() <= 36 {
        let value: i128 = magnitude.parse().unwrap_or(0);
        return (if negative { -value } else { value } + shift).to_string();
    }
    // |exponent| ≥ 10^36 > |shift|: the sign stays the exponent's, and the magnitude moves by
    // |shift|, up when both have the same sign, down otherwise.
    let grow = (shift >= 0) != negative;
    let mut digits: Vec<u8> = magnitude.bytes().rev().map(|b| b - b'0').collect();
    let mut carry = shift.unsigned_abs();
    for digit in digits.iter_mut() {
        if carry == 0 {
            break;
        }
        let step = (carry % 10) as u8;
        carry /= 10;
        if grow {
            let sum = *digit + step;
            *digit = sum % 10;
            carry += u128::from(sum / 10);
        } else if *digit >= step {
            *digit -= step;
        } else {
            *digit = *digit + 10 - step;
            carry += 1;
        }
    }
    if carry > 0 {
        digits.extend(carry.to_string().bytes().rev().map(|b| b - b'0'));
    }
    while digits.len() > 1 && digits.last() == Some(&0) {
        digits.pop();
    }
    let text: String = digits.iter().rev().map(|d| char::from(b'0' + d)).collect();
    if negative {
        format!("-{text}")
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(raw: &str) -> String {
        canonical(raw).unwrap()
    }

    #[test]
    fn members_are_sorted_and_whitespace_dropped() {
        assert_eq!(
            c(r#" { "b" : 1, "a" : { "y" : [1, {"d":2,"c":3}], "x" : null } } "#),
            r#"{"a":{"x":null,"y":[1e0,{"c":3e0,"d":2e0}]},"b":1e0}"#
        );
        assert_eq!(c(r#"{"k\"":"é\n"}"#), "{\"k\\\"\":\"é\\n\"}");
        assert_eq!(c(r#""\u00e9""#), c(r#""é""#));
    }

    #[test]
    fn numbers_keep_their_exact_value() {
        assert_eq!(c("1"), "1e0");
        assert_eq!(c("1.0"), "1e0");
        assert_eq!(c("10e-1"), "1e0");
        assert_eq!(c("100"), "1e2");
        assert_eq!(c("-0.0"), "0");
        assert_eq!(c("0e7"), "0");
        assert_eq!(c("-1.50E+2"), "-15e1");
        assert_ne!(c("0.1"), c("0.10000000000000000001"));
        assert_ne!(c("18446744073709551616"), c("18446744073709551617"));
        assert_ne!(
            c("123456789012345678901234567890"),
            c("123456789012345678901234567891")
        );
        assert_eq!(c("1e0000000000000000000000000000000000000000005"), "1e5");
        // Exponents of any length compare by value.
        let nines = "9".repeat(40);
        assert_eq!(c(&format!("1e{nines}")), format!("1e{nines}"));
        let ten_36 = format!("1{}", "0".repeat(36));
        assert_eq!(
            c(&format!("1e{ten_36}")),
            c(&format!("10e{}", "9".repeat(36)))
        );
        assert_eq!(
            c(&format!("1e-{ten_36}")),
            c(&format!("0.1e-{}", "9".repeat(36)))
        );
        assert_eq!(
            c(&format!("100e{nines}")),
            format!("1e1{}1", "0".repeat(39))
        );
        assert_eq!(
            c(&format!("0.01e-{nines}")),
            format!("1e-1{}1", "0".repeat(39))
        );
        assert_eq!(c(&format!("0e{}", "1".repeat(40))), "0");
    }

    #[test]
    fn the_integer_and_unescaped_shortcuts_give_the_general_form() {
        for token in [
            "0",
            "-0",
            "000",
            "7",
            "-7",
            "10",
            "100",
            "-1200",
            "120034000",
            "00012",
            "12345678901234567890123456789012345678901234567890",
        ] {
            let mut fast = String::new();
            write_number(token, &mut fast);
            assert_eq!(fast, exact_number(token), "{token}");
        }
        // Borrowed keys and strings, or decoded ones: the same bytes for the same value.
        assert_eq!(
            c(r#"{"b":"x","a":"y"}"#),
            c(r#"{"\u0062":"\u0078","a":"y"}"#)
        );
        assert_eq!(c(r#"{"a":1,"a":2}"#), r#"{"a":2e0}"#);
        assert_eq!(c(r#"{"a":1,"\u0061":2}"#), r#"{"a":2e0}"#);
        assert_eq!(c(r#""tab\there""#), "\"tab\\there\"");
        assert_eq!(c(r#""\/""#), r#""/""#);
    }

    #[test]
    fn invalid_json_is_an_error() {
        for bad in ["", "{", "01", "1.", "tru", "\"x", "[1,]", "{\"a\"}"] {
            assert!(canonical(bad).is_err(), "{bad:?}");
        }
        // Inside a container too (checked by the container's parse, not again per value).
        for bad in [
            "[01]",
            "[1.]",
            "[-]",
            "{\"a\":tru}",
            "[\"\\x\"]",
            "{\"a\":\"\\u12\"}",
            "[\"tab\there\"]",
            "[\"\\\"]",
            "\"\\x\"",
            "\"tab\there\"",
        ] {
            assert!(canonical(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(canonical(&deep(MAX_DEPTH)).is_ok());
        // Run where a Lambda record runs: a 2 MiB thread stack.
        let handle = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || canonical(&deep(50_000)).is_err())
            .unwrap();
        assert!(handle.join().unwrap());
    }
}
