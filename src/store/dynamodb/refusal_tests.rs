//! Requests the store refuses before sending them: a store whose attribute names are
//! unusable refuses every request for a record, whatever else is wrong with it, and a guarded
//! write of a kind it cannot send is refused too. No request goes out, so none is counted as
//! sent either.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_sdk_dynamodb::config::{BehaviorVersion, Config, Region};
use aws_sdk_dynamodb::Client;
use metrics::{
    Counter, CounterFn, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};

use super::DynamoDbStore;
use crate::clock::{epoch_ms, epoch_secs};
use crate::key::IdempotencyKey;
use crate::metrics::DYNAMODB_CALLS;
use crate::record::{OwnerToken, Status};
use crate::store::{
    AcquireRequest, Attr, AttributeNames, CommitRequest, CompleteRequest, ExtendRequest,
    GuardedWrite, Store, StoreError, TransactionalStore, Write,
};

/// Counts `DynamoDbCalls`, and nothing else.
#[derive(Default)]
struct Calls(Arc<AtomicU64>);

struct Count(Arc<AtomicU64>);

impl CounterFn for Count {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::SeqCst);
    }

    fn absolute(&self, value: u64) {
        self.0.store(value, Ordering::SeqCst);
    }
}

impl Recorder for Calls {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        if key.name() == DYNAMODB_CALLS {
            Counter::from_arc(Arc::new(Count(self.0.clone())))
        } else {
            Counter::noop()
        }
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

/// Runs `requests` on a runtime of its own and counts the `DynamoDbCalls` they make.
fn counted<T>(requests: impl Future<Output = T>) -> (T, u64) {
    let calls = Calls::default();
    let answer = metrics::with_local_recorder(&calls, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(requests)
    });
    (answer, calls.0.load(Ordering::SeqCst))
}

/// A store on an endpoint nothing listens on, so that a request sent would fail as
/// unavailable (it fails even earlier, for want of credentials), never as refused here.
fn store(names: AttributeNames) -> DynamoDbStore {
    let config = Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url("http://127.0.0.1:9")
        .build();
    DynamoDbStore::new(Client::from_conf(config), "t").with_attribute_names(names)
}

#[test]
fn a_store_with_colliding_names_sends_and_counts_no_request() {
    let store = store(AttributeNames::default().with_owner("id"));
    let key = IdempotencyKey::derive("calls", b"k");
    let owner = OwnerToken::generate();
    let now = SystemTime::now();
    let (lease_ms, expiration_secs) = (
        epoch_ms(now + Duration::from_secs(30)),
        epoch_secs(now + Duration::from_secs(3600)),
    );
    let acquire = |validation: Option<String>| AcquireRequest {
        key: key.clone(),
        owner: owner.clone(),
        now,
        lease_expiration_ms: lease_ms,
        expiration_secs,
        validation,
    };
    let complete = |data: String| CompleteRequest {
        key: key.clone(),
        owner: owner.clone(),
        status: Status::Completed,
        data,
        expiration_secs,
        now,
    };
    let commit = |data: String, writes: Vec<Write>| CommitRequest {
        key: key.clone(),
        owner: owner.clone(),
        now,
        status: Status::Completed,
        data,
        expiration_secs,
        validation: None,
        writes,
    };
    // Over the item and transaction limits too: the names are the fault to report, since no
    // smaller request could succeed on this store.
    let big = "x".repeat(500 * 1024);
    let many = || {
        (0..120)
            .map(|i| Write::put("effects", [("id", Attr::n(i))]))
            .collect::<Vec<_>>()
    };
    let (answers, calls) = counted(async {
        vec![
            store.acquire(&acquire(None)).await.map(drop),
            store.acquire(&acquire(Some(big.clone()))).await.map(drop),
            store.complete(&complete("1".into())).await.map(drop),
            store.complete(&complete(big.clone())).await.map(drop),
            store
                .extend(&ExtendRequest {
                    key: key.clone(),
                    owner: owner.clone(),
                    lease_expiration_ms: lease_ms,
                    expiration_secs,
                    now,
                })
                .await
                .map(drop),
            store.release(&key, &owner).await.map(drop),
            store.get(&key).await.map(drop),
            store.get_many(std::slice::from_ref(&key)).await.map(drop),
            store
                .commit(&commit("1".into(), Vec::new()))
                .await
                .map(drop),
            store
                .commit(&commit(big.clone(), Vec::new()))
                .await
                .map(drop),
            store.commit(&commit("1".into(), many())).await.map(drop),
            store
                .commit_fresh(&commit("1".into(), Vec::new()))
                .await
                .map(drop),
            store
                .commit_fresh(&commit(big.clone(), Vec::new()))
                .await
                .map(drop),
            store
                .commit_fresh(&commit("1".into(), many()))
                .await
                .map(drop),
        ]
    });
    let wrong: Vec<_> = answers
        .iter()
        .enumerate()
        .filter(|(_, answer)| !matches!(answer, Err(StoreError::Misconfigured { .. })))
        .collect();
    assert!(wrong.is_empty(), "(call, answer): {wrong:?}");
    assert_eq!(calls, 0, "requests counted as sent");
}

#[test]
fn a_guarded_write_of_a_kind_it_cannot_send_is_refused_uncounted() {
    let store = store(AttributeNames::default());
    let key = [("id", Attr::s("k"))];
    let (answers, calls) = counted(async {
        vec![
            store
                .write_guarded(&Write::delete("effects", key.clone()))
                .await,
            store
                .write_guarded(&Write::condition_check(
                    "effects",
                    key.clone(),
                    "attribute_exists(id)",
                ))
                .await,
        ]
    });
    for (write, answer) in answers.iter().enumerate() {
        assert!(
            matches!(answer, Err(StoreError::InvalidWrite { write_index: 0, .. })),
            "write {write}: {answer:?}"
        );
    }
    assert_eq!(calls, 0, "refused writes counted as sent");
}
