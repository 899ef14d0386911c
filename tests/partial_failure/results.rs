//! Results too large or unserializable, and huge permanent failures: stored, never run again.

use lambda_idempotency_test_support as support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::sqs::SqsMessage;
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::clock::{Clock, ManualClock};
use lambda_idempotency::record::Status;
use lambda_idempotency::store::InMemoryStore;
use lambda_idempotency::{Error, IdempotencyLayer, Outcome, Permanent};
use support::{invocation, outcomes, reported};

use crate::{batch, config, message, stored, REMAINING};

/// Random letters and digits: they do not compress below 400 KB at this length.
fn incompressible(len: usize) -> String {
    let mut rng = fastrand::Rng::with_seed(42);
    (0..len).map(|_| rng.alphanumeric()).collect()
}

#[tokio::test]
async fn a_result_that_does_not_fit_never_runs_the_handler_again() {
    for (name, result) in [
        ("compressible", "ab".repeat(300_000)),
        ("incompressible", incompressible(700_000)),
    ] {
        let store = InMemoryStore::new();
        let clock = ManualClock::starting_now();
        let runs = Arc::new(AtomicUsize::new(0));
        let layer = IdempotencyLayer::new(store.clone())
            .with_clock(clock.clone())
            .with_config(config());
        let handler = {
            let (runs, result) = (runs.clone(), result.clone());
            move |_m: SqsMessage| {
                let (runs, result) = (runs.clone(), result.clone());
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, std::io::Error>(result)
                }
            }
        };
        let processor = BatchProcessor::new(layer.handler(handler)).with_clock(clock.clone());
        let first = processor
            .process(invocation(
                batch([message("m-1", "{}")]),
                clock.now(),
                REMAINING,
            ))
            .await;
        assert_eq!(outcomes(&first), [Outcome::Executed], "{name}");
        let record = stored(&store, "m-1").await.expect("record");
        assert_eq!(record.status, Status::Completed, "{name}");
        // Redelivered after the lease would have ended: a duplicate, never run again.
        clock.advance(REMAINING + Duration::from_secs(1));
        let second = processor
            .process(invocation(
                batch([message("m-1", "{}")]),
                clock.now(),
                REMAINING,
            ))
            .await;
        assert_eq!(outcomes(&second), [Outcome::Replayed], "{name}");
        assert!(reported(&second).is_empty(), "{name}");
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "{name}: the handler ran again"
        );
        let replayed = second.records[0].value.as_ref();
        if name == "compressible" {
            assert_eq!(
                replayed,
                Some(&result),
                "a compressed result replays in full"
            );
        } else {
            assert_eq!(
                replayed, None,
                "too large even compressed: acknowledged without it"
            );
        }
    }
}

#[derive(Debug, serde::Deserialize)]
struct Unserializable;

impl serde::Serialize for Unserializable {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom("no JSON form"))
    }
}

/// A result whose `Serialize` panics (user code, outside the handler).
#[derive(Debug, serde::Deserialize)]
struct PanicsOnSerialize;

impl serde::Serialize for PanicsOnSerialize {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        panic!("cannot serialize")
    }
}

async fn runs_once_with_result<T>(result: fn() -> T)
where
    T: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    let store = InMemoryStore::new();
    let clock = ManualClock::starting_now();
    let runs = Arc::new(AtomicUsize::new(0));
    let layer = IdempotencyLayer::new(store.clone())
        .with_clock(clock.clone())
        .with_config(config());
    let counter = runs.clone();
    let processor = BatchProcessor::new(layer.handler(move |_m: SqsMessage| {
        let runs = counter.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::io::Error>(result())
        }
    }))
    .with_clock(clock.clone());
    for expected in [Outcome::Executed, Outcome::Replayed] {
        let report = processor
            .process(invocation(
                batch([message("m-1", "{}")]),
                clock.now(),
                REMAINING,
            ))
            .await;
        assert_eq!(outcomes(&report), [expected]);
        clock.advance(REMAINING + Duration::from_secs(1));
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the handler ran again");
    assert_eq!(
        stored(&store, "m-1").await.unwrap().status,
        Status::Completed
    );
}

#[tokio::test]
async fn a_result_that_cannot_be_serialized_never_runs_the_handler_again() {
    runs_once_with_result(|| Unserializable).await;
    // Found in review: a panicking serializer ran outside the handler's panic catch.
    runs_once_with_result(|| PanicsOnSerialize).await;
}

#[tokio::test]
async fn a_permanent_failure_with_a_huge_message_is_stored_cut_to_fit() {
    let store = InMemoryStore::new();
    let clock = ManualClock::starting_now();
    let runs = Arc::new(AtomicUsize::new(0));
    let layer = IdempotencyLayer::new(store.clone())
        .with_clock(clock.clone())
        .with_config(config().with_stored_failure_messages(true));
    let counter = runs.clone();
    let processor = BatchProcessor::new(layer.handler(move |_m: SqsMessage| {
        let runs = counter.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>(Permanent::new("x".repeat(500 * 1024)))
        }
    }))
    .with_clock(clock.clone());
    for replayed in [false, true] {
        let report = processor
            .process(invocation(
                batch([message("m-1", "{}")]),
                clock.now(),
                REMAINING,
            ))
            .await;
        assert_eq!(outcomes(&report), [Outcome::FailedPermanently]);
        assert!(reported(&report).is_empty());
        match report.records[0].error.as_ref() {
            Some(Error::Permanent {
                message,
                replayed: r,
            }) => {
                assert_eq!(*r, replayed);
                // This delivery's own error has the whole message; the stored one is cut.
                if replayed {
                    assert!(
                        message.len() <= lambda_idempotency::idempotent::MAX_STORED_FAILURE_BYTES
                    );
                } else {
                    assert_eq!(message.len(), 500 * 1024);
                }
            }
            other => panic!("unexpected {other:?}"),
        }
        clock.advance(REMAINING + Duration::from_secs(1));
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let record = stored(&store, "m-1").await.unwrap();
    assert_eq!(record.status, Status::Failed);
    let data = record.data.unwrap_or_default();
    assert!(
        data.len() <= lambda_idempotency::idempotent::MAX_STORED_FAILURE_BYTES + 2,
        "{}",
        data.len()
    );
}
