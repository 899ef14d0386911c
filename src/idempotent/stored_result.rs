//! The stored form of a handler's result, and how a duplicate reads it back.
//!
//! A result is stored as its JSON text. When that does not fit the record (the store
//! answers [`ItemTooLarge`](crate::store::StoreError::ItemTooLarge)), it is stored
//! deflate-compressed and base64-encoded after a `~deflate:` tag; when even that does not
//! fit, or the result cannot be serialized at all, a `~omitted:<reason>` marker is stored in
//! its place. The record is `COMPLETED` in every case, so a duplicate never runs the handler
//! again because of its result: it replays the result, or is acknowledged as
//! [`Processed::ReplayedWithoutResult`]. No JSON text starts with `~`, so the forms cannot be
//! confused.

use std::io::{Read, Write as _};
use std::time::SystemTime;

use base64::Engine as _;
use flate2::read::DeflateDecoder;
use flate2::write::DeflateEncoder;
use flate2::Compression;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::invoke::catch_panic;
use crate::error::Error;
use crate::hooks::{Hooks, Replay, ReplaySource};
use crate::key::IdempotencyKey;
use crate::processed::Processed;
use crate::record::{decide, Decision, Record};
use crate::validation::PayloadHash;

const COMPRESSED_TAG: &str = "~deflate:";
const OMITTED_TAG: &str = "~omitted:";

/// The most a stored compressed result may inflate to; a larger one is not read back.
const INFLATED_LIMIT_BYTES: u64 = 64 * 1024 * 1024;

/// Why a completed record carries no result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Omitted {
    /// The result did not fit the record, even compressed.
    TooLarge,
    /// The result could not be serialized.
    Unserializable,
}

impl Omitted {
    fn as_str(self) -> &'static str {
        match self {
            Omitted::TooLarge => "too-large",
            Omitted::Unserializable => "unserializable",
        }
    }
}

/// The result as JSON. A `Serialize` implementation that panics is a serialization failure
/// like any other: the handler has run, so the record must still be completed.
pub(crate) fn to_json<T: Serialize>(result: &T) -> Result<String, serde_json::Error> {
    catch_panic(|| serde_json::to_string(result))
        .unwrap_or_else(|_| Err(serde::ser::Error::custom("serializing the result panicked")))
}

/// Reads a stored result back for a duplicate. A result that no longer decodes (the result
/// type changed across a deploy, or its `Deserialize` panics) still belongs to a completed
/// record: the message is a duplicate and is acknowledged without the result rather than
/// sent to the dead-letter queue.
pub(crate) fn replay<T: DeserializeOwned>(data: Option<&str>) -> Processed<T> {
    match catch_panic(|| decode(data)) {
        Ok(Ok(replayed)) => replayed,
        Ok(Err(err)) => {
            tracing::warn!(error = %err, "acknowledging a duplicate whose stored result cannot be read");
            Processed::ReplayedWithoutResult
        }
        Err(_) => {
            tracing::warn!("acknowledging a duplicate whose stored result panicked on reading");
            Processed::ReplayedWithoutResult
        }
    }
}

/// Reads a stored result back for a duplicate through the configured response hook, if any:
/// the hook gets the stored JSON and the duplicate its answer (see [`replay`] for results
/// that do not decode).
pub(crate) fn replay_with<T: DeserializeOwned>(
    data: Option<&str>,
    hooks: &Hooks,
    about: &Replay<'_>,
) -> Processed<T> {
    if !hooks.has_response() {
        return replay(data);
    }
    match replay::<serde_json::Value>(data) {
        Processed::Replayed(json) => {
            let answer = hooks.respond(json.clone(), about);
            if answer == json {
                // Unchanged: the stored text, which keeps what a JSON value cannot (integers
                // past 64 bits).
                return replay(data);
            }
            match catch_panic(|| serde_json::from_value::<T>(answer)) {
                Ok(Ok(value)) => Processed::Replayed(value),
                _ => {
                    tracing::warn!("acknowledging a duplicate whose hooked result does not decode");
                    Processed::ReplayedWithoutResult
                }
            }
        }
        _ => Processed::ReplayedWithoutResult,
    }
}

/// The replay of a stored result `data` for `key`, found in `source`, through the response
/// hook.
pub(crate) fn replayed<T: DeserializeOwned>(
    hooks: &Hooks,
    key: &IdempotencyKey,
    data: Option<&str>,
    source: ReplaySource,
) -> Processed<T> {
    replay_with(data, hooks, &Replay { key, source })
}

/// The replay of `record`, found in `source` for `key`, when it is completed for the same
/// payload (and can no longer be taken over); `None` for anything else, which admission
/// answers on its own path.
pub(crate) fn replay_of<T: DeserializeOwned>(
    hooks: &Hooks,
    key: &IdempotencyKey,
    validation: Option<&PayloadHash>,
    record: &Record,
    now: SystemTime,
    source: ReplaySource,
) -> Option<Processed<T>> {
    match decide(record, now, validation) {
        Decision::Replay { data } => Some(replayed(hooks, key, data.as_deref(), source)),
        _ => None,
    }
}

/// The error a duplicate of a permanently failed record gets: the stored message.
pub(crate) fn replay_failure(data: Option<&str>) -> Error {
    let message = data
        .and_then(|d| serde_json::from_str::<String>(d).ok())
        .unwrap_or_else(|| "permanent failure".to_string());
    Error::Permanent {
        message,
        replayed: true,
    }
}

/// `json`, deflate-compressed and base64-encoded, after the `~deflate:` tag.
pub(crate) fn compressed(json: &str) -> String {
    let mut encoder = DeflateEncoder::new(Vec::new(), Compression::best());
    // Writing into a Vec cannot fail.
    let bytes = encoder
        .write_all(json.as_bytes())
        .and_then(|()| encoder.finish())
        .unwrap_or_default();
    let mut out = String::from(COMPRESSED_TAG);
    base64::engine::general_purpose::STANDARD.encode_string(bytes, &mut out);
    out
}

/// The marker stored instead of a result.
pub(crate) fn omitted(reason: Omitted) -> String {
    format!("{OMITTED_TAG}{}", reason.as_str())
}

/// Why a stored result could not be read back.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DecodeError {
    /// Not JSON of the result type.
    #[error("the stored result does not decode as the result type")]
    Json(#[from] serde_json::Error),
    /// A compressed result that does not inflate.
    #[error("the stored compressed result is damaged")]
    Compressed,
}

/// Reads a stored result back. `None` (no data attribute) reads as JSON `null`.
pub(crate) fn decode<T: DeserializeOwned>(data: Option<&str>) -> Result<Processed<T>, DecodeError> {
    let data = data.unwrap_or("null");
    if data.starts_with(OMITTED_TAG) {
        return Ok(Processed::ReplayedWithoutResult);
    }
    if let Some(encoded) = data.strip_prefix(COMPRESSED_TAG) {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|_| DecodeError::Compressed)?;
        let mut json = Vec::new();
        DeflateDecoder::new(bytes.as_slice())
            .take(INFLATED_LIMIT_BYTES)
            .read_to_end(&mut json)
            .map_err(|_| DecodeError::Compressed)?;
        return Ok(Processed::Replayed(serde_json::from_slice(&json)?));
    }
    Ok(Processed::Replayed(serde_json::from_str(data)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_compressed_and_omitted_forms_read_back() {
        assert_eq!(
            decode::<Vec<u32>>(Some("[1,2]")).unwrap(),
            Processed::Replayed(vec![1, 2])
        );
        assert_eq!(decode::<()>(None).unwrap(), Processed::Replayed(()));
        let big = serde_json::to_string(&"ab".repeat(100_000)).unwrap();
        let small = compressed(&big);
        assert!(small.len() < big.len() / 50, "{} bytes", small.len());
        assert_eq!(
            decode::<String>(Some(&small)).unwrap(),
            Processed::Replayed("ab".repeat(100_000))
        );
        for reason in [Omitted::TooLarge, Omitted::Unserializable] {
            assert_eq!(
                decode::<String>(Some(&omitted(reason))).unwrap(),
                Processed::ReplayedWithoutResult
            );
        }
    }

    #[test]
    fn a_panicking_serializer_is_a_serialization_error() {
        struct Panics;
        impl Serialize for Panics {
            fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
                panic!("no")
            }
        }
        assert!(to_json(&Panics).is_err());
        assert_eq!(to_json(&[1, 2]).unwrap(), "[1,2]");
    }

    #[test]
    fn damaged_or_foreign_data_is_an_error() {
        assert!(matches!(
            decode::<u32>(Some("\"text\"")),
            Err(DecodeError::Json(_))
        ));
        assert!(matches!(
            decode::<u32>(Some("~deflate:!!!")),
            Err(DecodeError::Compressed)
        ));
        assert!(matches!(
            decode::<u32>(Some("~deflate:AAAA")),
            Err(DecodeError::Compressed)
        ));
    }

    #[test]
    fn replay_reads_the_stored_json_and_acknowledges_what_no_longer_decodes() {
        let replayed: Processed<Vec<u32>> = replay(Some("[1,2]"));
        assert_eq!(replayed, Processed::Replayed(vec![1, 2]));
        let unit: Processed<()> = replay(None);
        assert_eq!(unit.outcome(), crate::Outcome::Replayed);
        assert_eq!(
            replay::<u32>(Some("\"text\"")),
            Processed::ReplayedWithoutResult
        );
    }

    #[test]
    fn a_panicking_deserializer_replays_without_the_result() {
        #[derive(Debug, PartialEq)]
        struct Panics;
        impl<'de> serde::Deserialize<'de> for Panics {
            fn deserialize<D: serde::Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
                panic!("no")
            }
        }
        assert_eq!(
            replay::<Panics>(Some("1")),
            Processed::ReplayedWithoutResult
        );
    }

    #[test]
    fn stored_failures_replay_their_message() {
        match replay_failure(Some("\"card declined\"")) {
            Error::Permanent { message, replayed } => {
                assert_eq!(message, "card declined");
                assert!(replayed);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
