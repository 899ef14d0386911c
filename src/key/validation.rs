//! Payload validation: a hash of the payload stored beside the key, so that the same key
//! with a different payload is caught instead of replayed.

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use crate::canonical::canonical;
use crate::input::Input;
use crate::key::hashing::{legacy_canonical_json, prefixed_sha256_hex, sha256_hex};
use crate::key::pointer::select;
use crate::key::{json_text, KeyError};

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
    /// The value at one JSON pointer, as canonical JSON (`null` when it matches nothing):
    /// Powertools' `payload_validation_jmespath` naming one field. The body must be JSON.
    Pointer(String),
}

/// The prefix of stored payload hashes in the current format. Hashes written before it
/// (64 hex digits, no prefix) went through `f64` for numbers.
pub const PAYLOAD_HASH_PREFIX: &str = "v2:";

/// The prefix of stored payload hashes of inputs with a query string (HTTP requests): the
/// hash covers the query string and the body (or the chosen fields of it). Before it, an HTTP
/// request's hash covered its body alone, in the `v2:` format.
pub const QUERY_PAYLOAD_HASH_PREFIX: &str = "v3:";

/// A payload's hash. It holds the form stored with new records, and the forms earlier
/// versions stored (the one before `v2:` computed only when a stored hash needs it), so
/// records written before an upgrade are not rejected while they count. Two hashes are equal
/// when their stored forms are.
#[derive(Clone)]
pub struct PayloadHash {
    stored: String,
    /// With a query string (`v3:`): the hash of the body alone, in the `v2:` format that
    /// records written before query strings were covered hold.
    body_only: Option<String>,
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
    /// A hash in the current format (`v2:<sha256 hex>`, or `v3:` for an input with a query
    /// string), with no legacy form.
    pub fn new(stored: impl Into<String>) -> Self {
        Self {
            stored: stored.into(),
            body_only: None,
            legacy_source: None,
        }
    }

    /// The form stored with new records.
    pub fn as_str(&self) -> &str {
        &self.stored
    }

    /// Whether `stored` (read from a record) is this payload's hash. A hash of the current
    /// format must be equal. Hashes of earlier formats are compared with this payload's hash
    /// in that format: a `v2:` hash, when this one is `v3:` (the input has a query string),
    /// with the hash of the body alone, which is what versions before `v3:` stored for it; a
    /// hash without a prefix with the hash of versions before `v2:`.
    pub fn matches(&self, stored: &str) -> bool {
        if stored == self.stored {
            true
        } else if stored.starts_with(QUERY_PAYLOAD_HASH_PREFIX) {
            false
        } else if stored.starts_with(PAYLOAD_HASH_PREFIX) {
            self.body_only.as_deref() == Some(stored)
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
    /// The payload hash for `input`, or `None` when validation is off. When `input` has a
    /// query string ([`Input::query`]) the hash covers it too, in the `v3:` format: the
    /// query's length (8 bytes, big-endian), the query, then what a `v2:` hash covers.
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
            PayloadValidation::Pointer(pointer) => {
                match select(json_text(&body)?, pointer).map_err(KeyError::BodyNotJson)? {
                    Some(raw) => canonical(raw).map_err(KeyError::BodyNotJson)?.into_bytes(),
                    None => b"null".to_vec(),
                }
            }
        };
        let body_only = prefixed_sha256_hex(&[PAYLOAD_HASH_PREFIX], &bytes);
        let (stored, body_only) = match input.query() {
            None => (body_only, None),
            Some(query) => {
                let len = u64::try_from(query.len()).unwrap_or(u64::MAX);
                let covered = [&len.to_be_bytes(), query.as_bytes(), &bytes].concat();
                let stored = prefixed_sha256_hex(&[QUERY_PAYLOAD_HASH_PREFIX], &covered);
                (stored, Some(body_only))
            }
        };
        Ok(Some(PayloadHash {
            stored,
            body_only,
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
            PayloadValidation::Pointer(pointer) => {
                let json: Value = serde_json::from_slice(body).ok()?;
                legacy_canonical_json(json.pointer(pointer).unwrap_or(&Value::Null))
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
    fn one_pointer_covers_its_value_alone() {
        let one = PayloadValidation::Pointer("/amount".into());
        let a = hash(&one, r#"{"amount": 25, "note": "a"}"#);
        assert_eq!(a, hash(&one, r#"{"note": "b", "amount": 25.0}"#));
        assert_ne!(a, hash(&one, r#"{"amount": 26}"#));
        // Not the list of one value, and a missing field is `null`.
        let list = PayloadValidation::Pointers(vec!["/amount".into()]);
        assert_ne!(a, hash(&list, r#"{"amount": 25}"#));
        assert_eq!(hash(&one, "{}"), hash(&one, r#"{"amount": null}"#));
        assert!(hash(&one, "{}").matches(hash(&one, "{}").as_str()));
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

    /// A body with a query string, as an HTTP request has.
    struct WithQuery(&'static str, &'static str);

    impl Input for WithQuery {
        fn id(&self) -> Option<&str> {
            None
        }

        fn body(&self) -> Option<std::borrow::Cow<'_, [u8]>> {
            Some(self.1.as_bytes().into())
        }

        fn attribute(&self, _name: &str) -> Option<crate::input::AttributeValue<'_>> {
            None
        }

        fn query(&self) -> Option<std::borrow::Cow<'_, str>> {
            Some(self.0.into())
        }
    }

    #[test]
    fn a_query_string_is_covered_and_body_only_hashes_of_before_still_match() {
        let v = PayloadValidation::Body;
        let hash = |query, body| v.hash(&WithQuery(query, body)).unwrap().unwrap();
        let ours = hash("amount=100", r#"{"a":1}"#);
        assert!(ours.as_str().starts_with("v3:"));
        assert_eq!(ours, hash("amount=100", r#"{ "a": 1 }"#));
        assert_ne!(ours, hash("amount=999", r#"{"a":1}"#));
        assert_ne!(ours, hash("", r#"{"a":1}"#));
        assert_ne!(ours, hash("amount=100", r#"{"a":2}"#));
        // The length tells the query from the body: no split gives another pair the same hash.
        assert_ne!(hash("a", "bc"), hash("ab", "c"));
        // A record written before query strings were covered holds the body's `v2:` hash (or
        // an older one): recognised, and only for this body.
        let body_only = v.hash(&message(r#"{"a":1}"#)).unwrap().unwrap();
        assert!(ours.matches(body_only.as_str()));
        assert!(ours.matches(&sha256_hex(br#"{"a":1}"#)));
        let other_body = v.hash(&message(r#"{"a":2}"#)).unwrap().unwrap();
        assert!(!ours.matches(other_body.as_str()));
        // A `v3:` hash of another query is not this one, whatever its body.
        assert!(!ours.matches(hash("amount=999", r#"{"a":1}"#).as_str()));
        assert!(ours.matches(ours.as_str()));
        // An input without a query string never takes a `v3:` hash for its own.
        assert!(!body_only.matches(hash("", r#"{"a":1}"#).as_str()));
    }

    #[test]
    fn off_hashes_nothing() {
        assert_eq!(PayloadValidation::Off.hash(&message("x")).unwrap(), None);
    }
}
