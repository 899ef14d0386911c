//! Keys and payload hashes at the edges: JSON types, big numbers, attributes, old hashes.

use lambda_idempotency_test_support as support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::sqs::{SqsMessage, SqsMessageAttribute};
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::clock::{Clock, ManualClock};
use lambda_idempotency::key::PayloadValidation;
use lambda_idempotency::key::{IdempotencyKey, JsonPointer, KeyExtractor, MessageAttribute};
use lambda_idempotency::record::{OwnerToken, Status};
use lambda_idempotency::store::{InMemoryStore, Store};
use lambda_idempotency::{Error, IdempotencyLayer, Outcome};
use support::{invocation, outcomes};

use crate::{batch, config, message, Rig, REMAINING};

#[tokio::test]
async fn json_types_and_big_numbers_are_different_keys() {
    let rig = Rig::new();
    let bodies = [
        r#"{"id":"1"}"#,
        r#"{"id":1}"#,
        r#"{"id":"true"}"#,
        r#"{"id":true}"#,
        r#"{"id":"[1,2]"}"#,
        r#"{"id":[1,2]}"#,
        r#"{"id":18446744073709551616}"#,
        r#"{"id":18446744073709551617}"#,
    ];
    let layer = IdempotencyLayer::new(rig.store.clone())
        .with_clock(rig.clock.clone())
        .with_config(config())
        .with_key(JsonPointer::new("/id"));
    let runs = rig.runs.clone();
    let keyed = BatchProcessor::new(layer.handler(move |_m: SqsMessage| {
        let runs = runs.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::io::Error>(())
        }
    }))
    .with_clock(rig.clock.clone());
    for (i, body) in bodies.iter().enumerate() {
        let report = keyed
            .process(invocation(
                batch([message(&format!("m-{i}"), body)]),
                rig.clock.now(),
                REMAINING,
            ))
            .await;
        assert_eq!(outcomes(&report), [Outcome::Executed], "{body}");
    }
    assert_eq!(rig.runs(), bodies.len());
}

#[tokio::test]
async fn an_attribute_and_a_body_field_with_the_same_text_are_one_key() {
    let store = InMemoryStore::new();
    let clock = ManualClock::starting_now();
    let runs = Arc::new(AtomicUsize::new(0));
    let key = MessageAttribute::new("Idempotency-Key").or(JsonPointer::new("/eventId"));
    let layer = IdempotencyLayer::new(store)
        .with_clock(clock.clone())
        .with_config(config())
        .with_key(key);
    let counter = runs.clone();
    let processor = BatchProcessor::new(layer.handler(move |_m: SqsMessage| {
        let runs = counter.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::io::Error>(())
        }
    }))
    .with_clock(clock.clone());
    let mut by_attribute = message("m-1", "{}");
    let mut attribute = SqsMessageAttribute::default();
    attribute.string_value = Some("evt-9".into());
    attribute.data_type = Some("String".into());
    by_attribute
        .message_attributes
        .insert("Idempotency-Key".into(), attribute);
    let by_field = message("m-2", r#"{"eventId":"evt-9"}"#);
    let report = processor
        .process(invocation(batch([by_attribute]), clock.now(), REMAINING))
        .await;
    assert_eq!(outcomes(&report), [Outcome::Executed]);
    let report = processor
        .process(invocation(batch([by_field]), clock.now(), REMAINING))
        .await;
    assert_eq!(outcomes(&report), [Outcome::Replayed]);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn tampered_numbers_past_f64_precision_are_rejected() {
    for (original, tampered) in [
        (
            r#"{"id":"e-1","amount":0.1}"#,
            r#"{"id":"e-1","amount":0.10000000000000000001}"#,
        ),
        (
            r#"{"id":"e-2","amount":18446744073709551616}"#,
            r#"{"id":"e-2","amount":18446744073709551617}"#,
        ),
        (
            r#"{"id":"e-3","amount":123456789012345678901}"#,
            r#"{"id":"e-3","amount":123456789012345678902}"#,
        ),
    ] {
        let store = InMemoryStore::new();
        let clock = ManualClock::starting_now();
        let layer = IdempotencyLayer::new(store)
            .with_clock(clock.clone())
            .with_key(JsonPointer::new("/id"))
            .with_config(config().with_payload_validation(PayloadValidation::Body));
        let processor = BatchProcessor::new(
            layer.handler(|_m: SqsMessage| async { Ok::<_, std::io::Error>(()) }),
        )
        .with_clock(clock.clone());
        let first = processor
            .process(invocation(
                batch([message("m-1", original)]),
                clock.now(),
                REMAINING,
            ))
            .await;
        assert_eq!(outcomes(&first), [Outcome::Executed]);
        let second = processor
            .process(invocation(
                batch([message("m-2", tampered)]),
                clock.now(),
                REMAINING,
            ))
            .await;
        assert_eq!(outcomes(&second), [Outcome::Rejected], "{tampered}");
    }
}

#[tokio::test]
async fn a_record_hashed_in_the_old_format_still_replays_its_own_payload() {
    use lambda_idempotency::store::{AcquireRequest, CompleteRequest};
    let store = InMemoryStore::new();
    let clock = ManualClock::starting_now();
    let body = r#"{"id":"e-1","amount":25}"#;
    // What an earlier version stored: SHA-256 of the sorted JSON, without the `v2:` prefix.
    let legacy = sha256_hex(br#"{"amount":25,"id":"e-1"}"#);
    let key = IdempotencyKey::derive("t", b"e-1");
    let owner = OwnerToken::generate();
    let now = clock.now();
    store
        .acquire(&AcquireRequest {
            key: key.clone(),
            owner: owner.clone(),
            now,
            lease_expiration_ms: lambda_idempotency::clock::epoch_ms(now + REMAINING),
            expiration_secs: lambda_idempotency::clock::epoch_secs(now + Duration::from_secs(3600)),
            validation: Some(legacy),
        })
        .await
        .unwrap();
    store
        .complete(&CompleteRequest {
            key,
            owner,
            status: Status::Completed,
            data: "null".into(),
            expiration_secs: lambda_idempotency::clock::epoch_secs(now + Duration::from_secs(3600)),
            now,
        })
        .await
        .unwrap();
    let layer = IdempotencyLayer::new(store)
        .with_clock(clock.clone())
        .with_key(JsonPointer::new("/id"))
        .with_config(config().with_payload_validation(PayloadValidation::Body));
    let processor =
        BatchProcessor::new(layer.handler(|_m: SqsMessage| async { Ok::<_, std::io::Error>(()) }))
            .with_clock(clock.clone());
    let same = processor
        .process(invocation(
            batch([message("m-1", body)]),
            clock.now(),
            REMAINING,
        ))
        .await;
    assert_eq!(outcomes(&same), [Outcome::Replayed]);
    let other = processor
        .process(invocation(
            batch([message("m-2", r#"{"id":"e-1","amount":26}"#)]),
            clock.now(),
            REMAINING,
        ))
        .await;
    assert_eq!(outcomes(&other), [Outcome::Rejected]);
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[tokio::test]
async fn a_second_record_with_the_same_key_and_another_payload_is_rejected() {
    let rig = Rig::new();
    rig.fail.store(true, Ordering::SeqCst);
    let layer = IdempotencyLayer::new(rig.store.clone())
        .with_clock(rig.clock.clone())
        .with_key(JsonPointer::new("/id"))
        .with_config(config().with_payload_validation(PayloadValidation::Body));
    let (runs, fail) = (rig.runs.clone(), rig.fail.clone());
    let processor = BatchProcessor::new(layer.handler(move |_m: SqsMessage| {
        let (runs, fail) = (runs.clone(), fail.clone());
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            if fail.load(Ordering::SeqCst) {
                return Err(std::io::Error::other("declined"));
            }
            Ok(())
        }
    }))
    .with_clock(rig.clock.clone());
    let report = processor
        .process(invocation(
            batch([
                message("m-1", r#"{"id":"e-1","amount":1}"#),
                message("m-2", r#"{"id":"e-1","amount":1}"#),
                message("m-3", r#"{"id":"e-1","amount":2}"#),
            ]),
            rig.clock.now(),
            REMAINING,
        ))
        .await;
    assert_eq!(
        outcomes(&report),
        [Outcome::Failed, Outcome::Failed, Outcome::Rejected]
    );
    assert!(matches!(
        report.records[1].error,
        Some(Error::SameKeyFailed { .. })
    ));
    assert!(matches!(
        report.records[2].error,
        Some(Error::PayloadMismatch { .. })
    ));
    assert_eq!(rig.runs(), 1);
}

#[test]
fn keys_are_derived_the_same_way_as_documented() {
    // The stored key is the prefix and the SHA-256 of the material: the material of a
    // string field is its text, so the two extractors above agree.
    let material = JsonPointer::new("/eventId")
        .key_material(&message("m", r#"{"eventId":"evt-9"}"#))
        .unwrap();
    assert_eq!(material, b"evt-9");
}
