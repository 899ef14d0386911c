//! The pre-check when the store misbehaves: its lookup may find nothing, but never costs a
//! record more than its conditional write.

use lambda_idempotency_test_support as support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::clock::{Clock, ManualClock};
use lambda_idempotency::key::JsonPointer;
use lambda_idempotency::store::InMemoryStore;
use lambda_idempotency::{Config, IdempotencyLayer, Outcome};
use support::faulty_store::{FaultyStore, Inject};
use support::{error_types, invocation, outcomes, reported};

const REMAINING: Duration = Duration::from_secs(30);

/// `n` messages `m-0`.., received `receive_count` times so far.
fn batch(n: usize, receive_count: u32) -> SqsEvent {
    let mut event = SqsEvent::default();
    for i in 0..n {
        let mut m = SqsMessage::default();
        m.message_id = Some(format!("m-{i}"));
        m.body = Some(format!(r#"{{"order":{i}}}"#));
        m.attributes
            .insert("ApproximateReceiveCount".into(), receive_count.to_string());
        event.records.push(m);
    }
    event
}

/// A lookup that panics finds nothing, once for the batch: the redelivered duplicates go on
/// to their conditional writes and replay, and the handler does not run again. (Found in
/// review: the panic reached every offered record in turn, each retrying the lookup, and
/// failed them all, on every redelivery until the dead-letter queue.)
#[tokio::test]
async fn a_panicking_lookup_finds_nothing_and_fails_no_record() {
    let store = FaultyStore::new(InMemoryStore::new());
    let clock = ManualClock::starting_now();
    let runs = Arc::new(AtomicUsize::new(0));
    let deliver = |event: SqsEvent| {
        let layer = IdempotencyLayer::new(store.clone())
            .with_clock(clock.clone())
            .with_config(Config::new().with_key_prefix("t"));
        let runs = runs.clone();
        let processor = BatchProcessor::new(layer.handler(move |_m: SqsMessage| {
            runs.fetch_add(1, Ordering::SeqCst);
            std::future::ready(Ok::<_, std::io::Error>(7u32))
        }))
        .with_clock(clock.clone());
        let invocation = invocation(event, clock.now(), REMAINING);
        async move { processor.process(invocation).await }
    };
    let first = deliver(batch(3, 1)).await;
    assert_eq!(outcomes(&first), [Outcome::Executed; 3]);
    assert_eq!(
        store.calls.get_many.load(Ordering::SeqCst),
        0,
        "first deliveries"
    );
    // Every lookup the batch would make panics.
    for _ in 0..3 {
        store.inject(Inject::GetManyPanics);
    }
    let again = deliver(batch(3, 2)).await;
    assert_eq!(outcomes(&again), [Outcome::Replayed; 3]);
    assert!(reported(&again).is_empty());
    assert_eq!(
        store.calls.get_many.load(Ordering::SeqCst),
        1,
        "one lookup a batch"
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        3,
        "the handler did not run again"
    );
}

/// Two redelivered records of one batch with the same key wait for a slow lookup; the first
/// to go on fails its handler at once. The other finds the failure in the batch's memo and
/// fails with it (`SameKeyFailed`): a batch runs a key once. (Found in review: it found the
/// flight ended, led the key anew and ran the handler a second time.)
#[tokio::test]
async fn a_key_that_fails_while_its_twin_waits_for_the_lookup_runs_once() {
    let (store, runs) = slow_lookup();
    let counted = runs.clone();
    let layer = IdempotencyLayer::new(store.clone())
        .with_key(JsonPointer::new("/key"))
        .with_config(Config::new().with_key_prefix("t"));
    let processor = BatchProcessor::new(layer.handler(move |_m: SqsMessage| {
        counted.fetch_add(1, Ordering::SeqCst);
        // Fails at once (no await): done within the poll that ends the lookup.
        std::future::ready(Err::<u8, _>(std::io::Error::other("transient")))
    }));
    twins_fail_once("plain handler", processor, &store, &runs).await;
}

/// The same with a handler with writes, under both commit strategies.
#[tokio::test]
async fn a_key_with_writes_that_fails_while_its_twin_waits_for_the_lookup_runs_once() {
    use lambda_idempotency::{CommitStrategy, Completion};
    for mode in [CommitStrategy::Lease, CommitStrategy::Optimistic] {
        let (store, runs) = slow_lookup();
        let counted = runs.clone();
        let layer = IdempotencyLayer::new(store.clone())
            .with_key(JsonPointer::new("/key"))
            .with_config(Config::new().with_key_prefix("t"))
            .with_writes()
            .with_commit(mode);
        let processor = BatchProcessor::new(layer.handler(move |_m: SqsMessage| {
            counted.fetch_add(1, Ordering::SeqCst);
            std::future::ready(Err::<Completion<u8>, _>(std::io::Error::other("transient")))
        }));
        twins_fail_once(&format!("{mode:?}"), processor, &store, &runs).await;
    }
}

/// A store whose lookups take 100 ms, and a run counter for the handler.
fn slow_lookup() -> (FaultyStore<InMemoryStore>, Arc<AtomicUsize>) {
    let store = FaultyStore::new(InMemoryStore::new());
    store.inject(Inject::GetManySlow(Duration::from_millis(100)));
    (store, Arc::new(AtomicUsize::new(0)))
}

/// Two redelivered records with the key "k" through `processor`, whose handler fails at once
/// and counts its runs in `runs`: the key runs once, both records fail, nothing is stored.
async fn twins_fail_once<S>(
    label: &str,
    processor: BatchProcessor<S>,
    store: &FaultyStore<InMemoryStore>,
    runs: &AtomicUsize,
) where
    S: tower::Service<
            lambda_idempotency::batch::BatchRecord<SqsMessage>,
            Response = lambda_idempotency::Processed<u8>,
            Error = lambda_idempotency::Error,
        > + Clone,
{
    let mut event = batch(2, 2);
    for m in &mut event.records {
        m.body = Some(r#"{"key":"k"}"#.into());
    }
    let report = processor
        .process(invocation(event, SystemTime::now(), REMAINING))
        .await;
    assert_eq!(outcomes(&report), [Outcome::Failed; 2], "{label}");
    assert_eq!(reported(&report), ["m-0", "m-1"], "{label}");
    let errors = error_types(&report);
    assert!(
        errors.contains(&Some("Idempotency.SameKeyFailed")),
        "{label}: {errors:?}"
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "{label}: one run a key a batch"
    );
    assert!(store.inner.records().is_empty(), "{label}: nothing stored");
}
