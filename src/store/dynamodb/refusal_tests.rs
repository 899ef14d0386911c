//! A store whose attribute names are unusable refuses every request for a record before it
//! is sent: no request goes out, so none is counted as sent either.

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
    AcquireRequest, AttributeNames, CommitRequest, CompleteRequest, ExtendRequest, Store,
    StoreError, TransactionalStore,
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

#[test]
fn a_store_with_colliding_names_sends_and_counts_no_request() {
    let config = Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        // Nothing listens there: a request sent would fail as unavailable, not misconfigured.
        .endpoint_url("http://127.0.0.1:9")
        .build();
    let store = DynamoDbStore::new(Client::from_conf(config), "t")
        .with_attribute_names(AttributeNames::default().with_owner("id"));
    let key = IdempotencyKey::derive("calls", b"k");
    let owner = OwnerToken::generate();
    let now = SystemTime::now();
    let (lease_ms, expiration_secs) = (
        epoch_ms(now + Duration::from_secs(30)),
        epoch_secs(now + Duration::from_secs(3600)),
    );
    let commit = CommitRequest {
        key: key.clone(),
        owner: owner.clone(),
        now,
        status: Status::Completed,
        data: "1".into(),
        expiration_secs,
        validation: None,
        writes: Vec::new(),
    };
    let calls = Calls::default();
    let answers = metrics::with_local_recorder(&calls, || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            vec![
                store
                    .acquire(&AcquireRequest {
                        key: key.clone(),
                        owner: owner.clone(),
                        now,
                        lease_expiration_ms: lease_ms,
                        expiration_secs,
                        validation: None,
                    })
                    .await
                    .map(drop),
                store
                    .complete(&CompleteRequest {
                        key: key.clone(),
                        owner: owner.clone(),
                        status: Status::Completed,
                        data: "1".into(),
                        expiration_secs,
                        now,
                    })
                    .await
                    .map(drop),
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
                store.commit(&commit).await.map(drop),
                store.commit_fresh(&commit).await.map(drop),
            ]
        })
    });
    for (call, answer) in answers.iter().enumerate() {
        assert!(
            matches!(answer, Err(StoreError::Misconfigured { .. })),
            "call {call}: {answer:?}"
        );
    }
    assert_eq!(
        calls.0.load(Ordering::SeqCst),
        0,
        "requests counted as sent"
    );
}
