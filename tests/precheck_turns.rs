//! The batch pre-check answers a record "in progress" only from a lookup read after the
//! record's turn began: a record that waited for a ready service (a concurrency limit in or
//! around it), or whose turn began while the lookup was being read, goes on to its
//! conditional write, and is replayed when the holder completed it meanwhile. (Both found in
//! review of the turn rule; each failed on 69a57bb with the record `locked`.)

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::batch::{BatchProcessor, Precheck, Scheduling};
use lambda_idempotency::clock::{epoch_ms, epoch_secs, Clock, ManualClock};
use lambda_idempotency::key::IdempotencyKey;
use lambda_idempotency::record::{OwnerToken, Record, Status};
use lambda_idempotency::store::{
    Acquire, AcquireRequest, CompleteRequest, ExtendRequest, Fenced, InMemoryStore, Store,
    StoreError,
};
use lambda_idempotency::{Config, IdempotencyLayer, Outcome};
use lambda_idempotency_test_support::faulty_store::FaultyStore;
use lambda_idempotency_test_support::{invocation, outcomes, reported};
use lambda_runtime::LambdaEvent;
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

const ELSEWHERE: &str = "another-invocation";

fn batch(ids: &[&str], receive_count: u32) -> SqsEvent {
    let mut event = SqsEvent::default();
    for id in ids {
        let mut message = SqsMessage::default();
        message.message_id = Some((*id).into());
        message.body = Some("{}".into());
        message
            .attributes
            .insert("ApproximateReceiveCount".into(), receive_count.to_string());
        event.records.push(message);
    }
    event
}

type Acquiring = Pin<Box<dyn Future<Output = OwnedSemaphorePermit> + Send>>;

/// A handler service that is ready only while it holds a permit of `gate` (what tower's
/// `ConcurrencyLimit` does): at most `gate`'s permits of handlers at once.
struct Gated<F> {
    gate: Arc<Semaphore>,
    f: F,
    acquiring: Option<Mutex<Acquiring>>,
    permit: Option<OwnedSemaphorePermit>,
}

impl<F: Clone> Clone for Gated<F> {
    fn clone(&self) -> Self {
        Self {
            gate: self.gate.clone(),
            f: self.f.clone(),
            acquiring: None,
            permit: None,
        }
    }
}

impl<F, Fut> tower::Service<LambdaEvent<SqsMessage>> for Gated<F>
where
    F: Fn(SqsMessage) -> Fut + Clone,
    Fut: Future<Output = Result<u32, std::io::Error>> + Send + 'static,
{
    type Response = u32;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<u32, std::io::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if self.permit.is_some() {
            return Poll::Ready(Ok(()));
        }
        let gate = self.gate.clone();
        let acquiring = self.acquiring.get_or_insert_with(|| {
            Mutex::new(Box::pin(async move { gate.acquire_owned().await.unwrap() }))
        });
        let polled = acquiring.get_mut().unwrap().as_mut().poll(cx);
        match polled {
            Poll::Ready(permit) => {
                self.acquiring = None;
                self.permit = Some(permit);
                Poll::Ready(Ok(()))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn call(&mut self, event: LambdaEvent<SqsMessage>) -> Self::Future {
        let permit = self.permit.take().expect("called when ready");
        let ran = (self.f)(event.payload);
        Box::pin(async move {
            let answer = ran.await;
            drop(permit);
            answer
        })
    }
}

/// m-1, m-2, m-3 redelivered in a standard queue's batch (concurrent, 10 slots: every record
/// starts its turn at once); m-2 and m-3 held by another invocation; the handler runs one at a
/// time (a concurrency limit of 1 on it). While m-1's handler runs (2 s) the other invocation
/// completes m-2 with 9. m-2 reaches its admission only after that: it must not be answered
/// "in progress" from the lookup read before.
#[tokio::test]
async fn a_record_waiting_for_a_ready_service_is_not_answered_from_an_older_lookup() {
    let store = FaultyStore::new(InMemoryStore::new());
    let clock = ManualClock::starting_now();
    let key = |id: &str| IdempotencyKey::derive("precheck", id.as_bytes());
    let now = clock.now();
    for id in ["m-2", "m-3"] {
        let hold = AcquireRequest {
            key: key(id),
            owner: OwnerToken::new(ELSEWHERE),
            now,
            lease_expiration_ms: epoch_ms(now + Duration::from_secs(60)),
            expiration_secs: epoch_secs(now + Duration::from_secs(3600)),
            validation: None,
        };
        assert_eq!(store.acquire(&hold).await.unwrap(), Acquire::Acquired);
    }
    let runs: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
    let handler = {
        let (store, clock, runs) = (store.clone(), clock.clone(), runs.clone());
        move |message: SqsMessage| {
            let (store, clock, runs) = (store.clone(), clock.clone(), runs.clone());
            async move {
                let id = message.message_id.unwrap();
                *runs.lock().unwrap().entry(id.clone()).or_default() += 1;
                if id == "m-1" {
                    // Real time too, so the other records' futures are polled meanwhile.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    clock.advance(Duration::from_secs(2));
                    let now = clock.now();
                    let complete = CompleteRequest {
                        key: key("m-2"),
                        owner: OwnerToken::new(ELSEWHERE),
                        status: Status::Completed,
                        data: "9".into(),
                        expiration_secs: epoch_secs(now + Duration::from_secs(3600)),
                        now,
                    };
                    let completed = store.inner.complete(&complete).await;
                    assert_eq!(completed.unwrap(), Fenced::Applied);
                }
                Ok::<_, std::io::Error>(7u32)
            }
        }
    };
    let gated = Gated {
        gate: Arc::new(Semaphore::new(1)),
        f: handler,
        acquiring: None,
        permit: None,
    };
    let layer = IdempotencyLayer::new(store.clone())
        .with_clock(clock.clone())
        .with_config(Config::new().with_key_prefix("precheck"));
    let processor = BatchProcessor::new(tower::Layer::layer(&layer, gated))
        .with_precheck(Precheck::Redelivered)
        .with_scheduling(Scheduling::Concurrent { limit: 10 })
        .with_clock(clock.clone());
    let event = batch(&["m-1", "m-2", "m-3"], 2);
    let report = processor
        .process(invocation(event, clock.now(), Duration::from_secs(30)))
        .await;
    let runs = runs.lock().unwrap().clone();
    let m2 = store
        .inner
        .records()
        .into_iter()
        .find(|r| r.key == key("m-2"))
        .unwrap();
    println!(
        "outcomes {:?} reported {:?} runs {runs:?} m-2 stored {:?} {:?}",
        outcomes(&report),
        reported(&report),
        m2.status,
        m2.data
    );
    assert_eq!(m2.status, Status::Completed);
    assert_eq!(
        outcomes(&report),
        [Outcome::Executed, Outcome::Replayed, Outcome::Locked],
        "m-2 was completed before it reached admission"
    );
    assert_eq!(reported(&report), ["m-3"]);
}

/// A store whose `get_many` reads at once and answers 300 ms later (a slow network, DynamoDB
/// retrying unprocessed keys after 50 and 100 ms, a throttled read backing off).
#[derive(Clone)]
struct SlowAnswer(InMemoryStore);

impl Store for SlowAnswer {
    async fn acquire(&self, r: &AcquireRequest) -> Result<Acquire, StoreError> {
        self.0.acquire(r).await
    }
    async fn complete(&self, r: &CompleteRequest) -> Result<Fenced, StoreError> {
        self.0.complete(r).await
    }
    async fn extend(&self, r: &ExtendRequest) -> Result<Fenced, StoreError> {
        self.0.extend(r).await
    }
    async fn release(&self, k: &IdempotencyKey, o: &OwnerToken) -> Result<Fenced, StoreError> {
        self.0.release(k, o).await
    }
    async fn get(&self, k: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        self.0.get(k).await
    }
    async fn get_many(&self, keys: &[IdempotencyKey]) -> Result<Vec<Record>, StoreError> {
        let read = self.0.get_many(keys).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        read
    }
}

fn message(id: &str, receive_count: u32) -> SqsMessage {
    let mut message = SqsMessage::default();
    message.message_id = Some(id.into());
    message.body = Some("{}".into());
    message
        .attributes
        .insert("ApproximateReceiveCount".into(), receive_count.to_string());
    message
}

/// Two slots: a (redelivered) and x (a first delivery, not looked up, done in 50 ms) start;
/// a's lookup reads y held elsewhere, then takes 300 ms to answer. x's end starts y's turn
/// (at ~50 ms); elsewhere completes y at ~150 ms; the read answers at ~300 ms. y's turn began
/// before y was completed, the read's snapshot before y's turn.
#[tokio::test]
async fn a_turn_begun_during_the_read_is_not_answered_from_its_older_snapshot() {
    let inner = InMemoryStore::new();
    let key = |id: &str| IdempotencyKey::derive("precheck", id.as_bytes());
    let now = SystemTime::now();
    let hold = AcquireRequest {
        key: key("y"),
        owner: OwnerToken::new(ELSEWHERE),
        now,
        lease_expiration_ms: epoch_ms(now + Duration::from_secs(60)),
        expiration_secs: epoch_secs(now + Duration::from_secs(3600)),
        validation: None,
    };
    assert_eq!(inner.acquire(&hold).await.unwrap(), Acquire::Acquired);
    let elsewhere = {
        let inner = inner.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(150)).await;
            let now = SystemTime::now();
            let complete = CompleteRequest {
                key: IdempotencyKey::derive("precheck", b"y"),
                owner: OwnerToken::new(ELSEWHERE),
                status: Status::Completed,
                data: "9".into(),
                expiration_secs: epoch_secs(now + Duration::from_secs(3600)),
                now,
            };
            assert_eq!(inner.complete(&complete).await.unwrap(), Fenced::Applied);
        })
    };
    let layer = IdempotencyLayer::new(SlowAnswer(inner.clone()))
        .with_config(Config::new().with_key_prefix("precheck"));
    let handler = layer.handler(|m: SqsMessage| async move {
        if m.message_id.as_deref() == Some("x") {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok::<_, std::io::Error>(7u32)
    });
    let mut event = SqsEvent::default();
    event.records = vec![message("a", 2), message("x", 1), message("y", 2)];
    let report = BatchProcessor::new(handler)
        .with_precheck(Precheck::Redelivered)
        .with_scheduling(Scheduling::Concurrent { limit: 2 })
        .process(invocation(
            event,
            SystemTime::now(),
            Duration::from_secs(30),
        ))
        .await;
    elsewhere.await.unwrap();
    let y = inner.get(&key("y")).await.unwrap().unwrap();
    println!(
        "outcomes {:?}; y stored {:?} {:?}",
        outcomes(&report),
        y.status,
        y.data
    );
    assert_eq!(
        outcomes(&report),
        [Outcome::Executed, Outcome::Executed, Outcome::Replayed],
        "y was completed after its turn began"
    );
}
