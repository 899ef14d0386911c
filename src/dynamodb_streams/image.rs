//! A stream image (DynamoDB JSON) as plain JSON text, the same bytes every time: object keys
//! sorted, sets sorted, numbers as DynamoDB wrote them (never through `f64`), binary values
//! as base64 strings.

use std::collections::HashMap;

use base64::Engine as _;
use serde_dynamo::AttributeValue;
use serde_json::value::RawValue;

/// `image` as a JSON object.
pub(crate) fn to_json(image: &HashMap<String, AttributeValue>) -> String {
    let mut out = String::new();
    write_map(image, &mut out);
    out
}

fn write_map(map: &HashMap<String, AttributeValue>, out: &mut String) {
    let mut entries: Vec<_> = map.iter().collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    out.push('{');
    for (i, (name, value)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(name, out);
        out.push(':');
        write_value(value, out);
    }
    out.push('}');
}

fn write_string(text: &str, out: &mut String) {
    // Serializing a string cannot fail.
    out.push_str(&serde_json::to_string(text).unwrap_or_default());
}

/// A DynamoDB number as it was written (DynamoDB writes numbers in a normal form), when it
/// is a JSON number too; as a string otherwise.
fn write_number(number: &str, out: &mut String) {
    let trimmed = number.trim_matches(|c: char| matches!(c, ' ' | '\t' | '\n' | '\r'));
    let is_json_number = trimmed.starts_with(|c: char| c == '-' || c.is_ascii_digit())
        && serde_json::from_str::<&RawValue>(trimmed).is_ok();
    if is_json_number {
        out.push_str(trimmed);
    } else {
        write_string(number, out);
    }
}

fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn write_array<'a>(items: impl Iterator<Item = &'a str>, number: bool, out: &mut String) {
    let mut items: Vec<&str> = items.collect();
    items.sort_unstable();
    out.push('[');
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        if number {
            write_number(item, out);
        } else {
            write_string(item, out);
        }
    }
    out.push(']');
}

fn write_value(value: &AttributeValue, out: &mut String) {
    match value {
        AttributeValue::S(text) => write_string(text, out),
        AttributeValue::N(number) => write_number(number, out),
        AttributeValue::Bool(flag) => out.push_str(if *flag { "true" } else { "false" }),
        AttributeValue::Null(_) => out.push_str("null"),
        AttributeValue::B(bytes) => write_string(&base64(bytes), out),
        AttributeValue::M(map) => write_map(map, out),
        AttributeValue::L(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(item, out);
            }
            out.push(']');
        }
        AttributeValue::Ss(items) => write_array(items.iter().map(String::as_str), false, out),
        AttributeValue::Ns(items) => write_array(items.iter().map(String::as_str), true, out),
        AttributeValue::Bs(items) => {
            let encoded: Vec<String> = items.iter().map(|b| base64(b)).collect();
            write_array(encoded.iter().map(String::as_str), false, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_plain_json_with_exact_numbers_and_a_stable_order() {
        let image: HashMap<String, AttributeValue> = [
            (
                "b".to_string(),
                AttributeValue::N("0.10000000000000000001".into()),
            ),
            ("a".to_string(), AttributeValue::S("x\"y".into())),
            (
                "c".to_string(),
                AttributeValue::M([("k".to_string(), AttributeValue::Bool(true))].into()),
            ),
            (
                "d".to_string(),
                AttributeValue::Ss(vec!["z".into(), "a".into()]),
            ),
            ("e".to_string(), AttributeValue::Null(true)),
            ("f".to_string(), AttributeValue::B(b"hi".to_vec())),
            ("g".to_string(), AttributeValue::N("NaN".into())),
            ("h".to_string(), AttributeValue::N(" 5 ".into())),
        ]
        .into();
        let json = to_json(&image);
        assert_eq!(
            json,
            r#"{"a":"x\"y","b":0.10000000000000000001,"c":{"k":true},"d":["a","z"],"e":null,"f":"aGk=","g":"NaN","h":5}"#
        );
        assert_eq!(to_json(&image), json, "the same bytes every time");
        serde_json::from_str::<serde_json::Value>(&json).unwrap();
    }
}
