//! The built-in key extractors, for any [`Input`].

use crate::canonical::canonical;
use crate::input::{AttributeValue, Identified, Input};
use crate::key::pointer::{select, selected_list};
use crate::key::{non_empty, KeyError, KeyExtractor};

/// Keys on a batch record's own id ([`Input::id`]; SQS: the `messageId`; Kinesis and
/// DynamoDB Streams: the `eventID`), the default. Catches redeliveries by the source, not
/// producer retries.
///
/// Implemented for the batch records only ([`Identified`]): a whole invocation, an HTTP request or a
/// function's arguments carry no id unique per event, so a layer keyed by `MessageId` does
/// not compile there; choose a key with [`IdempotencyLayer::with_key`](crate::IdempotencyLayer::with_key).
///
/// ```compile_fail,E0277
/// use lambda_idempotency::store::InMemoryStore;
/// use lambda_idempotency::IdempotencyLayer;
/// use lambda_runtime::{service_fn, LambdaEvent};
/// async fn refund(event: LambdaEvent<serde_json::Value>) -> Result<u64, lambda_runtime::Error> {
///     Ok(1)
/// }
/// let layer = IdempotencyLayer::new(InMemoryStore::new());
/// // error: `MessageId` cannot derive an idempotency key from a whole invocation's event
/// let function = layer.invocation(service_fn(refund));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct MessageId;

impl<I: Identified + ?Sized> KeyExtractor<I> for MessageId {
    fn key_material(&self, input: &I) -> Result<Vec<u8>, KeyError> {
        let id = input.id().ok_or(KeyError::MissingMessageId)?;
        non_empty(id.as_bytes().to_vec())
    }
}

/// Keys on a message attribute's string (or binary) value, e.g. `Idempotency-Key`.
///
/// A string value is used as its text (the same key as a JSON string field with that text,
/// see [`JsonPointer`]); a binary value as its bytes after a tag byte that no text and no
/// JSON material starts with, so binary bytes never collide with either.
#[derive(Debug, Clone)]
pub struct MessageAttribute {
    name: String,
}

impl MessageAttribute {
    /// Keys on the attribute called `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self { name: name.into() }
    }
}

impl<I: Input + ?Sized> KeyExtractor<I> for MessageAttribute {
    /// The attribute's string value: Powertools' `messageAttributes."<name>".stringValue`,
    /// which a binary attribute does not have (absent, as `null` is to JMESPath).
    fn key_json(&self, input: &I) -> Result<String, KeyError> {
        match input.attribute(&self.name) {
            Some(AttributeValue::Text(text)) if !text.is_empty() => {
                Ok(serde_json::Value::String(text.to_string()).to_string())
            }
            _ => Err(KeyError::MissingAttribute {
                name: self.name.clone(),
            }),
        }
    }

    fn key_material(&self, input: &I) -> Result<Vec<u8>, KeyError> {
        let missing = || KeyError::MissingAttribute {
            name: self.name.clone(),
        };
        match input.attribute(&self.name).ok_or_else(missing)? {
            AttributeValue::Text(text) if !text.is_empty() => Ok(text.as_bytes().to_vec()),
            AttributeValue::Binary(bytes) if !bytes.is_empty() => {
                Ok([&[BINARY_MATERIAL_TAG], bytes].concat())
            }
            _ => Err(missing()),
        }
    }
}

/// Keys on the value a JSON pointer (RFC 6901, e.g. `/order/id`) selects in the body.
///
/// A string value is used as it is (decoded), so the body field `"eventId": "evt-1"` and a
/// message attribute `evt-1` give the same key: [`MessageAttribute`]`.or(JsonPointer)`
/// relies on it. Any other value (number, boolean, object, array) keeps its JSON type: it is
/// used as canonical JSON (sorted object keys, numbers by their exact decimal value, never
/// through `f64`) after a byte that no text contains, so the number `1` and the string `"1"`,
/// `true` and `"true"`, or `[1,2]` and `"[1,2]"` are different keys, and so are integers
/// past `u64` that differ in any digit. `null` counts as absent.
#[derive(Debug, Clone)]
pub struct JsonPointer {
    pointer: String,
}

impl JsonPointer {
    /// Keys on the value at `pointer`.
    pub fn new(pointer: impl Into<String>) -> Self {
        Self {
            pointer: pointer.into(),
        }
    }
}

/// Marks key material that is canonical JSON rather than text: `0xFF` never occurs in
/// UTF-8, so no string value (or string attribute) can produce the same bytes.
pub(super) const JSON_MATERIAL_TAG: u8 = 0xFF;

/// Marks key material that is a binary attribute's bytes: `0xFE` never occurs in UTF-8 either,
/// and differs from [`JSON_MATERIAL_TAG`].
pub(super) const BINARY_MATERIAL_TAG: u8 = 0xFE;

impl JsonPointer {
    /// The raw text of the non-`null` value the pointer selects in `input`'s body.
    fn selected<'a>(&self, body: &'a [u8]) -> Result<&'a str, KeyError> {
        let body = json_text(body)?;
        let not_found = || KeyError::PointerNotFound {
            pointer: self.pointer.clone(),
        };
        let raw = select(body, &self.pointer)
            .map_err(KeyError::BodyNotJson)?
            .ok_or_else(not_found)?;
        if raw.starts_with('n') {
            return Err(not_found());
        }
        Ok(raw)
    }
}

impl<I: Input + ?Sized> KeyExtractor<I> for JsonPointer {
    fn key_material(&self, input: &I) -> Result<Vec<u8>, KeyError> {
        let body = input.body().ok_or(KeyError::MissingBody)?;
        let raw = self.selected(&body)?;
        match raw.as_bytes().first() {
            Some(b'"') => {
                let text: String = serde_json::from_str(raw).map_err(KeyError::BodyNotJson)?;
                non_empty(text.into_bytes())
            }
            _ => {
                let json = canonical(raw).map_err(KeyError::BodyNotJson)?;
                Ok([&[JSON_MATERIAL_TAG], json.as_bytes()].concat())
            }
        }
    }

    fn key_json(&self, input: &I) -> Result<String, KeyError> {
        let body = input.written_body().ok_or(KeyError::MissingBody)?;
        Ok(self.selected(&body)?.to_string())
    }
}

/// Keys on the values several JSON pointers select in the body, together: Powertools'
/// multi-select list (`[powertools_json(body).a, powertools_json(body).b]`).
///
/// The key material is the canonical JSON list of the selected values, `null` where a
/// pointer selects nothing; the key is absent ([`KeyError::PointerNotFound`]) when every
/// pointer selects nothing (or `null`), as Powertools counts a list of `None`s missing.
#[derive(Debug, Clone)]
pub struct JsonPointers {
    pointers: Vec<String>,
}

impl JsonPointers {
    /// Keys on the values at `pointers`, in this order.
    pub fn new<P: Into<String>>(pointers: impl IntoIterator<Item = P>) -> Self {
        Self {
            pointers: pointers.into_iter().map(Into::into).collect(),
        }
    }
}

impl<I: Input + ?Sized> KeyExtractor<I> for JsonPointers {
    fn key_material(&self, input: &I) -> Result<Vec<u8>, KeyError> {
        let body = input.body().ok_or(KeyError::MissingBody)?;
        let list = selected_list(json_text(&body)?, &self.pointers)?;
        let values: Vec<&serde_json::value::RawValue> =
            serde_json::from_str(&list).map_err(KeyError::BodyNotJson)?;
        if values.iter().all(|v| v.get() == "null") {
            return Err(KeyError::PointerNotFound {
                pointer: self.pointers.join(", "),
            });
        }
        let json = canonical(&list).map_err(KeyError::BodyNotJson)?;
        Ok([&[JSON_MATERIAL_TAG], json.as_bytes()].concat())
    }

    /// The list, `null`s and all: a list of `null`s is no key to Powertools
    /// ([`KeyError::Empty`]), but a true value to JMESPath's `||`, so no fallback is tried.
    fn key_json(&self, input: &I) -> Result<String, KeyError> {
        let body = input.written_body().ok_or(KeyError::MissingBody)?;
        selected_list(json_text(&body)?, &self.pointers)
    }
}

/// The body as JSON text: a body that is not UTF-8 is not JSON either.
pub(crate) fn json_text(body: &[u8]) -> Result<&str, KeyError> {
    std::str::from_utf8(body)
        .map_err(|err| KeyError::BodyNotJson(<serde_json::Error as serde::de::Error>::custom(err)))
}

/// Keys on the whole body, byte for byte: identical bodies are one message.
#[derive(Debug, Clone, Copy, Default)]
pub struct BodyHash;

impl<I: Input + ?Sized> KeyExtractor<I> for BodyHash {
    fn key_material(&self, input: &I) -> Result<Vec<u8>, KeyError> {
        let body = input.body().ok_or(KeyError::MissingBody)?;
        non_empty(body.into_owned())
    }

    /// The body as written, as a JSON string: Powertools' `body`.
    fn key_json(&self, input: &I) -> Result<String, KeyError> {
        let body = input.written_body().ok_or(KeyError::MissingBody)?;
        let text = std::str::from_utf8(&body).map_err(|_| KeyError::NotText)?;
        Ok(serde_json::Value::String(text.to_string()).to_string())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::input::Serialized;
    use crate::key::IdempotencyKey;
    use aws_lambda_events::sqs::{SqsMessage, SqsMessageAttribute};

    /// Key material of an SQS message.
    fn material(key: &impl KeyExtractor<SqsMessage>, m: &SqsMessage) -> Result<Vec<u8>, KeyError> {
        key.key_material(m)
    }

    fn message(body: &str) -> SqsMessage {
        let mut m = SqsMessage::default();
        m.message_id = Some("m-1".into());
        m.body = Some(body.into());
        m
    }

    fn with_attribute(mut m: SqsMessage, name: &str, value: &str) -> SqsMessage {
        let mut attr = SqsMessageAttribute::default();
        attr.string_value = Some(value.into());
        attr.data_type = Some("String".into());
        m.message_attributes.insert(name.into(), attr);
        m
    }

    #[test]
    fn stored_key_is_prefix_and_digest_only() {
        let key = IdempotencyKey::derive("orders", b"secret-order-42");
        assert!(key.as_str().starts_with("orders#"));
        assert_eq!(key.as_str().len(), "orders#".len() + 64);
        assert!(!key.as_str().contains("secret"));
        assert_ne!(key, IdempotencyKey::derive("billing", b"secret-order-42"));
    }

    #[test]
    fn message_id_is_the_default_source() {
        assert_eq!(MessageId.key_material(&message("x")).unwrap(), b"m-1");
        let mut m = message("x");
        m.message_id = None;
        assert!(matches!(
            MessageId.key_material(&m),
            Err(KeyError::MissingMessageId)
        ));
    }

    #[test]
    fn pointer_takes_strings_raw_and_other_values_canonically() {
        let m = message(r#"{"id":"abc","n":{"b":1,"a":2},"z":null}"#);
        assert_eq!(JsonPointer::new("/id").key_material(&m).unwrap(), b"abc");
        assert_eq!(
            JsonPointer::new("/n").key_material(&m).unwrap(),
            b"\xFF{\"a\":2e0,\"b\":1e0}"
        );
        assert!(matches!(
            JsonPointer::new("/z").key_material(&m),
            Err(KeyError::PointerNotFound { .. })
        ));
        assert!(matches!(
            JsonPointer::new("/id").key_material(&message("not json")),
            Err(KeyError::BodyNotJson(_))
        ));
    }

    #[test]
    fn pointer_keys_keep_the_json_type_and_exact_numbers() {
        let key = |body: &str| {
            JsonPointer::new("/id")
                .key_material(&message(body))
                .unwrap()
        };
        for (a, b) in [
            (r#"{"id":"1"}"#, r#"{"id":1}"#),
            (r#"{"id":"true"}"#, r#"{"id":true}"#),
            (r#"{"id":"[1,2]"}"#, r#"{"id":[1,2]}"#),
            (r#"{"id":"{}"}"#, r#"{"id":{}}"#),
            (
                r#"{"id":18446744073709551616}"#,
                r#"{"id":18446744073709551617}"#,
            ),
            (r#"{"id":0.1}"#, r#"{"id":0.10000000000000000001}"#),
        ] {
            assert_ne!(key(a), key(b), "{a} and {b} must differ");
        }
        // The same number written differently is the same key.
        assert_eq!(key(r#"{"id":1.0}"#), key(r#"{"id":1}"#));
        // A string field and an attribute with the same text are one key (documented).
        let either = MessageAttribute::new("Idempotency-Key").or(JsonPointer::new("/id"));
        let by_attribute = with_attribute(message("{}"), "Idempotency-Key", "evt-1");
        assert_eq!(
            material(&either, &by_attribute).unwrap(),
            key(r#"{"id":"evt-1"}"#)
        );
    }

    #[test]
    fn binary_attributes_never_share_a_key_with_text_or_json() {
        use aws_lambda_events::encodings::Base64Data;
        let binary = |bytes: &[u8]| {
            let mut m = message("{}");
            let mut attr = SqsMessageAttribute::default();
            attr.data_type = Some("Binary".into());
            let mut data = Base64Data::default();
            data.extend_from_slice(bytes);
            attr.binary_value = Some(data);
            m.message_attributes.insert("k".into(), attr);
            m
        };
        let key = MessageAttribute::new("k").or(JsonPointer::new("/id"));
        let json_one = material(&key, &message(r#"{"id":1}"#)).unwrap();
        let text = material(&key, &with_attribute(message("{}"), "k", "abc")).unwrap();
        assert_ne!(material(&key, &binary(&json_one)).unwrap(), json_one);
        assert_ne!(material(&key, &binary(b"abc")).unwrap(), text);
        assert!(matches!(
            material(&key, &binary(b"")),
            Err(KeyError::PointerNotFound { .. })
        ));
    }

    #[test]
    fn attribute_falls_back_to_pointer_only_when_absent() {
        let key = MessageAttribute::new("Idempotency-Key").or(JsonPointer::new("/eventId"));
        let body = r#"{"eventId":"evt-1"}"#;
        assert_eq!(material(&key, &message(body)).unwrap(), b"evt-1");
        let tagged = with_attribute(message(body), "Idempotency-Key", "k-9");
        assert_eq!(material(&key, &tagged).unwrap(), b"k-9");
        assert!(matches!(
            material(&key, &message("{}")),
            Err(KeyError::PointerNotFound { .. })
        ));
    }

    #[test]
    fn closures_are_extractors_and_empty_material_is_rejected() {
        let custom = |m: &SqsMessage| -> Result<String, KeyError> {
            Ok(m.body.clone().unwrap_or_default().to_uppercase())
        };
        assert_eq!(custom.key_material(&message("ab")).unwrap(), b"AB");
        assert!(matches!(
            custom.key_material(&message("")),
            Err(KeyError::Empty)
        ));
        assert!(matches!(
            BodyHash.key_material(&message("")),
            Err(KeyError::Empty)
        ));
    }

    #[test]
    fn serialized_values_key_by_content_whatever_the_map_order() {
        let a: HashMap<&str, u64> = (0..50)
            .map(|i| (["a", "b", "c", "d"][i % 4], i as u64))
            .collect();
        let mut entries: Vec<_> = a.iter().map(|(k, v)| (*k, *v)).collect();
        entries.reverse();
        let b: HashMap<&str, u64> = entries.into_iter().collect();
        let (a, b) = (Serialized::new(a).unwrap(), Serialized::new(b).unwrap());
        assert_eq!(a.json(), b.json());
        assert_eq!(
            BodyHash.key_material(&a).unwrap(),
            BodyHash.key_material(&b).unwrap()
        );
    }

    #[test]
    fn serialized_values_have_a_body_and_nothing_else() {
        let value = serde_json::json!({"order": {"id": "o-1"}, "amount": 5});
        let input = Serialized::new(value).unwrap();
        assert_eq!(
            JsonPointer::new("/order/id").key_material(&input).unwrap(),
            b"o-1"
        );
        assert_eq!(input.id(), None);
        assert_eq!(input.attribute("order"), None);
        assert_eq!(input["amount"], 5);
        assert!(format!("{input:?}").contains("json_bytes"));
        let keys: HashMap<Vec<u8>, u8> = HashMap::from([(vec![1], 1)]);
        assert!(
            Serialized::new(keys).is_err(),
            "map keys that are not strings"
        );
    }
}
