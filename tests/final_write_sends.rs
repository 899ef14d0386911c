//! A record's final write (a commit with the handler's writes, or a completion) as the store
//! sees each send, on the embedded store: a send whose answer was lost is sent again
//! unchanged (so DynamoDB's request token is the same and the write applies once; the
//! embedded store, which has no token, refuses it, and the refusing record shows it ours,
//! as DynamoDB's does once the token is forgotten), a result
//! too large for the record is sent again compressed (in optimistic mode at a fresh time, so
//! with a fresh token; under a lease at the same time and expiry), and the data the record
//! keeps and replays is the data of the last send. Checked per delivery: the handler's runs,
//! the outcome, `batchItemFailures`, the stored record (status, owner, expiry, data) and the
//! ledger.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::batch::{BatchProcessor, BatchReport};
use lambda_idempotency::clock::{Clock, ManualClock};
use lambda_idempotency::key::IdempotencyKey;
use lambda_idempotency::record::{OwnerToken, Record, Status};
use lambda_idempotency::store::{
    Acquire, AcquireRequest, Attr, Commit, CommitRequest, CompleteRequest, ExtendRequest, Fenced,
    InMemoryStore, Store, StoreError, TransactionalStore, Write,
};
use lambda_idempotency::Permanent;
use lambda_idempotency::{CommitStrategy, Completion, Config, IdempotencyLayer, Outcome};
use lambda_idempotency_test_support::{invocation, outcomes, reported};

const REMAINING: Duration = Duration::from_secs(30);
/// The largest result data the store accepts in a record.
const DATA_LIMIT: usize = 1000;

/// The embedded store, refusing result data over [`DATA_LIMIT`] as too large, recording
/// every commit and completion as sent, and losing the answer of the sends (counted from 0
/// over both) listed in `lose`: applied, then answered as a store fault. Each send moves the
/// clock on by a millisecond, so a send at a fresh time shows.
#[derive(Clone)]
struct Sends {
    inner: InMemoryStore,
    clock: ManualClock,
    commits: Arc<Mutex<Vec<CommitRequest>>>,
    completions: Arc<Mutex<Vec<CompleteRequest>>>,
    calls: Arc<AtomicUsize>,
    lose: Arc<Mutex<VecDeque<usize>>>,
    /// How many times the handler ran.
    runs: Arc<AtomicUsize>,
}

impl Sends {
    fn new(lose: &[usize]) -> Self {
        let inner = InMemoryStore::new();
        inner.define_table("ledger", &["account"]);
        Self {
            inner,
            clock: ManualClock::starting_now(),
            commits: Arc::default(),
            completions: Arc::default(),
            calls: Arc::default(),
            lose: Arc::new(Mutex::new(lose.iter().copied().collect())),
            runs: Arc::default(),
        }
    }

    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    fn sent(&self) -> Vec<CommitRequest> {
        self.commits.lock().unwrap().clone()
    }

    fn completions(&self) -> Vec<CompleteRequest> {
        self.completions.lock().unwrap().clone()
    }

    /// One send of `data_len` bytes of data, applied by `apply` if it fits.
    async fn send<A, F: Future<Output = Result<A, StoreError>>>(
        &self,
        data_len: usize,
        apply: impl FnOnce() -> F,
    ) -> Result<A, StoreError> {
        let index = self.calls.fetch_add(1, Ordering::SeqCst);
        self.clock.advance(Duration::from_millis(1));
        if data_len > DATA_LIMIT {
            return Err(StoreError::ItemTooLarge {
                size_bytes: data_len,
                limit_bytes: DATA_LIMIT,
            });
        }
        let answer = apply().await;
        let lost = {
            let mut lose = self.lose.lock().unwrap();
            let lost = lose.front() == Some(&index);
            if lost {
                lose.pop_front();
            }
            lost
        };
        match answer {
            Ok(_) if lost => Err(StoreError::Unavailable(
                "injected: the answer was lost".into(),
            )),
            answer => answer,
        }
    }

    async fn record(&self) -> Record {
        let key = match self.sent().first() {
            Some(commit) => commit.key.clone(),
            None => self.completions()[0].key.clone(),
        };
        self.inner.get(&key).await.unwrap().expect("a record")
    }

    /// The record is stored `status`, by `owner`, with the expiry and data the last send
    /// carried, and holds no lease.
    async fn assert_stored(
        &self,
        status: Status,
        owner: &OwnerToken,
        expiration_secs: u64,
        data: &str,
    ) {
        let record = self.record().await;
        assert_eq!(record.status, status);
        assert_eq!(record.owner.as_ref(), Some(owner), "the last sender's");
        assert_eq!(record.lease_expiration_ms, None, "no lease");
        assert_eq!(record.expiration_secs, expiration_secs);
        assert_eq!(record.data.as_deref(), Some(data));
    }

    /// The record is stored `status` as the commit `last` carried it (owner, expiry, data),
    /// and holds no lease.
    async fn assert_stored_as_sent(&self, status: Status, last: &CommitRequest) {
        self.assert_stored(status, &last.owner, last.expiration_secs, &last.data)
            .await;
    }

    /// A redelivery answered `outcome` (replaying `value`, if given) without running the
    /// handler again (it ran once) or sending anything (`sends` in all).
    fn assert_redelivery(
        &self,
        again: &BatchReport<String>,
        outcome: Outcome,
        value: Option<&str>,
        sends: usize,
    ) {
        assert_acknowledged(again, outcome, "redelivery");
        if let Some(value) = value {
            assert_eq!(again.records[0].value.as_deref(), Some(value));
        }
        assert_eq!(self.runs(), 1, "not run again");
        assert_eq!(
            self.calls.load(Ordering::SeqCst),
            sends,
            "nothing sent again"
        );
    }

    fn balance(&self) -> Option<Attr> {
        let key = [("account".to_string(), Attr::s("acct-1"))].into();
        self.inner.item("ledger", &key)?.remove("balance")
    }
}

impl Store for Sends {
    async fn acquire(&self, request: &AcquireRequest) -> Result<Acquire, StoreError> {
        self.inner.acquire(request).await
    }
    async fn complete(&self, request: &CompleteRequest) -> Result<Fenced, StoreError> {
        self.completions.lock().unwrap().push(request.clone());
        let data_len = request.data.len();
        self.send(data_len, || self.inner.complete(request)).await
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
    async fn get_many(&self, keys: &[IdempotencyKey]) -> Result<Vec<Record>, StoreError> {
        self.inner.get_many(keys).await
    }
}

impl TransactionalStore for Sends {
    async fn commit(&self, request: &CommitRequest) -> Result<Commit, StoreError> {
        self.commits.lock().unwrap().push(request.clone());
        let data_len = request.data.len();
        self.send(data_len, || self.inner.commit(request)).await
    }
    async fn commit_fresh(&self, request: &CommitRequest) -> Result<Commit, StoreError> {
        self.commits.lock().unwrap().push(request.clone());
        let data_len = request.data.len();
        self.send(data_len, || self.inner.commit_fresh(request))
            .await
    }
}

/// Everything a send carries (its `Debug` form shows every field), to compare two sends.
fn carried(request: &CommitRequest) -> String {
    format!("{request:?}")
}

/// Delivery `receive_count` of message m-1 in `mode`, through a handler that credits acct-1
/// with 1 and answers `answer` (a permanent failure when `None`), its runs counted.
async fn deliver(
    store: &Sends,
    mode: CommitStrategy,
    answer: Option<&str>,
    receive_count: u32,
) -> BatchReport<String> {
    let (clock, runs) = (&store.clock, &store.runs);
    let layer = IdempotencyLayer::new(store.clone())
        .with_clock(clock.clone())
        .with_config(Config::new().with_key_prefix("sends"));
    let (runs, answer) = (runs.clone(), answer.map(str::to_string));
    let processor = BatchProcessor::new(layer.with_writes().with_commit(mode).handler(
        move |_: SqsMessage| {
            runs.fetch_add(1, Ordering::SeqCst);
            let answer = answer.clone();
            async move {
                let credit =
                    Write::update("ledger", [("account", Attr::s("acct-1"))], "ADD #b :one")
                        .name("#b", "balance")
                        .value(":one", Attr::n(1));
                match answer {
                    Some(value) => Ok(Completion::new(value).with_write(credit)),
                    None => Err(Permanent::new("card declined")),
                }
            }
        },
    ));
    processor
        .process(invocation(
            one_message(receive_count),
            clock.now(),
            REMAINING,
        ))
        .await
}

/// Delivery `receive_count` of message m-1 under a lease, through a handler without writes
/// that answers `answer`, its runs counted.
async fn deliver_result_only(
    store: &Sends,
    answer: &str,
    receive_count: u32,
) -> BatchReport<String> {
    let (clock, runs) = (&store.clock, &store.runs);
    let layer = IdempotencyLayer::new(store.clone())
        .with_clock(clock.clone())
        .with_config(Config::new().with_key_prefix("sends"));
    let (runs, answer) = (runs.clone(), answer.to_string());
    let processor = BatchProcessor::new(layer.handler(move |_: SqsMessage| {
        runs.fetch_add(1, Ordering::SeqCst);
        let answer = answer.clone();
        async move { Ok::<_, std::io::Error>(answer) }
    }));
    let event = invocation(one_message(receive_count), clock.now(), REMAINING);
    processor.process(event).await
}

/// Message m-1, received `receive_count` times (a count over 1 has the pre-check look it up
/// before anything runs).
fn one_message(receive_count: u32) -> SqsEvent {
    let mut message = SqsMessage::default();
    message.message_id = Some("m-1".into());
    message.body = Some("{}".into());
    let count = receive_count.to_string();
    message
        .attributes
        .insert("ApproximateReceiveCount".into(), count);
    let mut event = SqsEvent::default();
    event.records.push(message);
    event
}

fn assert_acknowledged(report: &BatchReport<String>, outcome: Outcome, delivery: &str) {
    assert_eq!(outcomes(report), [outcome], "{delivery}");
    assert!(reported(report).is_empty(), "{delivery}: nothing reported");
}

#[tokio::test(start_paused = true)]
async fn an_optimistic_commit_is_resent_unchanged_and_refitted_at_a_fresh_time() {
    // Send 0: the JSON, too large. Send 1: compressed, applied, its answer lost. Send 2: the
    // same request again, refused by the record it wrote: ours.
    let store = Sends::new(&[1]);
    let large = "a".repeat(5_000);
    let first = deliver(&store, CommitStrategy::Optimistic, Some(&large), 1).await;
    assert_acknowledged(&first, Outcome::Executed, "first delivery");
    assert_eq!(store.runs(), 1);
    let sent = store.sent();
    assert_eq!(sent.len(), 3, "{sent:#?}");
    assert!(sent[0].data.len() > DATA_LIMIT && sent[1].data.len() <= DATA_LIMIT);
    assert!(
        sent[1].now > sent[0].now,
        "the compressed form is sent at a fresh time"
    );
    assert!(sent
        .iter()
        .all(|s| s.owner == sent[0].owner && s.status == Status::Completed));
    assert_eq!(carried(&sent[2]), carried(&sent[1]), "resent unchanged");
    store
        .assert_stored_as_sent(Status::Completed, &sent[2])
        .await;
    assert_eq!(store.balance(), Some(Attr::n(1)), "credited once");
    // A redelivery replays the whole result from the compressed record, found by the
    // pre-check.
    let again = deliver(&store, CommitStrategy::Optimistic, Some("other"), 2).await;
    store.assert_redelivery(&again, Outcome::Replayed, Some(&large), 3);
}

#[tokio::test(start_paused = true)]
async fn a_commit_under_a_lease_is_refitted_at_the_same_time_and_expiry() {
    let store = Sends::new(&[]);
    let large = "a".repeat(5_000);
    let first = deliver(&store, CommitStrategy::Lease, Some(&large), 1).await;
    assert_acknowledged(&first, Outcome::Executed, "first delivery");
    assert_eq!(store.runs(), 1);
    let sent = store.sent();
    assert_eq!(sent.len(), 2, "{sent:#?}");
    assert!(sent[0].data.len() > DATA_LIMIT && sent[1].data.len() <= DATA_LIMIT);
    assert_eq!(sent[1].now, sent[0].now);
    assert_eq!(sent[1].expiration_secs, sent[0].expiration_secs);
    assert_eq!(sent[1].owner, sent[0].owner);
    store
        .assert_stored_as_sent(Status::Completed, &sent[1])
        .await;
    assert_eq!(store.balance(), Some(Attr::n(1)), "credited once");
    let again = deliver(&store, CommitStrategy::Lease, Some("other"), 2).await;
    store.assert_redelivery(&again, Outcome::Replayed, Some(&large), 2);
}

#[tokio::test(start_paused = true)]
async fn a_lease_commit_whose_answer_was_lost_is_recognised_by_the_record_it_wrote() {
    // Send 0: applied, its answer lost. Send 1: the same again, refused by its owner fence
    // (the record is no longer in progress), and the refusing record shows the commit ours.
    let store = Sends::new(&[0]);
    let first = deliver(&store, CommitStrategy::Lease, Some("ok"), 1).await;
    assert_acknowledged(&first, Outcome::Executed, "first delivery");
    assert_eq!(first.records[0].value.as_deref(), Some("ok"));
    assert_eq!(store.runs(), 1);
    let sent = store.sent();
    assert_eq!(sent.len(), 2, "{sent:#?}");
    assert_eq!(carried(&sent[1]), carried(&sent[0]), "resent unchanged");
    store
        .assert_stored_as_sent(Status::Completed, &sent[1])
        .await;
    assert_eq!(store.balance(), Some(Attr::n(1)), "credited once");
    let again = deliver(&store, CommitStrategy::Lease, Some("other"), 2).await;
    store.assert_redelivery(&again, Outcome::Replayed, Some("ok"), 2);
}

#[tokio::test(start_paused = true)]
async fn an_optimistic_permanent_failure_is_resent_unchanged_and_replayed() {
    // Send 0: the failure, applied, its answer lost. Send 1: the same again, refused: ours.
    let store = Sends::new(&[0]);
    let first = deliver(&store, CommitStrategy::Optimistic, None, 1).await;
    assert_acknowledged(&first, Outcome::FailedPermanently, "first delivery");
    assert_eq!(store.runs(), 1);
    let sent = store.sent();
    assert_eq!(sent.len(), 2, "{sent:#?}");
    assert_eq!(sent[0].status, Status::Failed);
    assert!(sent[0].writes.is_empty(), "a failure commits no writes");
    assert_eq!(carried(&sent[1]), carried(&sent[0]), "resent unchanged");
    store.assert_stored_as_sent(Status::Failed, &sent[1]).await;
    assert_eq!(store.balance(), None, "nothing credited");
    let again = deliver(&store, CommitStrategy::Optimistic, Some("other"), 2).await;
    store.assert_redelivery(&again, Outcome::FailedPermanently, None, 2);
}

#[tokio::test(start_paused = true)]
async fn a_completion_under_a_lease_is_resent_unchanged_and_refitted_at_the_same_time() {
    // Send 0: the JSON, too large. Send 1: compressed, applied, its answer lost. Send 2: the
    // same completion again, which the store recognises as ours.
    let store = Sends::new(&[1]);
    let large = "a".repeat(5_000);
    let first = deliver_result_only(&store, &large, 1).await;
    assert_acknowledged(&first, Outcome::Executed, "first delivery");
    assert_eq!(store.runs(), 1);
    let sent = store.completions();
    assert_eq!(sent.len(), 3, "{sent:#?}");
    assert!(sent[0].data.len() > DATA_LIMIT && sent[1].data.len() <= DATA_LIMIT);
    assert_eq!(
        (sent[1].now, sent[1].expiration_secs),
        (sent[0].now, sent[0].expiration_secs)
    );
    assert_eq!(
        format!("{:?}", sent[2]),
        format!("{:?}", sent[1]),
        "resent unchanged"
    );
    assert!(sent
        .iter()
        .all(|s| s.owner == sent[0].owner && s.status == Status::Completed));
    let last = &sent[2];
    let (owner, expiration_secs, data) = (&last.owner, last.expiration_secs, &last.data);
    store
        .assert_stored(Status::Completed, owner, expiration_secs, data)
        .await;
    let again = deliver_result_only(&store, "other", 2).await;
    store.assert_redelivery(&again, Outcome::Replayed, Some(&large), 3);
}
