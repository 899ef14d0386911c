//! Idempotency keys: where they come from ([`KeyExtractor`]) and how they are stored
//! ([`IdempotencyKey`]).

use std::fmt;

use aws_lambda_events::sqs::SqsMessage;

use crate::canonical::{canonical, select};
use crate::error::BoxError;
use crate::hashing::sha256_hex;

/// The longest stored key, in bytes (DynamoDB's partition key limit).
pub const MAX_KEY_BYTES: usize = 2048;

/// The key stored in the table: `<prefix>#<sha256 hex of the key material>`.
///
/// Raw key material (an order id, a customer's reference) never reaches the table or the
/// logs: only its digest does, namespaced by the prefix so that two functions sharing one
/// table cannot collide.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// Derives the stored key from a prefix and raw key material.
    pub fn derive(prefix: &str, material: &[u8]) -> Self {
        Self(format!("{prefix}#{}", sha256_hex(material)))
    }

    /// Wraps a key read back from a store.
    pub fn from_stored(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    /// The stored form.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why no idempotency key (or payload hash) could be derived from a record.
///
/// The record fails alone with this error: it is never processed without idempotency unless
/// that was chosen with [`MissingKey::ProcessUnprotected`](crate::MissingKey).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The record has no `messageId`.
    #[error("the record has no messageId")]
    MissingMessageId,
    /// The message attribute is absent or has no value.
    #[error("message attribute {name:?} is missing or empty")]
    MissingAttribute {
        /// The attribute name.
        name: String,
    },
    /// The record has no body.
    #[error("the record has no body")]
    MissingBody,
    /// The body is not JSON, so a JSON pointer cannot be applied.
    #[error("the body is not valid JSON")]
    BodyNotJson(#[source] serde_json::Error),
    /// The JSON pointer matches nothing (or `null`) in the body.
    #[error("JSON pointer {pointer:?} matches nothing in the body")]
    PointerNotFound {
        /// The pointer.
        pointer: String,
    },
    /// The derived key material is empty.
    #[error("the idempotency key is empty")]
    Empty,
    /// The stored key (prefix, `#`, 64 hex digits) is longer than DynamoDB's partition key
    /// limit: the configured prefix is too long.
    #[error("the stored key is {len_bytes} bytes, over the limit of 2048: shorten the key prefix")]
    KeyTooLong {
        /// The stored key's length.
        len_bytes: usize,
    },
    /// A user-supplied extractor failed.
    #[error("custom key extraction failed")]
    Custom(#[source] BoxError),
}

impl KeyError {
    /// The key's source is simply absent here, so a fallback extractor may be tried.
    pub fn is_absent(&self) -> bool {
        matches!(
            self,
            KeyError::MissingMessageId
                | KeyError::MissingAttribute { .. }
                | KeyError::MissingBody
                | KeyError::PointerNotFound { .. }
                | KeyError::Empty
        )
    }
}

/// Derives raw key material from an SQS record.
///
/// Implemented by [`MessageId`] (the default), [`MessageAttribute`], [`JsonPointer`],
/// [`BodyHash`], and by any `Fn(&SqsMessage) -> Result<impl AsRef<[u8]>, KeyError>`.
/// Combine two with [`or`](KeyExtractor::or).
///
/// # Which key to choose
/// `messageId` catches redeliveries of one message by SQS. A producer that retries a send
/// creates a *new* message with a new `messageId`, so when producers may retry, key on an id
/// the producer generates (a message attribute such as `Idempotency-Key`, or a field in the
/// body) instead.
pub trait KeyExtractor: Send + Sync + 'static {
    /// The raw key material for `message`. It is hashed before it is stored.
    fn key_material(&self, message: &SqsMessage) -> Result<Vec<u8>, KeyError>;

    /// Uses `fallback` when this extractor finds its source absent
    /// ([`KeyError::is_absent`]); other errors are returned as they are.
    ///
    /// ```
    /// use lambda_idempotency::{JsonPointer, KeyExtractor, MessageAttribute};
    /// let key = MessageAttribute::new("Idempotency-Key").or(JsonPointer::new("/eventId"));
    /// # let _ = key;
    /// ```
    fn or<F: KeyExtractor>(self, fallback: F) -> Or<Self, F>
    where
        Self: Sized,
    {
        Or {
            first: self,
            fallback,
        }
    }
}

fn non_empty(material: Vec<u8>) -> Result<Vec<u8>, KeyError> {
    if material.is_empty() {
        Err(KeyError::Empty)
    } else {
        Ok(material)
    }
}

impl<F, M> KeyExtractor for F
where
    F: Fn(&SqsMessage) -> Result<M, KeyError> + Send + Sync + 'static,
    M: AsRef<[u8]>,
{
    fn key_material(&self, message: &SqsMessage) -> Result<Vec<u8>, KeyError> {
        non_empty(self(message)?.as_ref().to_vec())
    }
}

/// Keys on the SQS `messageId` (the default). Catches SQS redeliveries, not producer retries.
#[derive(Debug, Clone, Copy, Default)]
pub struct MessageId;

impl KeyExtractor for MessageId {
    fn key_material(&self, message: &SqsMessage) -> Result<Vec<u8>, KeyError> {
        let id = message
            .message_id
            .as_deref()
            .ok_or(KeyError::MissingMessageId)?;
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

impl KeyExtractor for MessageAttribute {
    fn key_material(&self, message: &SqsMessage) -> Result<Vec<u8>, KeyError> {
        let missing = || KeyError::MissingAttribute {
            name: self.name.clone(),
        };
        let attribute = message
            .message_attributes
            .get(&self.name)
            .ok_or_else(missing)?;
        let material = match (&attribute.string_value, &attribute.binary_value) {
            (Some(text), _) if !text.is_empty() => text.as_bytes().to_vec(),
            (None, Some(binary)) if !binary.0.is_empty() => {
                [&[BINARY_MATERIAL_TAG], binary.0.as_slice()].concat()
            }
            _ => return Err(missing()),
        };
        Ok(material)
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
const JSON_MATERIAL_TAG: u8 = 0xFF;

/// Marks key material that is a binary attribute's bytes: `0xFE` never occurs in UTF-8 either,
/// and differs from [`JSON_MATERIAL_TAG`].
const BINARY_MATERIAL_TAG: u8 = 0xFE;

impl KeyExtractor for JsonPointer {
    fn key_material(&self, message: &SqsMessage) -> Result<Vec<u8>, KeyError> {
        let body = message.body.as_deref().ok_or(KeyError::MissingBody)?;
        let not_found = || KeyError::PointerNotFound {
            pointer: self.pointer.clone(),
        };
        let raw = select(body, &self.pointer)
            .map_err(KeyError::BodyNotJson)?
            .ok_or_else(not_found)?;
        match raw.as_bytes().first() {
            Some(b'n') => Err(not_found()),
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
}

/// Keys on the whole body, byte for byte: identical bodies are one message.
#[derive(Debug, Clone, Copy, Default)]
pub struct BodyHash;

impl KeyExtractor for BodyHash {
    fn key_material(&self, message: &SqsMessage) -> Result<Vec<u8>, KeyError> {
        let body = message.body.as_deref().ok_or(KeyError::MissingBody)?;
        non_empty(body.as_bytes().to_vec())
    }
}

/// Two extractors, the second used when the first finds its source absent. Built by
/// [`KeyExtractor::or`].
#[derive(Debug, Clone)]
pub struct Or<A, B> {
    first: A,
    fallback: B,
}

impl<A: KeyExtractor, B: KeyExtractor> KeyExtractor for Or<A, B> {
    fn key_material(&self, message: &SqsMessage) -> Result<Vec<u8>, KeyError> {
        match self.first.key_material(message) {
            Err(err) if err.is_absent() => self.fallback.key_material(message),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lambda_events::sqs::SqsMessageAttribute;

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
            either.key_material(&by_attribute).unwrap(),
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
        let json_one = key.key_material(&message(r#"{"id":1}"#)).unwrap();
        let text = key
            .key_material(&with_attribute(message("{}"), "k", "abc"))
            .unwrap();
        assert_ne!(key.key_material(&binary(&json_one)).unwrap(), json_one);
        assert_ne!(key.key_material(&binary(b"abc")).unwrap(), text);
        assert!(matches!(
            key.key_material(&binary(b"")),
            Err(KeyError::PointerNotFound { .. })
        ));
    }

    #[test]
    fn attribute_falls_back_to_pointer_only_when_absent() {
        let key = MessageAttribute::new("Idempotency-Key").or(JsonPointer::new("/eventId"));
        let body = r#"{"eventId":"evt-1"}"#;
        assert_eq!(key.key_material(&message(body)).unwrap(), b"evt-1");
        let tagged = with_attribute(message(body), "Idempotency-Key", "k-9");
        assert_eq!(key.key_material(&tagged).unwrap(), b"k-9");
        assert!(matches!(
            key.key_material(&message("{}")),
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
}
