//! The stored form of a handler's result, and how a duplicate reads it back.
//!
//! A result is stored as its JSON text. When that does not fit the record (the store
//! answers [`ItemTooLarge`](crate::store::StoreError::ItemTooLarge)), it is stored
//! deflate-compressed and base64-encoded after a `~deflate:` tag; when even that does not
//! fit, or the result cannot be serialized at all, a `~omitted:<reason>` marker is stored in
//! its place. The record is `COMPLETED` in every case, so a duplicate never runs the handler
//! again because of its result: it replays the result, or is acknowledged as
//! [`Processed::ReplayedWithoutResult`]. No JSON text starts with `~`, so the forms cannot be
//! confused. In the [Powertools format](crate::powertools), which Powertools reads as JSON,
//! nothing is compressed and the marker is the JSON string `"~omitted:<reason>"`: a result
//! that is exactly that string replays without its result.

use std::future::Future;
use std::io::{Read, Write as _};
use std::time::SystemTime;

use base64::Engine as _;
use flate2::read::DeflateDecoder;
use flate2::write::DeflateEncoder;
use flate2::Compression;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::invoke::catch_panic;
use crate::config::Config;
use crate::error::Error;
use crate::hooks::{Replay, ReplaySource};
use crate::key::IdempotencyKey;
use crate::key::PayloadHash;
use crate::outcome::Processed;
use crate::powertools::python_json;
use crate::record::{decide, Decision, Record};
use crate::store::{CommitRequest, CompleteRequest, StoreError};

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

/// A result's text to store, in the form of the records' format.
pub(crate) struct ResultText {
    json: Result<String, serde_json::Error>,
    /// Records in Powertools' format: it reads `data` as JSON, so the text is as Python's
    /// `json.dumps(result, sort_keys=True)` writes it, never compressed, and a marker is a
    /// JSON string.
    powertools: bool,
}

/// The result as JSON, in the form `config`'s record format stores. A `Serialize`
/// implementation that panics is a serialization failure like any other: the handler has
/// run, so the record must still be completed.
pub(crate) fn to_json<T: Serialize>(result: &T, config: &Config) -> ResultText {
    let json = catch_panic(|| serde_json::to_string(result))
        .unwrap_or_else(|_| Err(serde::ser::Error::custom("serializing the result panicked")));
    let powertools = config.powertools.is_some();
    ResultText {
        json: match json {
            Ok(json) if powertools => python_json::dumps(&json),
            other => other,
        },
        powertools,
    }
}

/// Reads a stored result back for a duplicate. A result that no longer decodes (the result
/// type changed across a deploy, or its `Deserialize` panics) still belongs to a completed
/// record: the message is a duplicate and is acknowledged without the result rather than
/// sent to the dead-letter queue.
/// `powertools`: the records are in Powertools' format, whose markers are JSON strings.
pub(crate) fn replay<T: DeserializeOwned>(data: Option<&str>, powertools: bool) -> Processed<T> {
    match catch_panic(|| decode(data, powertools)) {
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

/// Reads a stored result back for a duplicate through `config`'s response hook, if any:
/// the hook gets the stored JSON and the duplicate its answer (see [`replay`] for results
/// that do not decode).
pub(crate) fn replay_with<T: DeserializeOwned>(
    data: Option<&str>,
    config: &Config,
    about: &Replay<'_>,
) -> Processed<T> {
    let (hooks, powertools) = (&config.hooks, config.powertools.is_some());
    if !hooks.has_response() {
        return replay(data, powertools);
    }
    match replay::<serde_json::Value>(data, powertools) {
        Processed::Replayed(json) => {
            let answer = hooks.respond(json.clone(), about);
            if answer == json {
                // Unchanged: the stored text, which keeps what a JSON value cannot (integers
                // past 64 bits).
                return replay(data, powertools);
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

/// The replay of a stored result `data` for `key`, found in `source`, through `config`'s
/// response hook.
pub(crate) fn replayed<T: DeserializeOwned>(
    config: &Config,
    key: &IdempotencyKey,
    data: Option<&str>,
    source: ReplaySource,
) -> Processed<T> {
    replay_with(data, config, &Replay { key, source })
}

/// The replay of `record`, found in `source` for `key`, when it is completed for the same
/// payload (and can no longer be taken over); `None` for anything else, which admission
/// answers on its own path.
pub(crate) fn replay_of<T: DeserializeOwned>(
    config: &Config,
    key: &IdempotencyKey,
    validation: Option<&PayloadHash>,
    record: &Record,
    now: SystemTime,
    source: ReplaySource,
) -> Option<Processed<T>> {
    match decide(record, now, validation) {
        Decision::Replay { data } => Some(replayed(config, key, data.as_deref(), source)),
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

/// The marker stored instead of a result: as a JSON string in Powertools' format.
pub(crate) fn omitted(reason: Omitted, powertools: bool) -> String {
    if powertools {
        format!("\"{OMITTED_TAG}{}\"", reason.as_str())
    } else {
        format!("{OMITTED_TAG}{}", reason.as_str())
    }
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

/// Reads a stored result back. `None` (no data attribute) reads as JSON `null`. In
/// Powertools' format (`powertools`) a marker is the JSON string of one.
pub(crate) fn decode<T: DeserializeOwned>(
    data: Option<&str>,
    powertools: bool,
) -> Result<Processed<T>, DecodeError> {
    let data = data.unwrap_or("null");
    // Powertools' format's markers: exactly the JSON string of one (no allocation: this
    // runs for every replay).
    let quoted_marker = powertools
        && data
            .strip_prefix('"')
            .and_then(|inner| inner.strip_suffix('"'))
            .and_then(|inner| inner.strip_prefix(OMITTED_TAG))
            .is_some_and(|reason| {
                [Omitted::TooLarge, Omitted::Unserializable]
                    .iter()
                    .any(|known| known.as_str() == reason)
            });
    if data.starts_with(OMITTED_TAG) || quoted_marker {
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

/// A request whose `data` is the result a record stores.
pub(crate) trait CarriesData {
    /// The data the request stores.
    fn data_mut(&mut self) -> &mut String;
}

impl CarriesData for CommitRequest {
    fn data_mut(&mut self) -> &mut String {
        &mut self.data
    }
}

impl CarriesData for CompleteRequest {
    fn data_mut(&mut self) -> &mut String {
        &mut self.data
    }
}

/// Sends `request` with the result's JSON (`serde_json::to_string` of it) as its data; while
/// the store refuses the record as too large, sends it again with the result compressed,
/// then with a marker in place of the result. A result that could not be serialized is
/// stored as a marker at once. `send` takes the request and gives it back with the store's
/// answer, so nothing in it is copied between sends. Answers what the store answered, and
/// the data it accepted.
pub(crate) async fn store_fitting<R, F, Fut, A>(
    text: ResultText,
    request: R,
    mut send: F,
) -> Result<(A, String), StoreError>
where
    R: CarriesData,
    F: FnMut(R) -> Fut,
    Fut: Future<Output = (R, Result<A, StoreError>)>,
{
    let mut send_with = |mut request: R, data: String| {
        *request.data_mut() = data;
        let sent = send(request);
        async move {
            let (mut request, answer) = sent.await;
            let data = std::mem::take(request.data_mut());
            (request, answer, data)
        }
    };
    let ResultText { json, powertools } = text;
    let json = match json {
        Ok(json) => json,
        Err(_) => {
            // The serializer's message may quote the result: it is not logged.
            tracing::warn!("the result cannot be serialized: storing the completion without it");
            let marker = omitted(Omitted::Unserializable, powertools);
            let (_, answer, marker) = send_with(request, marker).await;
            return answer.map(|answer| (answer, marker));
        }
    };
    let (mut request, json) = match send_with(request, json).await {
        (request, Err(StoreError::ItemTooLarge { .. }), json) => (request, json),
        (_, other, json) => return other.map(|answer| (answer, json)),
    };
    if !powertools {
        request = match send_with(request, compressed(&json)).await {
            (request, Err(StoreError::ItemTooLarge { .. }), _) => request,
            (_, other, small) => return other.map(|answer| (answer, small)),
        };
    }
    tracing::warn!(
        result_bytes = json.len(),
        "the result does not fit the record (compressed where the format allows): storing the completion without it"
    );
    let (_, answer, marker) = send_with(request, omitted(Omitted::TooLarge, powertools)).await;
    answer.map(|answer| (answer, marker))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::powertools::PowertoolsFormat;

    #[test]
    fn json_compressed_and_omitted_forms_read_back() {
        assert_eq!(
            decode::<Vec<u32>>(Some("[1,2]"), false).unwrap(),
            Processed::Replayed(vec![1, 2])
        );
        assert_eq!(decode::<()>(None, false).unwrap(), Processed::Replayed(()));
        let big = serde_json::to_string(&"ab".repeat(100_000)).unwrap();
        let small = compressed(&big);
        assert!(small.len() < big.len() / 50, "{} bytes", small.len());
        assert_eq!(
            decode::<String>(Some(&small), false).unwrap(),
            Processed::Replayed("ab".repeat(100_000))
        );
        for reason in [Omitted::TooLarge, Omitted::Unserializable] {
            assert_eq!(
                decode::<String>(Some(&omitted(reason, false)), false).unwrap(),
                Processed::ReplayedWithoutResult
            );
            // A string result that merely starts like a marker is a result, and in this
            // crate's own format one equal to a quoted marker is too.
            for result in ["~omitted:hello", "~omitted:too-large"] {
                let text = serde_json::to_string(result).unwrap();
                assert_eq!(
                    decode::<String>(Some(&text), false).unwrap(),
                    Processed::Replayed(result.to_string())
                );
            }
            // Powertools' format stores the marker as a JSON string, which Powertools reads.
            let marker = omitted(reason, true);
            assert!(serde_json::from_str::<String>(&marker).is_ok());
            assert_eq!(
                decode::<String>(Some(&marker), true).unwrap(),
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
        assert!(to_json(&Panics, &Config::new()).json.is_err());
        assert_eq!(to_json(&[1, 2], &Config::new()).json.unwrap(), "[1,2]");
        let powertools = Config::new().with_powertools_format(PowertoolsFormat::new("p"));
        let text = to_json(&serde_json::json!({"b": 1.0, "a": "é"}), &powertools);
        assert_eq!(text.json.unwrap(), r#"{"a": "\u00e9", "b": 1.0}"#);
    }

    #[test]
    fn damaged_or_foreign_data_is_an_error() {
        assert!(matches!(
            decode::<u32>(Some("\"text\""), false),
            Err(DecodeError::Json(_))
        ));
        assert!(matches!(
            decode::<u32>(Some("~deflate:!!!"), false),
            Err(DecodeError::Compressed)
        ));
        assert!(matches!(
            decode::<u32>(Some("~deflate:AAAA"), false),
            Err(DecodeError::Compressed)
        ));
    }

    #[test]
    fn replay_reads_the_stored_json_and_acknowledges_what_no_longer_decodes() {
        let replayed: Processed<Vec<u32>> = replay(Some("[1,2]"), false);
        assert_eq!(replayed, Processed::Replayed(vec![1, 2]));
        let unit: Processed<()> = replay(None, false);
        assert_eq!(unit.outcome(), crate::Outcome::Replayed);
        assert_eq!(
            replay::<u32>(Some("\"text\""), false),
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
            replay::<Panics>(Some("1"), false),
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

    /// A request that is its data alone.
    impl CarriesData for String {
        fn data_mut(&mut self) -> &mut String {
            self
        }
    }

    #[tokio::test]
    async fn results_are_compressed_then_omitted_until_they_fit() {
        let native = Config::new();
        let limit = 1000;
        let fits = |data: String| async move {
            let answer = if data.len() > limit {
                Err(StoreError::ItemTooLarge {
                    size_bytes: data.len(),
                    limit_bytes: limit,
                })
            } else {
                Ok(())
            };
            (data, answer)
        };
        let (_, small) = store_fitting(to_json(&"short", &native), String::new(), fits)
            .await
            .unwrap();
        assert_eq!(small, "\"short\"");
        let (_, medium) = store_fitting(to_json(&"a".repeat(5_000), &native), String::new(), fits)
            .await
            .unwrap();
        assert_eq!(
            decode::<String>(Some(&medium), false).unwrap(),
            Processed::Replayed("a".repeat(5_000))
        );
        let mut rng = fastrand::Rng::with_seed(7);
        let noise: String = (0..5_000).map(|_| rng.alphanumeric()).collect();
        let (_, large) = store_fitting(to_json(&noise, &native), String::new(), fits)
            .await
            .unwrap();
        assert_eq!(
            decode::<String>(Some(&large), false).unwrap(),
            Processed::ReplayedWithoutResult
        );
        // Powertools reads `data` as JSON: the medium result is not compressed but omitted,
        // with a marker that is JSON.
        let powertools = Config::new().with_powertools_format(PowertoolsFormat::new("p"));
        let (_, medium) = store_fitting(
            to_json(&"a".repeat(5_000), &powertools),
            String::new(),
            fits,
        )
        .await
        .unwrap();
        assert_eq!(medium, "\"~omitted:too-large\"");
        assert_eq!(
            decode::<String>(Some(&medium), true).unwrap(),
            Processed::ReplayedWithoutResult
        );
    }

    #[tokio::test]
    async fn unserializable_results_store_a_marker() {
        struct Bad;
        impl Serialize for Bad {
            fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
                Err(serde::ser::Error::custom("no"))
            }
        }
        let (_, data) = store_fitting(
            to_json(&Bad, &Config::new()),
            String::new(),
            |data: String| async move { (data.clone(), Ok::<_, StoreError>(data)) },
        )
        .await
        .unwrap();
        assert_eq!(
            decode::<u8>(Some(&data), false).unwrap(),
            Processed::ReplayedWithoutResult
        );
    }
}
