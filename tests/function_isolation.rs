//! Idempotent functions stay apart from everything else in their table: no handler record,
//! whatever its input, answers a function's call, and a function takes a lease even on a
//! layer in optimistic mode (its effect is outside the store). Per call: how many times the
//! function ran and what the caller got.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_lambda_events::event::kinesis::KinesisEventRecord;
use lambda_idempotency::input::Serialized;
use lambda_idempotency::key::{BodyHash, IdempotencyKey, KeyExtractor};
use lambda_idempotency::record::Status;
use lambda_idempotency::store::{InMemoryStore, Store};
use lambda_idempotency::{
    BoxError, CommitStrategy, Completion, Config, Error, IdempotencyLayer, Processed,
};
use lambda_idempotency_test_support::context_at;
use lambda_runtime::LambdaEvent;
use tokio::sync::Notify;
use tower::ServiceExt;

const LEASE: Duration = Duration::from_secs(30);

/// A Kinesis record whose data is `data`.
fn record(data: Vec<u8>) -> LambdaEvent<KinesisEventRecord> {
    let mut record = KinesisEventRecord::default();
    *record.kinesis.data = data;
    record.kinesis.sequence_number = "1".into();
    LambdaEvent::new(record, context_at(SystemTime::now(), LEASE))
}

#[tokio::test]
async fn no_handler_record_answers_a_function_call() {
    let store = InMemoryStore::new();
    let layer = IdempotencyLayer::new(store.clone())
        .with_key(BodyHash)
        .with_config(Config::new().with_key_prefix("p"));
    let handler = layer.handler(|_: KinesisEventRecord| async { Ok::<u64, BoxError>(999) });
    let name = "charge-card";
    // Data spelling what the function's key material used to be: a tag, the name's length,
    // the name, the arguments' canonical JSON.
    let mut data = vec![0xFD];
    data.extend_from_slice(&(name.len() as u64).to_be_bytes());
    data.extend_from_slice(name.as_bytes());
    data.extend_from_slice(Serialized::new(5u64).unwrap().json());
    let stored = handler.oneshot(record(data)).await.unwrap();
    assert_eq!(stored, Processed::Executed(999));

    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let charge = layer.function(name, move |cents: u64| {
        counted.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<u64, BoxError>(cents) }
    });
    let called = charge.call_with_lease(5u64, LEASE).await.unwrap();
    assert_eq!(
        called,
        Processed::Executed(5),
        "the function ran, nothing replayed"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // Its record lives under the prefix, the marker `fn:` and its name.
    let material = BodyHash
        .key_material(&Serialized::new(5u64).unwrap())
        .unwrap();
    let key = IdempotencyKey::derive("p#fn:charge-card", &material);
    let record = store
        .get(&key)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("no {key} in {store:?}"));
    assert_eq!(record.status, Status::Completed);
}

#[tokio::test]
async fn functions_take_a_lease_on_an_optimistic_layer() {
    let store = InMemoryStore::new();
    let config = Config::new().with_key_prefix("p");
    let runs = Arc::new(AtomicUsize::new(0));
    let (started, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    // Two processes: two layers on one store.
    let process = |gate: Option<(Arc<Notify>, Arc<Notify>)>| {
        let runs = Arc::clone(&runs);
        IdempotencyLayer::new(store.clone())
            .with_config(config.clone())
            .with_writes()
            .with_commit(CommitStrategy::Optimistic)
            .function("charge", move |cents: u64| {
                let runs = Arc::clone(&runs);
                let gate = gate.clone();
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    if let Some((started, release)) = gate {
                        started.notify_one();
                        release.notified().await;
                    }
                    Ok::<_, BoxError>(Completion::new(cents))
                }
            })
    };
    let one = process(Some((started.clone(), release.clone())));
    let two = process(None);
    let second = async {
        started.notified().await;
        let locked = two.call_with_lease(7u64, LEASE).await;
        release.notify_one();
        locked
    };
    let (first, locked) = tokio::join!(one.call_with_lease(7u64, LEASE), second);
    assert!(
        matches!(locked, Err(Error::InProgress { .. })),
        "the second process is locked out: {locked:?}"
    );
    assert_eq!(first.unwrap(), Processed::Executed(7));
    assert_eq!(
        two.call_with_lease(7u64, LEASE).await.unwrap(),
        Processed::Replayed(7)
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the function ran once");
}
