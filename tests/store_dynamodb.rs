//! The store contract on `DynamoDbStore`, against DynamoDB Local.
use lambda_idempotency_test_support as support;
use support::{store_contract_suite, transactional_contract_suite};

store_contract_suite!(support::dynamodb::fresh_store().await);
transactional_contract_suite!(crate::support::dynamodb::fresh_store().await);

use lambda_idempotency::clock::{epoch_ms, epoch_secs, Clock, ManualClock};
use lambda_idempotency::key::IdempotencyKey;
use lambda_idempotency::record::{OwnerToken, Status};
use lambda_idempotency::store::{
    Acquire, AcquireRequest, AttributeNames, CommitRequest, DynamoDbStore, Store,
    TransactionalStore,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_lambda_events::sqs::SqsMessage;
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::key::JsonPointer;
use lambda_idempotency::{IdempotencyLayer, Outcome};
use support::dynamodb::{client_for, counted_client, create_table, CallCounter};
use support::harness::fault_proxy::{FaultProxy, Scripted};
use support::{invocation, load_event};

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

/// A store whose attribute names collide (here the owner's with the key's) would write a
/// record's owner token where its key goes: every delivery of one event would take a lease on
/// a key of its own and run the handler. Such a store refuses every request, and writes
/// nothing.
#[tokio::test]
async fn colliding_attribute_names_are_refused_before_anything_is_written() {
    let Some(store) = support::dynamodb::fresh_store().await else {
        return;
    };
    let store = store.with_attribute_names(AttributeNames::default().with_owner("id"));
    let clock = ManualClock::starting_now();
    let request = || AcquireRequest {
        key: IdempotencyKey::derive("calls", b"k"),
        owner: OwnerToken::generate(),
        now: clock.now(),
        lease_expiration_ms: epoch_ms(clock.now() + Duration::from_secs(30)),
        expiration_secs: epoch_secs(clock.now() + Duration::from_secs(3600)),
        validation: None,
    };
    let table = store.table().to_string();
    let refused = |answer: String| {
        assert_eq!(
            answer,
            format!(
                "Err(Misconfigured(Misconfiguration {{ store: \"DynamoDB\", table: \"{table}\", \
                 code: \"InvalidAttributeNames\", reason: \"the key and owner attributes are both \
                 named \\\"id\\\"\", handler_write: false }}))"
            )
        )
    };
    // Two deliveries of one event, two owners: neither takes a lease.
    refused(format!("{:?}", store.acquire(&request()).await));
    refused(format!("{:?}", store.acquire(&request()).await));
    let key = request().key;
    refused(format!("{:?}", store.get(&key).await));
    refused(format!(
        "{:?}",
        store.get_many(std::slice::from_ref(&key)).await
    ));
    // An optimistic commit, after its handler ran: nothing of it is applied.
    let commit = CommitRequest {
        key,
        owner: OwnerToken::generate(),
        now: clock.now(),
        status: Status::Completed,
        data: "1".into(),
        expiration_secs: epoch_secs(clock.now() + Duration::from_secs(3600)),
        validation: None,
        writes: Vec::new(),
    };
    refused(format!("{:?}", store.commit_fresh(&commit).await));
    let items = store
        .client()
        .scan()
        .table_name(store.table())
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    assert_eq!(items.count(), 0, "{:?}", items.items());
}

/// The same through a batch, per delivery: with the owner's name colliding with the key's,
/// two deliveries of a batch run no handler, fail every record closed with a stable
/// `error_type`, report each for retry, and write nothing.
#[tokio::test]
async fn a_store_with_colliding_names_fails_every_delivery_closed() {
    let Some(store) = support::dynamodb::fresh_store().await else {
        return;
    };
    let store = store.with_attribute_names(AttributeNames::default().with_owner("id"));
    let (client, table) = (store.client().clone(), store.table().to_string());
    let runs = Arc::new(AtomicUsize::new(0));
    let handler = {
        let runs = runs.clone();
        IdempotencyLayer::new(store)
            .with_key(JsonPointer::new("/eventId"))
            .handler(move |_m: SqsMessage| {
                runs.fetch_add(1, Ordering::SeqCst);
                async { Ok::<_, std::io::Error>(1) }
            })
    };
    let processor = BatchProcessor::new(handler);
    for delivery in 0..2 {
        let event = load_event("batch.json");
        let ids: Vec<String> = event
            .records
            .iter()
            .map(|m| m.message_id.clone().unwrap())
            .collect();
        let now = SystemTime::now();
        let report = processor
            .process(invocation(event, now, Duration::from_secs(30)))
            .await;
        let seen: Vec<_> = report
            .records
            .iter()
            .map(|r| (r.outcome, r.error.as_ref().map(|e| e.error_type())))
            .collect();
        assert_eq!(
            seen,
            vec![(Outcome::Misconfigured, Some("Idempotency.Misconfigured")); ids.len()],
            "delivery {delivery}"
        );
        // The invocation fails as a whole: the batch comes back until the names are fixed.
        assert!(
            matches!(
                &report.invocation_error,
                Some(lambda_idempotency::batch::BatchError::Misconfigured(fault))
                    if fault.table == table && fault.code == "InvalidAttributeNames"
            ),
            "delivery {delivery}: {:?}",
            report.invocation_error
        );
        let reported: Vec<String> = report
            .response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.clone())
            .collect();
        assert_eq!(reported, ids, "delivery {delivery}");
        assert_eq!(runs.load(Ordering::SeqCst), 0, "delivery {delivery}");
    }
    let items = client.scan().table_name(&table).send().await.unwrap();
    assert_eq!(items.count(), 0, "{:?}", items.items());
}
