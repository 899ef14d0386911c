//! The store contract on `DynamoDbStore`, against DynamoDB Local.
use lambda_idempotency_test_support as support;
use support::{store_contract_suite, transactional_contract_suite};

store_contract_suite!(support::dynamodb::fresh_store().await);
transactional_contract_suite!(crate::support::dynamodb::fresh_store().await);

use lambda_idempotency::clock::{epoch_ms, epoch_secs, Clock, ManualClock};
use lambda_idempotency::key::IdempotencyKey;
use lambda_idempotency::record::{OwnerToken, Status};
use lambda_idempotency::store::{Acquire, AcquireRequest, DynamoDbStore, Store};
use std::time::Duration;
use support::dynamodb::{counted_client, create_table, CallCounter};

/// The failed conditional put returns the old item (ALL_OLD): no second read.
#[tokio::test]
async fn failed_acquire_returns_the_old_item_without_a_get() {
    let counter = CallCounter::default();
    let Some(client) = counted_client(&counter).await else {
        return;
    };
    let store = DynamoDbStore::new(client.clone(), create_table(&client).await);
    let clock = ManualClock::starting_now();
    let request = |owner: &OwnerToken| AcquireRequest {
        key: IdempotencyKey::derive("calls", b"k"),
        owner: owner.clone(),
        now: clock.now(),
        lease_expiration_ms: epoch_ms(clock.now() + Duration::from_secs(30)),
        expiration_secs: epoch_secs(clock.now() + Duration::from_secs(3600)),
        validation: None,
    };
    let first = OwnerToken::generate();
    assert_eq!(
        store.acquire(&request(&first)).await.unwrap(),
        Acquire::Acquired
    );
    counter.reset();
    let Acquire::Existing(record) = store
        .acquire(&request(&OwnerToken::generate()))
        .await
        .unwrap()
    else {
        panic!("existing record expected");
    };
    assert_eq!(record.status, Status::InProgress);
    assert_eq!(record.owner, Some(first));
    assert_eq!(counter.count("PutItem"), 1);
    assert_eq!(counter.count("GetItem"), 0, "calls: {:?}", counter.all());
}
