//! Bad input, fuzzed with proptest: event JSON, record bodies (not JSON, binary-looking,
//! very large, unicode), message ids (absent, empty) and key sources. No panic escapes, every
//! record ends in one outcome, a bad record fails alone with a typed error, and no empty
//! `itemIdentifier` is ever emitted.
use lambda_idempotency_test_support as support;

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage, SqsMessageAttribute};
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::key::PayloadValidation;
use lambda_idempotency::key::{
    BodyHash, IdempotencyKey, JsonPointer, KeyExtractor, MessageAttribute,
};
use lambda_idempotency::store::InMemoryStore;
use lambda_idempotency::{Config, Error, IdempotencyLayer, Outcome};
use order_consumer::{order_key, Order};
use proptest::prelude::*;
use support::invocation;

/// Bodies: valid orders, near-misses, garbage, unicode and control characters, large.
fn body() -> impl Strategy<Value = Option<String>> {
    let valid = ("[a-z0-9-]{1,12}", "[a-z]{1,8}", -1000i64..1000).prop_map(|(e, a, n)| {
        serde_json::json!({"eventId": format!("evt-{e}"), "account": a, "amount": n}).to_string()
    });
    prop_oneof![
        4 => valid.prop_map(Some),
        1 => Just(None),
        1 => any::<String>().prop_map(Some),
        1 => "\\PC{0,64}".prop_map(Some),
        1 => proptest::collection::vec(any::<u8>(), 0..64)
            .prop_map(|b| Some(String::from_utf8_lossy(&b).into_owned())),
        1 => Just(Some(r#"{"eventId":"evt-x","account":"a","amount":"5"}"#.to_string())),
        1 => Just(Some(r#"{"eventId":null,"account":"a","amount":5}"#.to_string())),
        1 => Just(Some(r#"{"eventId":"évt-☃-𝄞-\u0000","account":"ä","amount":1}"#.to_string())),
        1 => (1usize..300_000).prop_map(|n| Some("z".repeat(n))),
    ]
}

fn message_id() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        6 => "[a-f0-9-]{8,36}".prop_map(Some),
        1 => Just(None),
        1 => Just(Some(String::new())),
        1 => "\\PC{1,20}".prop_map(Some),
    ]
}

fn attribute() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        3 => Just(None),
        1 => "\\PC{0,40}".prop_map(Some),
        1 => (2_000usize..12_000).prop_map(|n| Some("k".repeat(n))),
    ]
}

fn message() -> impl Strategy<Value = SqsMessage> {
    (message_id(), body(), attribute()).prop_map(|(id, body, key)| {
        let mut m = SqsMessage::default();
        m.message_id = id;
        m.body = body;
        if let Some(key) = key {
            let mut attribute = SqsMessageAttribute::default();
            attribute.string_value = Some(key);
            attribute.data_type = Some("String".into());
            m.message_attributes
                .insert("Idempotency-Key".into(), attribute);
        }
        m
    })
}

fn parses_as_order(message: &SqsMessage) -> bool {
    message
        .body
        .as_deref()
        .and_then(|b| serde_json::from_str::<Order>(b).ok())
        .is_some()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Whatever the records hold, the batch ends with one outcome per record, only
    /// non-empty identifiers are reported, and every well-formed order is processed.
    #[test]
    fn any_batch_ends_in_one_outcome_per_record(records in proptest::collection::vec(message(), 1..12)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let layer = IdempotencyLayer::new(InMemoryStore::new())
            .with_key(order_key())
            .with_config(Config::new().with_payload_validation(PayloadValidation::Body));
        let processor = BatchProcessor::new(layer.handler(|m: SqsMessage| async move {
            serde_json::from_str::<Order>(m.body.as_deref().unwrap_or("")).map(|o| o.amount)
        }));
        let mut event = SqsEvent::default();
        event.records = records.clone();
        let report = runtime.block_on(processor.process(invocation(
            event,
            SystemTime::now(),
            Duration::from_secs(30),
        )));
        prop_assert_eq!(report.records.len(), records.len());
        let ids: HashSet<&str> = records.iter().filter_map(|r| r.message_id.as_deref()).collect();
        for failure in &report.response.batch_item_failures {
            prop_assert!(!failure.item_identifier.is_empty());
            prop_assert!(ids.contains(failure.item_identifier.as_str()));
        }
        let mut unreportable = 0;
        for (record, outcome) in records.iter().zip(&report.records) {
            if !outcome.outcome.is_acknowledged() {
                prop_assert!(outcome.error.is_some(), "a failure carries its error");
                if record.message_id.as_deref().is_none_or(str::is_empty) {
                    unreportable += 1;
                }
            }
            if parses_as_order(record) && !outcome.outcome.is_acknowledged() {
                // A good order fails only as a duplicate key with another payload (or as
                // the twin of such a record) in the same batch.
                let allowed = matches!(
                    outcome.error,
                    Some(Error::PayloadMismatch { .. } | Error::SameKeyFailed { .. } | Error::InProgress { .. })
                );
                prop_assert!(allowed, "good order failed: {:?}", outcome.error);
            }
            if !parses_as_order(record) {
                // A bad record fails, alone, with a typed error; it is never acknowledged.
                prop_assert!(!outcome.outcome.is_acknowledged(), "{:?}", outcome.outcome);
                prop_assert!(
                    matches!(outcome.outcome, Outcome::Rejected | Outcome::Failed),
                    "{:?}",
                    outcome.outcome
                );
            }
        }
        prop_assert_eq!(report.unreportable, unreportable);
    }

    /// Any JSON as an event: deserializing either works or fails with an error, never a panic.
    #[test]
    fn any_json_event_parses_or_fails_cleanly(text in "\\PC{0,200}") {
        let _ = serde_json::from_str::<SqsEvent>(&text);
        let wrapped = format!(r#"{{"Records":[{{"messageId":"m","body":{}}}]}}"#, serde_json::Value::String(text));
        let event: SqsEvent = serde_json::from_str(&wrapped).unwrap();
        prop_assert_eq!(event.records.len(), 1);
    }

    /// Key extraction never panics, and stored keys have a fixed shape whatever the input.
    #[test]
    fn key_extraction_never_panics_and_keys_have_a_fixed_shape(
        record in message(),
        pointer in prop_oneof![Just("/eventId".to_string()), "\\PC{0,12}", "/[a-z~01/]{0,12}"],
    ) {
        let extractors: Vec<Box<dyn KeyExtractor<SqsMessage>>> = vec![
            Box::new(JsonPointer::new(pointer)),
            Box::new(BodyHash),
            Box::new(MessageAttribute::new("Idempotency-Key")),
        ];
        for extractor in &extractors {
            if let Ok(material) = extractor.key_material(&record) {
                prop_assert!(!material.is_empty());
                let key = IdempotencyKey::derive("fuzz", &material);
                prop_assert_eq!(key.as_str().len(), "fuzz#".len() + 64);
                prop_assert!(key.as_str()["fuzz#".len()..].bytes().all(|b| b.is_ascii_hexdigit()));
            }
        }
        let _ = PayloadValidation::Body.hash(&record);
        let _ = PayloadValidation::Pointers(vec!["/amount".into(), "/x/0".into()]).hash(&record);
    }
}

#[test]
fn unicode_keys_are_distinct_and_never_normalized() {
    // Composed and decomposed "é" are different byte strings, so different keys: keys are
    // compared byte for byte, with no unicode normalization.
    let composed = IdempotencyKey::derive("u", "caf\u{e9}".as_bytes());
    let decomposed = IdempotencyKey::derive("u", "cafe\u{301}".as_bytes());
    assert_ne!(composed, decomposed);
    for material in ["☃", "𝄞", "\u{0}", "مرحبا", "🇫🇷", "\u{feff}x"] {
        let key = IdempotencyKey::derive("u", material.as_bytes());
        assert_eq!(key.as_str().len(), 2 + 64);
    }
}
