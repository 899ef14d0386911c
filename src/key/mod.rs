//! Idempotency keys and payload hashes.
//!
//! Where a key comes from ([`KeyExtractor`]), how it is stored ([`IdempotencyKey`]), and how
//! a payload is fingerprinted to tell a duplicate from a key reused with another payload
//! ([`PayloadValidation`]). Both read an event
//! through [`Input`](crate::Input), JSON in canonical form (`pointer`), and are hashed
//! (`hashing`).

use std::fmt;

use tower::BoxError;

use crate::key::hashing::prefixed_sha256_hex;

mod extractors;
pub(crate) mod hashing;
pub(crate) mod pointer;
pub(crate) mod validation;

pub(crate) use extractors::json_text;
pub use extractors::{BodyHash, JsonPointer, JsonPointers, MessageAttribute, MessageId};
pub use validation::{
    PayloadHash, PayloadValidation, PAYLOAD_HASH_PREFIX, QUERY_PAYLOAD_HASH_PREFIX,
};

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
        Self(prefixed_sha256_hex(&[prefix, "#"], material))
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
    /// The event has no id of its own (SQS: no `messageId`).
    #[error("the record has no id of its own (SQS messageId, stream eventID)")]
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
    /// The body is not JSON (or not UTF-8), so a JSON pointer cannot be applied.
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
    /// A function's arguments could not be serialized as JSON (a map with keys that are not
    /// strings) or are nested deeper than 128 levels, so nothing can be derived from them.
    #[error("the arguments could not be serialized as JSON")]
    Unserializable(#[source] serde_json::Error),
    /// The key material is neither text nor JSON, so it is not key data the
    /// [Powertools format](crate::powertools) can hash (a closure's bytes that are not UTF-8).
    #[error("the key material is not text, so it cannot be Powertools key data")]
    NotText,
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

/// Derives raw key material from an event of type `I`.
///
/// Implemented for every [`Input`](crate::Input) (an SQS message, for one) by
/// [`MessageAttribute`], [`JsonPointer`] and [`BodyHash`], for the batch records by
/// [`MessageId`] (the default), and for any `I` by
/// any `Fn(&I) -> Result<impl AsRef<[u8]>, KeyError>`. Combine two with
/// [`or`](KeyExtractor::or).
///
/// # Which key to choose
/// `messageId` catches redeliveries of one message by SQS. A producer that retries a send
/// creates a *new* message with a new `messageId`, so when producers may retry, key on an id
/// the producer generates (a message attribute such as `Idempotency-Key`, or a field in the
/// body) instead.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot derive an idempotency key from `{I}`",
    label = "no key for `{I}`",
    note = "the layer's key must read this event: choose it with `IdempotencyLayer::with_key` (e.g. `JsonPointer::new(\"/order_id\")`, or a closure over `&{I}`); the default, `MessageId`, reads a batch record's own id, which a whole invocation, an HTTP request or a function call does not have"
)]
pub trait KeyExtractor<I: ?Sized>: Send + Sync + 'static {
    /// The raw key material for `input`. It is hashed before it is stored.
    ///
    /// It must be a function of `input` alone, never of state around it (a task- or
    /// thread-local a layer sets per record, a clock, a counter): the batch
    /// [pre-check](crate::batch::Precheck) derives the keys of the records it looks up
    /// together within one record's call, and each of those records then keeps its key.
    fn key_material(&self, input: &I) -> Result<Vec<u8>, KeyError>;

    /// The key data as JSON text, for the [Powertools format](crate::powertools): what
    /// Powertools' `event_key_jmespath` would select. By default the key material read as
    /// JSON: a string when it is text (a message id, an attribute, a closure's text), the
    /// value itself when it is JSON (a pointer to a number or an object), the base64 text of
    /// a binary attribute (as the event holds it). [`JsonPointer`] gives the selected text as
    /// it is, so a number keeps its literal form (`2.0` stays a float, as in Python).
    /// Key material that is neither text nor JSON is [`KeyError::NotText`].
    fn key_json(&self, input: &I) -> Result<String, KeyError> {
        material_as_json(self.key_material(input)?)
    }

    /// Uses `fallback` when this extractor finds its source absent
    /// ([`KeyError::is_absent`]); other errors are returned as they are.
    ///
    /// ```
    /// use aws_lambda_events::sqs::SqsMessage;
    /// use lambda_idempotency::key::{JsonPointer, KeyError, KeyExtractor, MessageAttribute};
    /// let key = MessageAttribute::new("Idempotency-Key").or(JsonPointer::new("/eventId"));
    /// let tenant = |m: &SqsMessage| m.body.clone().ok_or(KeyError::MissingBody);
    /// let or_body = tenant.or(key);
    /// # fn takes<K: KeyExtractor<SqsMessage>>(_: K) {}
    /// # takes(or_body);
    /// ```
    fn or<F: KeyExtractor<I>>(self, fallback: F) -> Or<Self, F>
    where
        Self: Sized,
    {
        Or {
            first: self,
            fallback,
        }
    }
}

/// Whether the JSON text `json` is a false value to JMESPath: `null`, `""`, `false`, `[]`
/// or `{}` (text that is not JSON is not).
fn jmespath_false(json: &str) -> bool {
    use serde_json::Value;
    match serde_json::from_str::<Value>(json) {
        Ok(Value::Null | Value::Bool(false)) => true,
        Ok(Value::String(text)) => text.is_empty(),
        Ok(Value::Array(items)) => items.is_empty(),
        Ok(Value::Object(members)) => members.is_empty(),
        _ => false,
    }
}

/// Key material as JSON text: see [`KeyExtractor::key_json`].
pub(crate) fn material_as_json(material: Vec<u8>) -> Result<String, KeyError> {
    use base64::Engine as _;
    match material.split_first() {
        Some((&extractors::JSON_MATERIAL_TAG, json)) => {
            String::from_utf8(json.to_vec()).map_err(|_| KeyError::NotText)
        }
        Some((&extractors::BINARY_MATERIAL_TAG, bytes)) => Ok(serde_json::Value::String(
            base64::engine::general_purpose::STANDARD.encode(bytes),
        )
        .to_string()),
        _ => {
            let text = String::from_utf8(material).map_err(|_| KeyError::NotText)?;
            Ok(serde_json::Value::String(text).to_string())
        }
    }
}

pub(crate) fn non_empty(material: Vec<u8>) -> Result<Vec<u8>, KeyError> {
    if material.is_empty() {
        Err(KeyError::Empty)
    } else {
        Ok(material)
    }
}

impl<I: ?Sized, F, M> KeyExtractor<I> for F
where
    F: Fn(&I) -> Result<M, KeyError> + Send + Sync + 'static,
    M: AsRef<[u8]>,
{
    fn key_material(&self, input: &I) -> Result<Vec<u8>, KeyError> {
        non_empty(self(input)?.as_ref().to_vec())
    }
}

/// Two extractors, the second used when the first finds its source absent. Built by
/// [`KeyExtractor::or`], or the `or` method of the built-in extractors (which needs no event
/// type yet).
#[derive(Debug, Clone)]
pub struct Or<A, B> {
    first: A,
    fallback: B,
}

/// The built-in extractors work on any [`Input`](crate::Input): their `or` is inherent, so
/// that combining them does not need the event type.
macro_rules! inherent_or {
    ($($extractor:ty $(, $param:ident)*;)+) => {$(
        impl<$($param),*> $extractor {
            /// Uses `fallback` when this extractor finds its source absent
            /// ([`KeyError::is_absent`]), as [`KeyExtractor::or`] does.
            pub fn or<F>(self, fallback: F) -> Or<Self, F> {
                Or {
                    first: self,
                    fallback,
                }
            }
        }
    )+};
}

inherent_or! {
    MessageId;
    MessageAttribute;
    JsonPointer;
    JsonPointers;
    BodyHash;
    Or<A, B>, A, B;
}

impl<I: ?Sized, A: KeyExtractor<I>, B: KeyExtractor<I>> KeyExtractor<I> for Or<A, B> {
    fn key_material(&self, input: &I) -> Result<Vec<u8>, KeyError> {
        match self.first.key_material(input) {
            Err(err) if err.is_absent() => self.fallback.key_material(input),
            other => other,
        }
    }

    /// Falls back as JMESPath's `||` does, which Powertools' expressions use: when the
    /// first is absent or selects a false value (`null`, `""`, `false`, `[]`, `{}`).
    fn key_json(&self, input: &I) -> Result<String, KeyError> {
        match self.first.key_json(input) {
            Err(err) if err.is_absent() => self.fallback.key_json(input),
            Ok(json) if jmespath_false(&json) => self.fallback.key_json(input),
            other => other,
        }
    }
}
