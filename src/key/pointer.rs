//! JSON pointers (RFC 6901) into JSON text: the raw text of the value a pointer selects,
//! found without building the document (each object is scanned for its one member).

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::canonical::{too_deep, MAX_DEPTH};
use crate::key::KeyError;

/// The raw text of the value that the JSON pointer (RFC 6901) selects in the JSON text
/// `document`, or `None` when it selects nothing.
pub(crate) fn select<'a>(
    document: &'a str,
    pointer: &str,
) -> Result<Option<&'a str>, serde_json::Error> {
    let container = matches!(document.trim_start().as_bytes().first(), Some(b'{' | b'['));
    let mut current: &'a str = match pointer.strip_prefix('/') {
        // The first step parses the whole document as its object or array, which checks it:
        // no separate pass.
        Some(_) if container => document,
        _ => serde_json::from_str::<&'a RawValue>(document)?.get(),
    };
    if pointer.is_empty() {
        return Ok(Some(current));
    }
    let Some(tokens) = pointer.strip_prefix('/') else {
        return Ok(None);
    };
    for (depth, token) in tokens.split('/').enumerate() {
        if depth > MAX_DEPTH {
            return Err(too_deep());
        }
        let token: Cow<'_, str> = if token.contains('~') {
            Cow::Owned(token.replace("~1", "/").replace("~0", "~"))
        } else {
            Cow::Borrowed(token)
        };
        let next: Option<&'a RawValue> = match current.trim_start().as_bytes().first() {
            Some(b'{') => member(current, &token)?,
            Some(b'[') => {
                let items: Vec<&'a RawValue> = serde_json::from_str(current)?;
                let canonical_index = token == "0" || !token.starts_with('0');
                token
                    .parse::<usize>()
                    .ok()
                    .filter(|_| canonical_index && token.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|i| items.get(i).copied())
            }
            _ => None,
        };
        match next {
            Some(value) => current = value.get(),
            None => return Ok(None),
        }
    }
    Ok(Some(current))
}

/// The value of the member `name` of the JSON object `object` (the last, if repeated), read
/// member by member: nothing is collected, and a key is decoded only when it has an escape.
fn member<'a>(object: &'a str, name: &str) -> Result<Option<&'a RawValue>, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_str(object);
    let found = Member(name).deserialize(&mut deserializer)?;
    deserializer.end()?;
    Ok(found)
}

/// Finds one member of an object.
struct Member<'n>(&'n str);

impl<'de> DeserializeSeed<'de> for Member<'_> {
    type Value = Option<&'de RawValue>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Member<'_> {
    type Value = Option<&'de RawValue>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut members: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(key) = members.next_key_seed(Key)? {
            let value: &'de RawValue = members.next_value()?;
            if key == self.0 {
                found = Some(value);
            }
        }
        Ok(found)
    }
}

/// An object's key: borrowed from the text, or decoded when it has an escape.
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E>(self, key: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(key))
    }

    fn visit_str<E>(self, key: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(key.to_owned()))
    }
}

/// The JSON list of the values `pointers` select in `body`, `null` where one selects nothing
/// (a JMESPath multi-select list): raw text, so numbers keep their literal form.
pub(crate) fn selected_list(body: &str, pointers: &[String]) -> Result<String, KeyError> {
    let mut list = String::from("[");
    for (i, pointer) in pointers.iter().enumerate() {
        if i > 0 {
            list.push(',');
        }
        let raw = select(body, pointer).map_err(KeyError::BodyNotJson)?;
        list.push_str(raw.unwrap_or("null"));
    }
    list.push(']');
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pointer_into_an_invalid_document_is_an_error() {
        for bad in [
            r#"{"a":1} x"#,
            r#"{"a":1,}"#,
            r#"{"a":[1,}"#,
            "[1] 2",
            "[1,",
            "tru",
        ] {
            assert!(select(bad, "/a").is_err(), "{bad:?}");
            assert!(select(bad, "/0").is_err(), "{bad:?}");
        }
        assert_eq!(
            select(r#" {"a" : [1, {"b": "x"}]} "#, "/a/1/b").unwrap(),
            Some(r#""x""#)
        );
        assert_eq!(select(" 7 ", "").unwrap(), Some("7"));
    }

    #[test]
    fn pointers_follow_rfc_6901() {
        let doc = r#"{"a":{"b/c":[10,{"~d":"x"}]},"":1,"n":null}"#;
        assert_eq!(select(doc, "").unwrap(), Some(doc));
        assert_eq!(select(doc, "/a/b~1c/0").unwrap(), Some("10"));
        assert_eq!(select(doc, "/a/b~1c/1/~0d").unwrap(), Some(r#""x""#));
        assert_eq!(select(doc, "/").unwrap(), Some("1"));
        assert_eq!(select(doc, "/n").unwrap(), Some("null"));
        assert_eq!(select(doc, "/a/b~1c/01").unwrap(), None);
        assert_eq!(select(doc, "/a/b~1c/2").unwrap(), None);
        assert_eq!(select(doc, "/missing/x").unwrap(), None);
        assert_eq!(select(doc, "a").unwrap(), None);
        assert!(select("{", "/a").is_err());
    }

    #[test]
    fn keys_with_escapes_and_repeated_keys() {
        assert_eq!(select(r#"{"a~b":1,"c/d":2}"#, "/a~0b").unwrap(), Some("1"));
        assert_eq!(select(r#"{"a~b":1,"c/d":2}"#, "/c~1d").unwrap(), Some("2"));
        assert_eq!(select(r#"{"\u0061":1}"#, "/a").unwrap(), Some("1"));
        // The last of repeated keys wins, as in the canonical form.
        assert_eq!(select(r#"{"a":1,"a":2}"#, "/a").unwrap(), Some("2"));
        assert_eq!(select(r#"{"a":1,"\u0061":2}"#, "/a").unwrap(), Some("2"));
        assert_eq!(
            select(r#"{"\u0061":1,"a":2,"b":3}"#, "/a").unwrap(),
            Some("2")
        );
        assert!(select(r#"{"a":1,"a"}"#, "/a").is_err());
        assert!(select(r#"{"a":1} "#, "/a").is_ok());
    }

    #[test]
    fn deep_values_are_selected_whole() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        let doc = format!("{{\"id\":{}}}", deep(50_000));
        assert_eq!(select(&doc, "/id").unwrap().map(str::len), Some(100_000));
    }
}
