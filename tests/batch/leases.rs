//! Contended leases: lost to a new holder, locked elsewhere, changing underneath, heartbeats.

use lambda_idempotency_test_support as support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::sqs::SqsMessage;
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::clock::{epoch_ms, epoch_secs, Clock};
use lambda_idempotency::key::IdempotencyKey;
use lambda_idempotency::record::{OwnerToken, Status};
use lambda_idempotency::store::{AcquireRequest, InMemoryStore, Store};
use lambda_idempotency::{Config, Error, IdempotencyLayer, Outcome};
use order_consumer::Order;
use support::{invocation, load_event, outcomes, reported};

use crate::{ids, Setup, REMAINING};

#[tokio::test]
async fn a_lost_lease_is_reported_and_does_not_overwrite_the_new_holder() {
    let mut setup = Setup::new();
    setup.config = setup.config.clone().with_max_lease(Duration::from_secs(1));
    let (store, clock) = (setup.store.clone(), setup.clock.clone());
    let intruder = OwnerToken::generate();
    let intruder_in_hook = intruder.clone();
    setup.hook = Arc::new(move |order: &Order| {
        // The handler outlives its lease and another invocation takes the key over.
        clock.advance(Duration::from_secs(2));
        let now = clock.now();
        let request = AcquireRequest {
            key: IdempotencyKey::derive("orders", order.event_id.as_bytes()),
            owner: intruder_in_hook.clone(),
            now,
            lease_expiration_ms: epoch_ms(now + Duration::from_secs(30)),
            expiration_secs: epoch_secs(now + Duration::from_secs(3600)),
            validation: None,
        };
        let taken = store.acquire(&request);
        assert_eq!(
            futures_now(taken).unwrap(),
            lambda_idempotency::store::Acquire::Acquired
        );
    });
    let mut event = load_event("batch.json");
    event.records.truncate(1);
    let report = setup.run(event).await;
    assert_eq!(outcomes(&report), [Outcome::LeaseLost]);
    assert_eq!(reported(&report).len(), 1);
    let record = &setup.store.records()[0];
    assert_eq!(record.status, Status::InProgress);
    assert_eq!(record.owner.as_ref(), Some(&intruder));
}

fn futures_now<F: std::future::Future>(future: F) -> F::Output {
    // InMemoryStore futures are ready at once.
    let mut future = std::pin::pin!(future);
    let waker = std::task::Waker::noop();
    match future
        .as_mut()
        .poll(&mut std::task::Context::from_waker(waker))
    {
        std::task::Poll::Ready(output) => output,
        std::task::Poll::Pending => panic!("InMemoryStore future was not ready"),
    }
}

#[tokio::test]
async fn a_record_locked_elsewhere_is_reported_for_retry() {
    let setup = Setup::new();
    let now = setup.clock.now();
    setup
        .store
        .acquire(&AcquireRequest {
            key: IdempotencyKey::derive("orders", b"evt-1001"),
            owner: OwnerToken::generate(),
            now,
            lease_expiration_ms: epoch_ms(now + Duration::from_secs(60)),
            expiration_secs: epoch_secs(now + Duration::from_secs(3600)),
            validation: None,
        })
        .await
        .unwrap();
    let event = load_event("batch.json");
    let report = setup.run(event.clone()).await;
    assert_eq!(
        outcomes(&report),
        [Outcome::Locked, Outcome::Executed, Outcome::Executed]
    );
    assert_eq!(reported(&report), ids(&event, &[0]));
    assert_eq!(setup.effects.count("evt-1001"), 0);
}

/// A store whose first `contended` acquires report that the record changed underneath.
#[derive(Clone)]
struct ChangingStore {
    inner: InMemoryStore,
    contended: Arc<Mutex<usize>>,
}

impl Store for ChangingStore {
    async fn acquire(
        &self,
        request: &AcquireRequest,
    ) -> Result<lambda_idempotency::store::Acquire, lambda_idempotency::store::StoreError> {
        {
            let mut left = self.contended.lock().unwrap();
            if *left > 0 {
                *left -= 1;
                return Ok(lambda_idempotency::store::Acquire::Contended);
            }
        }
        self.inner.acquire(request).await
    }
    async fn complete(
        &self,
        request: &lambda_idempotency::store::CompleteRequest,
    ) -> Result<lambda_idempotency::store::Fenced, lambda_idempotency::store::StoreError> {
        self.inner.complete(request).await
    }
    async fn extend(
        &self,
        request: &lambda_idempotency::store::ExtendRequest,
    ) -> Result<lambda_idempotency::store::Fenced, lambda_idempotency::store::StoreError> {
        self.inner.extend(request).await
    }
    async fn release(
        &self,
        key: &IdempotencyKey,
        owner: &OwnerToken,
    ) -> Result<lambda_idempotency::store::Fenced, lambda_idempotency::store::StoreError> {
        self.inner.release(key, owner).await
    }
    async fn get(
        &self,
        key: &IdempotencyKey,
    ) -> Result<Option<lambda_idempotency::record::Record>, lambda_idempotency::store::StoreError>
    {
        self.inner.get(key).await
    }
}

#[tokio::test]
async fn a_record_changing_underneath_is_retried_a_bounded_number_of_times() {
    // Default: 3 attempts. Two contended answers are absorbed; three are not.
    for (contended, expected) in [(2, Outcome::Executed), (3, Outcome::Locked)] {
        let store = ChangingStore {
            inner: InMemoryStore::new(),
            contended: Arc::new(Mutex::new(contended)),
        };
        let layer = IdempotencyLayer::new(store.clone());
        let processor = BatchProcessor::new(
            layer.handler(|_m: SqsMessage| async { Ok::<_, std::io::Error>(1) }),
        );
        let mut event = load_event("batch.json");
        event.records.truncate(1);
        let report = processor
            .process(invocation(event, std::time::SystemTime::now(), REMAINING))
            .await;
        assert_eq!(
            outcomes(&report),
            [expected],
            "{contended} contended answers"
        );
        if expected == Outcome::Locked {
            assert!(matches!(
                report.records[0].error,
                Some(Error::Contended { .. })
            ));
            assert!(
                store.inner.records().is_empty(),
                "handler never ran unlocked"
            );
        }
    }
}

#[tokio::test]
async fn a_heartbeat_keeps_a_long_handler_protected_beyond_one_lease() {
    // Without a heartbeat a 300 ms lease elapses during a 1 s handler and a second container
    // takes the record over; with it, the lease is extended and the second one is locked out.
    for heartbeat in [false, true] {
        let store = InMemoryStore::new();
        let runs = Arc::new(Mutex::new(0));
        let config = if heartbeat {
            Config::new().with_heartbeat(Duration::from_millis(300), Duration::from_millis(50))
        } else {
            Config::new().with_max_lease(Duration::from_millis(300))
        };
        let container = |config: Config| {
            let runs = runs.clone();
            let layer = IdempotencyLayer::new(store.clone()).with_config(config);
            BatchProcessor::new(layer.handler(move |_m: SqsMessage| {
                let runs = runs.clone();
                async move {
                    *runs.lock().unwrap() += 1;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    Ok::<_, std::io::Error>(())
                }
            }))
        };
        let (slow, other) = (container(config.clone()), container(config));
        let mut event = load_event("batch.json");
        event.records.truncate(1);
        let now = std::time::SystemTime::now;
        let first = slow.process(invocation(event.clone(), now(), REMAINING));
        let second = async {
            tokio::time::sleep(Duration::from_millis(600)).await;
            other
                .process(invocation(event.clone(), now(), REMAINING))
                .await
        };
        let (first, second) = tokio::join!(first, second);
        if heartbeat {
            assert_eq!(outcomes(&first), [Outcome::Executed]);
            assert_eq!(outcomes(&second), [Outcome::Locked]);
            assert_eq!(*runs.lock().unwrap(), 1);
        } else {
            // The lease elapsed: the second container took over, and the first one's
            // completion was refused.
            assert_eq!(outcomes(&first), [Outcome::LeaseLost]);
            assert_eq!(outcomes(&second), [Outcome::Executed]);
            assert_eq!(*runs.lock().unwrap(), 2);
        }
    }
}
