//! Keys and identifiers: long prefixes, missing keys, no `messageId`, hashed stored keys.

use lambda_idempotency_test_support as support;

use std::sync::{Arc, Mutex};

use aws_lambda_events::sqs::SqsMessage;
use lambda_idempotency::batch::{BatchError, BatchProcessor};
use lambda_idempotency::clock::Clock;
use lambda_idempotency::key::JsonPointer;
use lambda_idempotency::store::InMemoryStore;
use lambda_idempotency::{Config, Error, IdempotencyLayer, MissingKey, Outcome};
use support::{invocation, load_event, outcomes};

use crate::{Setup, REMAINING};

#[tokio::test]
async fn a_key_prefix_too_long_for_dynamodb_is_a_typed_rejection() {
    let mut setup = Setup::new();
    setup.config = Config::new().with_key_prefix("p".repeat(2000));
    let mut event = load_event("batch.json");
    event.records.truncate(1);
    let report = setup.run(event).await;
    assert_eq!(outcomes(&report), [Outcome::Rejected]);
    assert!(matches!(
        report.records[0].error,
        Some(Error::Key(
            lambda_idempotency::key::KeyError::KeyTooLong { .. }
        ))
    ));
    assert_eq!(setup.effects.total(), 0);
}

#[tokio::test]
async fn record_without_message_id_never_yields_an_empty_identifier() {
    let setup = Setup::new();
    let layer = IdempotencyLayer::new(setup.store.clone()).with_clock(setup.clock.clone());
    let processor =
        BatchProcessor::new(layer.handler(|_m: SqsMessage| async { Ok::<_, std::io::Error>(()) }))
            .with_clock(setup.clock.clone());
    let mut event = load_event("batch.json");
    event.records[1].message_id = None;
    event.records[2].message_id = Some(String::new());
    let report = processor
        .process(invocation(event, setup.clock.now(), REMAINING))
        .await;
    // Keyed by messageId, both are rejected, but neither can be reported.
    assert_eq!(
        outcomes(&report),
        [Outcome::Executed, Outcome::Rejected, Outcome::Rejected]
    );
    assert!(report.response.batch_item_failures.is_empty());
    assert_eq!(report.unreportable, 2);
    // So the invocation fails and SQS retries the whole batch.
    match report.into_response() {
        Err(err @ BatchError::UnreportableFailures { count: 2 }) => {
            let diagnostic: lambda_runtime::Diagnostic = err.into();
            assert_eq!(diagnostic.error_type, "Idempotency.UnreportableFailures");
        }
        other => panic!("expected UnreportableFailures, got {other:?}"),
    }
}

#[tokio::test]
async fn record_without_message_id_that_succeeds_needs_no_identifier() {
    let setup = Setup::new();
    let mut event = load_event("batch.json");
    event.records[0].message_id = None;
    let report = setup.run(event).await;
    assert_eq!(outcomes(&report), [Outcome::Executed; 3]);
    assert!(report.into_response().is_ok());
}

#[tokio::test]
async fn missing_key_fails_the_record_unless_unprotected_processing_is_chosen() {
    let mut event = load_event("batch.json");
    event.records.truncate(1);
    event.records[0].body = Some(r#"{"account":"acct-alice","amount":1}"#.into());
    for policy in [MissingKey::Fail, MissingKey::ProcessUnprotected] {
        let store = InMemoryStore::new();
        let calls = Arc::new(Mutex::new(0));
        let counted = calls.clone();
        let layer = IdempotencyLayer::new(store.clone())
            .with_key(JsonPointer::new("/eventId"))
            .with_config(Config::new().with_missing_key(policy));
        let processor = BatchProcessor::new(layer.handler(move |_m: SqsMessage| {
            let counted = counted.clone();
            async move {
                *counted.lock().unwrap() += 1;
                Ok::<_, std::io::Error>(())
            }
        }));
        let now = std::time::SystemTime::now();
        let report = processor
            .process(invocation(event.clone(), now, REMAINING))
            .await;
        match policy {
            MissingKey::Fail => {
                assert_eq!(outcomes(&report), [Outcome::Rejected]);
                assert!(matches!(
                    report.records[0].error,
                    Some(Error::Key(
                        lambda_idempotency::key::KeyError::PointerNotFound { .. }
                    ))
                ));
                assert_eq!(*calls.lock().unwrap(), 0);
            }
            _ => {
                assert_eq!(outcomes(&report), [Outcome::Unprotected]);
                assert_eq!(*calls.lock().unwrap(), 1);
            }
        }
        assert!(store.records().is_empty(), "nothing stored without a key");
    }
}

#[tokio::test]
async fn stored_keys_hold_no_raw_key_material() {
    let setup = Setup::new();
    setup.run(load_event("batch.json")).await;
    for record in setup.store.records() {
        let key = record.key.as_str();
        assert!(key.starts_with("orders#"), "{key}");
        assert!(!key.contains("evt-"), "{key}");
        assert_eq!(key.len(), "orders#".len() + 64);
    }
}

/// A handler with writes never runs unprotected (its writes commit with the record), under
/// either commit strategy, even with `MissingKey::ProcessUnprotected`: the record is rejected
/// with the key error. (Written in review of the admission consolidation.)
#[tokio::test]
async fn a_missing_key_with_writes_is_a_key_error_under_both_strategies() {
    use lambda_idempotency::{CommitStrategy, Completion};
    let mut event = load_event("batch.json");
    event.records.truncate(1);
    event.records[0].body = Some(r#"{"account":"acct-alice","amount":1}"#.into());
    for strategy in [CommitStrategy::Lease, CommitStrategy::Optimistic] {
        let store = InMemoryStore::new();
        let calls = Arc::new(Mutex::new(0));
        let counted = calls.clone();
        let layer = IdempotencyLayer::new(store.clone())
            .with_key(JsonPointer::new("/eventId"))
            .with_config(Config::new().with_missing_key(MissingKey::ProcessUnprotected))
            .with_writes()
            .with_commit(strategy);
        let processor = BatchProcessor::new(layer.handler(move |_m: SqsMessage| {
            let counted = counted.clone();
            async move {
                *counted.lock().unwrap() += 1;
                Ok::<_, std::io::Error>(Completion::new(1))
            }
        }));
        let report = processor
            .process(invocation(
                event.clone(),
                std::time::SystemTime::now(),
                REMAINING,
            ))
            .await;
        assert_eq!(outcomes(&report), [Outcome::Rejected], "{strategy:?}");
        assert!(
            matches!(
                report.records[0].error,
                Some(Error::Key(
                    lambda_idempotency::key::KeyError::PointerNotFound { .. }
                ))
            ),
            "{strategy:?}"
        );
        assert_eq!(*calls.lock().unwrap(), 0, "{strategy:?}");
        assert!(store.records().is_empty());
    }
}
