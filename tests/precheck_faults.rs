//! The pre-check when the store misbehaves: its lookup may find nothing, but never costs a
//! record more than its conditional write.

use lambda_idempotency_test_support as support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::clock::{Clock, ManualClock};
use lambda_idempotency::key::IdempotencyKey;
use lambda_idempotency::record::{OwnerToken, Record};
use lambda_idempotency::store::{
    Acquire, AcquireRequest, CompleteRequest, ExtendRequest, Fenced, InMemoryStore, Store,
    StoreError,
};
use lambda_idempotency::{Config, IdempotencyLayer, Outcome};
use support::{invocation, outcomes, reported};

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

/// The embedded store, except that its `get_many` panics (a bug in a user's store).
#[derive(Clone)]
struct PanickingLookup {
    inner: InMemoryStore,
    lookups: Arc<AtomicUsize>,
}

impl Store for PanickingLookup {
    async fn acquire(&self, request: &AcquireRequest) -> Result<Acquire, StoreError> {
        self.inner.acquire(request).await
    }
    async fn complete(&self, request: &CompleteRequest) -> Result<Fenced, StoreError> {
        self.inner.complete(request).await
    }
    async fn extend(&self, request: &ExtendRequest) -> Result<Fenced, StoreError> {
        self.inner.extend(request).await
    }
    async fn release(
        &self,
        key: &IdempotencyKey,
        owner: &OwnerToken,
    ) -> Result<Fenced, StoreError> {
        self.inner.release(key, owner).await
    }
    async fn get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        self.inner.get(key).await
    }
    async fn get_many(&self, _keys: &[IdempotencyKey]) -> Result<Vec<Record>, StoreError> {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        panic!("a bug in a user's get_many");
    }
}

/// A lookup that panics finds nothing, once for the batch: the redelivered duplicates go on
/// to their conditional writes and replay, and the handler does not run again. (Found in
/// review: the panic reached every offered record in turn, each retrying the lookup, and
/// failed them all, on every redelivery until the dead-letter queue.)
#[tokio::test]
async fn a_panicking_lookup_finds_nothing_and_fails_no_record() {
    let store = PanickingLookup {
        inner: InMemoryStore::new(),
        lookups: Arc::default(),
    };
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
    assert_eq!(store.lookups.load(Ordering::SeqCst), 0, "first deliveries");
    let again = deliver(batch(3, 2)).await;
    assert_eq!(outcomes(&again), [Outcome::Replayed; 3]);
    assert!(reported(&again).is_empty());
    assert_eq!(
        store.lookups.load(Ordering::SeqCst),
        1,
        "one lookup a batch"
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        3,
        "the handler did not run again"
    );
}
