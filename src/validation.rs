//! Payload validation: a hash of the payload stored beside the key, so that the same key
//! with a different payload is caught instead of replayed.

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use crate::canonical::canonical;
use crate::hashing::{legacy_canonical_json, prefixed_sha256_hex, sha256_hex};
use crate::input::Input;
use crate::key::{json_text, KeyError};
use crate::pointer::select;

/// What part of a record's body the stored payload hash covers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum PayloadValidation {
    /// No payload hash (the default): a repeated key replays whatever was stored.
    #[default]
    Off,
    /// The whole body: its canonical JSON (sorted object keys, numbers by exact value) when
    /// the body is JSON, its raw bytes otherwise.
    Body,
    /// The values at these JSON pointers, as a canonical JSON array (`null` where a pointer
    /// matches nothing). The body must be JSON.
    Pointers(Vec<String>),
}

/// The prefix of stored payload hashes in the current format. Hashes written before it
/// (64 hex digits, no prefix) went through `f64` for numbers.
pub const PAYLOAD_HASH_PREFIX: &str = "v2:";

/// A payload's hash: the form stored with new records, and (computed only when a stored hash
/// needs it) the form earlier versions stored, so records written before an upgrade are not
/// rejected while they count. Two hashes are equal when their stored forms are.
#[derive(Clone)]
pub struct PayloadHash {
    stored: String,
    /// What the legacy form is computed from: the validation and the body.
    legacy_source: Option<(PayloadValidation, Arc<[u8]>)>,
}

impl PartialEq for PayloadHash {
    fn eq(&self, other: &Self) -> bool {
        self.stored == other.stored
    }
}

impl Eq for PayloadHash {}

impl fmt::Debug for PayloadHash {
    // The body stays out of debug output: it may hold what the logs must not.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("PayloadHash").field(&self.stored).finish()
    }
}

impl PayloadHash {
    /// A hash in the current format (`v2:<sha256 hex>`), with no legacy form.
    pub fn new(stored: impl Into<String>) -> Self {
        Self {
            stored: stored.into(),
            legacy_source: None,
        }
    }

    /// The form stored with new records.
    pub fn as_str(&self) -> &str {
        &self.stored
    }

    /// Whether `stored` (read from a record) is this payload's hash. A hash of the current
    /// format must be equal; a hash without the `v2:` prefix was written by an earlier
    /// version and is compared with this payload's hash in that older format.
    pub fn matches(&self, stored: &str) -> bool {
        if stored.starts_with(PAYLOAD_HASH_PREFIX) {
            stored == self.stored
        } else {
            self.legacy_source
                .as_ref()
                .and_then(|(validation, body)| validation.legacy_hash(body))
                .as_deref()
                == Some(stored)
        }
    }
}

impl PayloadValidation {
    /// The payload hash for `input`, or `None` when validation is off.
    pub fn hash<I: Input + ?Sized>(&self, input: &I) -> Result<Option<PayloadHash>, KeyError> {
        if *self == PayloadValidation::Off {
            return Ok(None);
        }
        let body = input.body().ok_or(KeyError::MissingBody)?;
        let bytes = match self {
            PayloadValidation::Off => return Ok(None),
            PayloadValidation::Body => {
                match std::str::from_utf8(&body).ok().map(canonical) {
                    Some(Ok(json)) => json.into_bytes(),
                    // Not JSON: the raw bytes, after a byte no UTF-8 text (so no canonical
                    // JSON) contains.
                    _ => [&[0xFF], body.as_ref()].concat(),
                }
            }
            PayloadValidation::Pointers(pointers) => {
                let body = json_text(&body)?;
                let mut array = String::from("[");
                for (i, pointer) in pointers.iter().enumerate() {
                    if i > 0 {
                        array.push(',');
                    }
                    match select(body, pointer).map_err(KeyError::BodyNotJson)? {
                        Some(raw) => {
                            array.push_str(&canonical(raw).map_err(KeyError::BodyNotJson)?)
                        }
                        None => array.push_str("null"),
                    }
                }
                array.push(']');
                array.into_bytes()
            }
        };
        Ok(Some(PayloadHash {
            stored: prefixed_sha256_hex(&[PAYLOAD_HASH_PREFIX], &bytes),
            legacy_source: Some((self.clone(), Arc::from(body.as_ref()))),
        }))
    }

    /// The hash of `body` as versions before the `v2:` format computed it (numbers through
    /// `f64`).
    fn legacy_hash(&self, body: &[u8]) -> Option<String> {
        let bytes = match self {
            PayloadValidation::Off => return None,
            PayloadValidation::Body => match serde_json::from_slice::<Value>(body) {
                Ok(json) => legacy_canonical_json(&json),
                Err(_) => body.to_vec(),
            },
            PayloadValidation::Pointers(pointers) => {
                let json: Value = serde_json::from_slice(body).ok()?;
                let selected = pointers
                    .iter()
                    .map(|p| json.pointer(p).cloned().unwrap_or(Value::Null))
                    .collect();
                legacy_canonical_json(&Value::Array(selected))
            }
        };
        Some(sha256_hex(&bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lambda_events::sqs::SqsMessage;

    fn message(body: &str) -> SqsMessage {
        let mut m = SqsMessage::default();
        m.body = Some(body.into());
        m
    }

    fn hash(v: &PayloadValidation, body: &str) -> PayloadHash {
        v.hash(&message(body)).unwrap().unwrap()
    }

    #[test]
    fn body_hash_ignores_key_order_and_whitespace() {
        let v = PayloadValidation::Body;
        assert_eq!(
            hash(&v, r#"{"a":1,"b":2}"#),
            hash(&v, "{ \"b\": 2, \"a\": 1 }")
        );
        assert_ne!(hash(&v, r#"{"a":1}"#), hash(&v, r#"{"a":2}"#));
        assert!(hash(&v, "plain text").as_str().starts_with("v2:"));
    }

    #[test]
    fn numbers_are_hashed_exactly() {
        let v = PayloadValidation::Body;
        for (a, b) in [
            (r#"{"amount":0.1}"#, r#"{"amount":0.10000000000000000001}"#),
            (
                r#"{"amount":18446744073709551616}"#,
                r#"{"amount":18446744073709551617}"#,
            ),
            (
                r#"{"amount":12345678901234567890123}"#,
                r#"{"amount":12345678901234567890124}"#,
            ),
        ] {
            assert_ne!(hash(&v, a).as_str(), hash(&v, b).as_str(), "{a} vs {b}");
        }
        assert_eq!(
            hash(&v, r#"{"a":1.0}"#).as_str(),
            hash(&v, r#"{"a":1}"#).as_str()
        );
    }

    #[test]
    fn legacy_hashes_still_match_their_payload_only() {
        let v = PayloadValidation::Body;
        let ours = hash(&v, r#"{"b":2,"a":1}"#);
        let legacy = sha256_hex(br#"{"a":1,"b":2}"#);
        assert!(ours.matches(&legacy));
        assert!(ours.matches(ours.as_str()));
        assert!(!ours.matches(&sha256_hex(br#"{"a":1,"b":3}"#)));
        assert!(!ours.matches("v2:0000"));
        assert!(!PayloadHash::new("v2:x").matches(&legacy));
    }

    #[test]
    fn pointers_cover_only_the_chosen_fields() {
        let v = PayloadValidation::Pointers(vec!["/amount".into()]);
        assert_eq!(
            hash(&v, r#"{"amount":5,"note":"a"}"#),
            hash(&v, r#"{"amount":5,"note":"b"}"#)
        );
        assert_ne!(hash(&v, r#"{"amount":5}"#), hash(&v, r#"{"amount":6}"#));
        assert_ne!(hash(&v, r#"{"amount":"5"}"#), hash(&v, r#"{"amount":5}"#));
        assert!(matches!(
            v.hash(&message("nope")),
            Err(KeyError::BodyNotJson(_))
        ));
    }

    #[test]
    fn off_hashes_nothing() {
        assert_eq!(PayloadValidation::Off.hash(&message("x")).unwrap(), None);
    }
}
