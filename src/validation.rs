//! Payload validation: a hash of the payload stored beside the key, so that the same key
//! with a different payload is caught instead of replayed.

use aws_lambda_events::sqs::SqsMessage;
use serde_json::Value;

use crate::hashing::{canonical_json, sha256_hex};
use crate::key::{body_json, KeyError};

/// What part of a record's body the stored payload hash covers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum PayloadValidation {
    /// No payload hash (the default): a repeated key replays whatever was stored.
    #[default]
    Off,
    /// The whole body: canonical JSON (sorted object keys) when the body is JSON, its raw
    /// bytes otherwise.
    Body,
    /// The values at these JSON pointers, as a canonical JSON array (`null` where a pointer
    /// matches nothing). The body must be JSON.
    Pointers(Vec<String>),
}

impl PayloadValidation {
    /// The payload hash for `message`, or `None` when validation is off.
    pub fn hash(&self, message: &SqsMessage) -> Result<Option<String>, KeyError> {
        let bytes = match self {
            PayloadValidation::Off => return Ok(None),
            PayloadValidation::Body => {
                let body = message.body.as_deref().ok_or(KeyError::MissingBody)?;
                match serde_json::from_str::<Value>(body) {
                    Ok(json) => canonical_json(&json),
                    Err(_) => body.as_bytes().to_vec(),
                }
            }
            PayloadValidation::Pointers(pointers) => {
                let body = body_json(message)?;
                let selected = pointers
                    .iter()
                    .map(|p| body.pointer(p).cloned().unwrap_or(Value::Null))
                    .collect();
                canonical_json(&Value::Array(selected))
            }
        };
        Ok(Some(sha256_hex(&bytes)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(body: &str) -> SqsMessage {
        let mut m = SqsMessage::default();
        m.body = Some(body.into());
        m
    }

    #[test]
    fn body_hash_ignores_key_order_and_whitespace() {
        let v = PayloadValidation::Body;
        assert_eq!(
            v.hash(&message(r#"{"a":1,"b":2}"#)).unwrap(),
            v.hash(&message("{ \"b\": 2, \"a\": 1 }")).unwrap()
        );
        assert_ne!(
            v.hash(&message(r#"{"a":1}"#)).unwrap(),
            v.hash(&message(r#"{"a":2}"#)).unwrap()
        );
        assert!(v.hash(&message("plain text")).unwrap().is_some());
    }

    #[test]
    fn pointers_cover_only_the_chosen_fields() {
        let v = PayloadValidation::Pointers(vec!["/amount".into()]);
        assert_eq!(
            v.hash(&message(r#"{"amount":5,"note":"a"}"#)).unwrap(),
            v.hash(&message(r#"{"amount":5,"note":"b"}"#)).unwrap()
        );
        assert_ne!(
            v.hash(&message(r#"{"amount":5}"#)).unwrap(),
            v.hash(&message(r#"{"amount":6}"#)).unwrap()
        );
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
