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
use support::dynamodb::{client_for, counted_client, create_table, CallCounter};
use support::harness::fault_proxy::{FaultProxy, Scripted};

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

/// The testing kit's `create_table` when the SDK resends a `CreateTable` whose answer was
/// lost (DynamoDB Local slow under load, the attempt timed out): the resent call is refused
/// with `ResourceInUseException`, and the table, fresh-named, is the first attempt's own.
#[tokio::test]
async fn a_table_created_by_a_resent_call_is_the_tests_own() {
    let Some(direct) = support::dynamodb::client().await else {
        return;
    };
    let endpoint = std::env::var("AWS_ENDPOINT_URL_DYNAMODB").expect("the endpoint");
    let proxy = FaultProxy::start(&endpoint, 1).await;
    proxy.script("CreateTable", Scripted::LoseAnswer);
    let client = client_for(&proxy.endpoint(), Duration::from_secs(5)).await;
    let table = lambda_idempotency::testing::dynamodb::create_table(&client, "resent", "id").await;
    assert!(proxy.unused_script().is_empty(), "the answer was lost once");
    let described = direct.describe_table().table_name(&table).send().await;
    assert!(described.is_ok(), "{table}: {described:?}");
}
