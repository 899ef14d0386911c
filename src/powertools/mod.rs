//! Records in the format of Powertools for AWS Lambda, to share its table.
//!
//! A function written with Powertools and its rewrite with this crate then share one table
//! while both consume the same events (a cut-over, a canary, a rollback).
//!
//! With [`Config::with_powertools_format`](crate::Config::with_powertools_format), a record is
//! written and read as Powertools' idempotency utility writes and reads it:
//! - its key is `<prefix>#<digest>`, the digest (md5 unless chosen otherwise) of the key data
//!   as Python's `json.dumps(data, sort_keys=True)` writes it;
//! - its payload hash (`validation`) is the bare digest of the validated payload, written the
//!   same way;
//! - its result (`data`) is the result's JSON as that `json.dumps` writes it, never
//!   compressed.
//!
//! Status, expiration and lease attributes already have Powertools' names and meanings (see
//! [`AttributeNames`](crate::store::AttributeNames)). The
//! [migration chapter](crate::guide::migrating) of the guide says which Powertools settings
//! map to which of this crate's, and what each side guarantees in a mixed fleet.
//!
//! ```
//! use lambda_idempotency::key::{JsonPointer, MessageAttribute};
//! use lambda_idempotency::powertools::PowertoolsFormat;
//! use lambda_idempotency::store::InMemoryStore;
//! use lambda_idempotency::{Config, IdempotencyLayer};
//! use lambda_idempotency::key::PayloadValidation;
//!
//! // Powertools: key_prefix="orders", event_key_jmespath=
//! // 'messageAttributes."Idempotency-Key".stringValue || powertools_json(body).eventId',
//! // payload_validation_jmespath="powertools_json(body)"
//! let layer = IdempotencyLayer::new(InMemoryStore::new())
//!     .with_key(MessageAttribute::new("Idempotency-Key").or(JsonPointer::new("/eventId")))
//!     .with_config(
//!         Config::new()
//!             .with_payload_validation(PayloadValidation::Body)
//!             .with_powertools_format(PowertoolsFormat::new("orders")),
//!     );
//! # let _ = layer;
//! ```

use std::fmt;

use md5::Md5;
use sha1::Sha1;
use sha2::{Digest, Sha224, Sha256, Sha384, Sha512};

use crate::input::Input;
use crate::key::hashing::to_hex;
use crate::key::pointer::{select, selected_list};
use crate::key::{json_text, IdempotencyKey, KeyError, PayloadHash, PayloadValidation};

pub(crate) mod python_json;

/// The hash function of Powertools' `IdempotencyConfig(hash_function=...)`: how key data and
/// payloads are digested. Powertools accepts any `hashlib` name; these are the ones this
/// crate computes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HashFunction {
    /// `md5`, Powertools' default.
    #[default]
    Md5,
    /// `sha1`.
    Sha1,
    /// `sha224`.
    Sha224,
    /// `sha256`.
    Sha256,
    /// `sha384`.
    Sha384,
    /// `sha512`.
    Sha512,
}

impl HashFunction {
    /// The function `hashlib` calls `name` (`md5`, `sha256`, ...), as Powertools'
    /// `hash_function` setting names it.
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "md5" => HashFunction::Md5,
            "sha1" => HashFunction::Sha1,
            "sha224" => HashFunction::Sha224,
            "sha256" => HashFunction::Sha256,
            "sha384" => HashFunction::Sha384,
            "sha512" => HashFunction::Sha512,
            _ => return None,
        })
    }

    /// Its `hashlib` name.
    pub const fn as_str(self) -> &'static str {
        match self {
            HashFunction::Md5 => "md5",
            HashFunction::Sha1 => "sha1",
            HashFunction::Sha224 => "sha224",
            HashFunction::Sha256 => "sha256",
            HashFunction::Sha384 => "sha384",
            HashFunction::Sha512 => "sha512",
        }
    }

    /// `prefix` followed by the lower-case hex digest of `bytes`, as `hexdigest()` writes it.
    fn hex(self, prefix: &[&str], bytes: &[u8]) -> String {
        match self {
            HashFunction::Md5 => to_hex(prefix, &Md5::digest(bytes)),
            HashFunction::Sha1 => to_hex(prefix, &Sha1::digest(bytes)),
            HashFunction::Sha224 => to_hex(prefix, &Sha224::digest(bytes)),
            HashFunction::Sha256 => to_hex(prefix, &Sha256::digest(bytes)),
            HashFunction::Sha384 => to_hex(prefix, &Sha384::digest(bytes)),
            HashFunction::Sha512 => to_hex(prefix, &Sha512::digest(bytes)),
        }
    }
}

impl fmt::Display for HashFunction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Powertools for AWS Lambda's record format: keys, payload hashes and results written and
/// read as Powertools writes and reads them. Set it with
/// [`Config::with_powertools_format`](crate::Config::with_powertools_format); see the
/// [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PowertoolsFormat {
    prefix: String,
    hash: HashFunction,
}

impl PowertoolsFormat {
    /// The format with the key prefix `prefix` and Powertools' default hash function, md5.
    ///
    /// The prefix is the exact text before `#` in the Powertools function's ids (its
    /// `key_prefix`, else `<function name>.<module>.<function>`, for
    /// `@idempotent_function` on `apply` in `app.py` of the Lambda function `orders`:
    /// `orders.app.apply`).
    ///
    /// The prefix is required here, not taken from the function's name as this crate's own
    /// format takes it: Powertools' default is not the function's name, and a prefix that
    /// differs from the Powertools function's shares no record with it. It replaces
    /// [`Config::with_key_prefix`](crate::Config::with_key_prefix) for records in this format.
    /// An empty prefix writes `#<digest>`, which no Powertools function does (an empty
    /// `key_prefix` there means its default).
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
            hash: HashFunction::default(),
        }
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Sets the key prefix (an idempotent function's own, say).
    pub(crate) fn set_prefix(&mut self, prefix: String) {
        self.prefix = prefix;
    }

    /// Digests with `hash`, as Powertools' `IdempotencyConfig(hash_function=...)` does.
    pub fn with_hash_function(mut self, hash: HashFunction) -> Self {
        self.hash = hash;
        self
    }

    /// The hash function.
    pub fn hash_function(&self) -> HashFunction {
        self.hash
    }

    /// The stored key of the key data `key_json` (JSON text) under `prefix`:
    /// `<prefix>#<hexdigest of json.dumps(data, sort_keys=True)>`. Key data Powertools counts
    /// as missing (`null`, an empty string, list or object, a list or object of `null`s
    /// only) is [`KeyError::Empty`], as Powertools raises `IdempotencyKeyError` for it.
    pub(crate) fn key(&self, prefix: &str, key_json: &str) -> Result<IdempotencyKey, KeyError> {
        let value: serde_json::Value =
            serde_json::from_str(key_json).map_err(KeyError::BodyNotJson)?;
        if is_missing(&value) {
            return Err(KeyError::Empty);
        }
        let text = python_json::dumps(key_json).map_err(KeyError::BodyNotJson)?;
        Ok(IdempotencyKey::from_stored(
            self.hash.hex(&[prefix, "#"], text.as_bytes()),
        ))
    }

    /// The payload hash of `input` under `validation`, as Powertools stores it (the bare
    /// digest): [`PayloadValidation::Body`] is `powertools_json(body)`, the body parsed as
    /// JSON (a body that is not JSON fails the record, as it fails Powertools);
    /// [`PayloadValidation::Pointers`] is a multi-select list of the values they select
    /// (`null` where one selects nothing), [`PayloadValidation::Pointer`] the one value its
    /// pointer selects (`null` when none). An HTTP request's query string is not covered.
    pub(crate) fn payload_hash<I: Input + ?Sized>(
        &self,
        validation: &PayloadValidation,
        input: &I,
    ) -> Result<Option<PayloadHash>, KeyError> {
        let selected = match validation {
            PayloadValidation::Off => return Ok(None),
            PayloadValidation::Body => {
                let body = input.written_body().ok_or(KeyError::MissingBody)?;
                python_json::dumps(json_text(&body)?).map_err(KeyError::BodyNotJson)?
            }
            PayloadValidation::Pointers(pointers) => {
                let body = input.written_body().ok_or(KeyError::MissingBody)?;
                let list = selected_list(json_text(&body)?, pointers)?;
                python_json::dumps(&list).map_err(KeyError::BodyNotJson)?
            }
            PayloadValidation::Pointer(pointer) => {
                let body = input.written_body().ok_or(KeyError::MissingBody)?;
                let raw = select(json_text(&body)?, pointer).map_err(KeyError::BodyNotJson)?;
                python_json::dumps(raw.unwrap_or("null")).map_err(KeyError::BodyNotJson)?
            }
        };
        Ok(Some(PayloadHash::new(
            self.hash.hex(&[], selected.as_bytes()),
        )))
    }
}

/// Powertools' `is_missing_idempotency_key`: no key, or one made of nothing.
fn is_missing(value: &serde_json::Value) -> bool {
    use serde_json::Value;
    match value {
        Value::Null => true,
        Value::String(text) => text.is_empty(),
        Value::Array(items) => items.iter().all(Value::is_null),
        Value::Object(members) => members.values().all(Value::is_null),
        Value::Bool(_) | Value::Number(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_the_digest_of_pythons_json() {
        // hashlib.<name>(json.dumps("order-1", sort_keys=True).encode()).hexdigest()
        let digests = [
            (HashFunction::Md5, "729040816f7330c4cb31f54a56f59a7b"),
            (HashFunction::Sha1, "02731892f8bea2548b0011157596b1e06073b287"),
            (
                HashFunction::Sha224,
                "51c4fffccc9546f1cf9e2731c7cc245e0e75480ed53847a9e487d3ef",
            ),
            (
                HashFunction::Sha256,
                "4b08242598e89818f98b9cf7ec0d8ee9033be2c56e579847b0d60b6db516f746",
            ),
            (HashFunction::Sha384, "5ed526e1decbe419a4cb80da38d7c3ec4eecedcdc62e99e3ad7652175deb7690239730d364a6437eb05fada9448a9a5b"),
            (HashFunction::Sha512, "b8bfbbdbad8994e6096dfe28b3175e6f33bebf25b8fd063b5b859f3c054b0fb3e069a54d68d81f113e44249edbb04d6a43b1badd2ebc50c200103d0be37b90da"),
        ];
        for (hash, digest) in digests {
            let format = PowertoolsFormat::new("p").with_hash_function(hash);
            assert_eq!(
                format.key("orders", "\"order-1\"").unwrap().as_str(),
                format!("orders#{digest}")
            );
        }
        // {"b": [1, 2.0, "é"], "a": null}: sorted, spaced, ASCII-escaped, 2.0 kept a float.
        assert_eq!(
            PowertoolsFormat::new("p")
                .key("p", r#"{"b":[1,2.0,"\u00e9"],"a":null}"#)
                .unwrap()
                .as_str(),
            "p#96d480b6d7ab752d0b3c91234c6dd16a"
        );
    }

    #[test]
    fn missing_key_data_is_empty_as_powertools_counts_it() {
        let format = PowertoolsFormat::new("p");
        for missing in ["null", "\"\"", "[]", "[null, null]", "{}", "{\"a\": null}"] {
            assert!(
                matches!(format.key("p", missing), Err(KeyError::Empty)),
                "{missing}"
            );
        }
        for present in ["0", "false", "[null, 1]", "{\"a\": 0}", "\"x\""] {
            assert!(format.key("p", present).is_ok(), "{present}");
        }
    }

    use crate::key::{
        BodyHash, JsonPointer, JsonPointers, KeyExtractor, MessageAttribute, MessageId,
    };
    use aws_lambda_events::sqs::{SqsMessage, SqsMessageAttribute};

    /// A body with a float, an integer past 64 bits, nested objects out of order, non-ASCII
    /// and astral text.
    const BODY: &str = r#"{"eventId":"evt-1","n":2.0,"big":123456789012345678901234567890,"o":{"b":1,"a":[true,null]},"name":"Zoë 😀"}"#;

    fn message() -> SqsMessage {
        let mut m = SqsMessage::default();
        m.message_id = Some("m-1".into());
        m.body = Some(BODY.into());
        m
    }

    fn key_of<K: KeyExtractor<SqsMessage>>(key: K) -> String {
        let json = key.key_json(&message()).unwrap();
        PowertoolsFormat::new("p")
            .key("p", &json)
            .unwrap()
            .as_str()
            .to_string()
    }

    /// hashlib.md5(json.dumps(<the selection>, sort_keys=True).encode()).hexdigest(), from
    /// Python 3.
    #[test]
    fn extractors_select_what_powertools_selects() {
        assert_eq!(
            key_of(JsonPointer::new("/n")),
            "p#d1bd83a33f1a841ab7fda32449746cc4"
        );
        assert_eq!(
            key_of(JsonPointer::new("/big")),
            "p#a46857f0ecc21f0a06ea434b94d9cf1d"
        );
        // powertools_json(body)
        assert_eq!(
            key_of(JsonPointer::new("")),
            "p#9acb8525d225f4a7e2b2a51cc0ea2e88"
        );
        // [powertools_json(body).eventId, powertools_json(body).missing]
        assert_eq!(
            key_of(JsonPointers::new(["/eventId", "/missing"])),
            "p#643550e6cfb03f4c4db9d9837d43a18d"
        );
        // A string, however it was selected: the digest of its JSON string.
        let evt = PowertoolsFormat::new("p").key("p", "\"evt-1\"").unwrap();
        assert_eq!(key_of(JsonPointer::new("/eventId")), evt.as_str());
        let mut attributed = message();
        attributed
            .message_attributes
            .insert("Idempotency-Key".into(), {
                let mut attribute = SqsMessageAttribute::default();
                attribute.string_value = Some("evt-1".into());
                attribute.data_type = Some("String".into());
                attribute
            });
        let json = MessageAttribute::new("Idempotency-Key")
            .or(JsonPointer::new("/eventId"))
            .key_json(&attributed)
            .unwrap();
        assert_eq!(json, "\"evt-1\"");
        assert_eq!(MessageId.key_json(&message()).unwrap(), "\"m-1\"");
        // `body`: the body as text.
        assert_eq!(
            BodyHash.key_json(&message()).unwrap(),
            serde_json::Value::String(BODY.into()).to_string()
        );
    }

    #[test]
    fn key_data_that_is_not_text_fails_and_all_nulls_are_absent() {
        let bytes = |_: &SqsMessage| Ok::<_, KeyError>(vec![0x80u8, 0x81]);
        assert!(matches!(bytes.key_json(&message()), Err(KeyError::NotText)));
        // [null, null]: a true value to JMESPath, no key to Powertools.
        let nulls = JsonPointers::new(["/x", "/y"])
            .key_json(&message())
            .unwrap();
        assert_eq!(nulls, "[null,null]");
        let missing = PowertoolsFormat::new("p").key("p", &nulls);
        assert!(matches!(missing, Err(KeyError::Empty)));
        assert!(missing.unwrap_err().is_absent());
    }

    /// `a || b` in Powertools' expressions falls back on JMESPath's false values, which `or`
    /// follows for key data; a binary attribute has no `stringValue`.
    #[test]
    fn or_falls_back_as_jmespath_does() {
        let mut empty = message();
        empty.body = Some(r#"{"eventId":"","flag":false,"list":[],"nulls":[null]}"#.into());
        // md5(json.dumps("m-1")): powertools_json(body).eventId || messageId
        for pointer in ["/eventId", "/flag", "/list", "/missing"] {
            let json = JsonPointer::new(pointer)
                .or(MessageId)
                .key_json(&empty)
                .unwrap();
            assert_eq!(json, "\"m-1\"", "{pointer}");
        }
        let kept = JsonPointer::new("/nulls")
            .or(MessageId)
            .key_json(&empty)
            .unwrap();
        assert_eq!(kept, "[null]");
        let mut binary = message();
        binary.message_attributes.insert("Idempotency-Key".into(), {
            let mut attribute = SqsMessageAttribute::default();
            let mut data = aws_lambda_events::encodings::Base64Data::default();
            data.extend_from_slice(&[1, 2]);
            attribute.binary_value = Some(data);
            attribute.data_type = Some("Binary".into());
            attribute
        });
        let json = MessageAttribute::new("Idempotency-Key")
            .or(MessageId)
            .key_json(&binary)
            .unwrap();
        assert_eq!(json, "\"m-1\"");
        assert_eq!(
            PowertoolsFormat::new("p").key("p", &json).unwrap().as_str(),
            "p#07bfa2edad72a6be5d2cb60e90978991"
        );
    }

    #[test]
    fn payload_hashes_are_bare_digests_of_pythons_json() {
        let format = PowertoolsFormat::new("p");
        let body = format
            .payload_hash(&PayloadValidation::Body, &message())
            .unwrap()
            .unwrap();
        assert_eq!(body.as_str(), "9acb8525d225f4a7e2b2a51cc0ea2e88");
        let pointers = PayloadValidation::Pointers(vec!["/n".into(), "/o".into()]);
        let fields = format.payload_hash(&pointers, &message()).unwrap().unwrap();
        assert_eq!(fields.as_str(), "74aca4aae1a89ff867138348dd6f309d");
        // payload_validation_jmespath="powertools_json(body).n": the value, not a list.
        let one = PayloadValidation::Pointer("/n".into());
        let field = format.payload_hash(&one, &message()).unwrap().unwrap();
        assert_eq!(field.as_str(), "d1bd83a33f1a841ab7fda32449746cc4");
        assert!(format
            .payload_hash(&PayloadValidation::Off, &message())
            .unwrap()
            .is_none());
        let mut not_json = message();
        not_json.body = Some("plain text".into());
        assert!(matches!(
            format.payload_hash(&PayloadValidation::Body, &not_json),
            Err(KeyError::BodyNotJson(_))
        ));
    }

    #[test]
    fn hash_functions_parse_their_hashlib_names() {
        for hash in [
            HashFunction::Md5,
            HashFunction::Sha1,
            HashFunction::Sha224,
            HashFunction::Sha256,
            HashFunction::Sha384,
            HashFunction::Sha512,
        ] {
            assert_eq!(HashFunction::parse(hash.as_str()), Some(hash));
        }
        assert_eq!(HashFunction::parse("blake2b"), None);
    }
}
