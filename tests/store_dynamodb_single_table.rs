//! The store contract, and the transactional contract, on `DynamoDbStore` with a
//! single-table layout (a static partition key value, the idempotency key in the sort key),
//! against DynamoDB Local.
use lambda_idempotency_test_support as support;
use support::{store_contract_suite, transactional_contract_suite};

store_contract_suite!(support::dynamodb::fresh_single_table_store().await);
transactional_contract_suite!(crate::support::dynamodb::fresh_single_table_store().await);

use std::time::SystemTime;

use aws_sdk_dynamodb::types::AttributeValue;
use lambda_idempotency::clock::{epoch_ms, epoch_secs};
use lambda_idempotency::key::IdempotencyKey;
use lambda_idempotency::record::OwnerToken;
use lambda_idempotency::store::{Acquire, AcquireRequest, Store};

/// The record is the item (pk = the static value, sk = the stored key), beside the table's
/// other items, which it leaves alone.
#[tokio::test]
async fn records_live_under_the_static_partition_key() {
    let Some(store) = support::dynamodb::fresh_single_table_store().await else {
        return;
    };
    let client = store.client().clone();
    let other = |sk: &str| {
        [
            ("pk".to_string(), AttributeValue::S("customer#1".into())),
            ("sk".to_string(), AttributeValue::S(sk.into())),
        ]
        .into_iter()
        .collect::<std::collections::HashMap<_, _>>()
    };
    let key = IdempotencyKey::derive("orders", b"evt-1");
    // Another item of the table with the same sort key value, under another partition.
    client
        .put_item()
        .table_name(store.table())
        .set_item(Some(other(key.as_str())))
        .send()
        .await
        .unwrap();
    let now = SystemTime::now();
    let request = AcquireRequest {
        key: key.clone(),
        owner: OwnerToken::generate(),
        now,
        lease_expiration_ms: epoch_ms(now) + 30_000,
        expiration_secs: epoch_secs(now) + 3_600,
        validation: None,
    };
    assert_eq!(store.acquire(&request).await.unwrap(), Acquire::Acquired);
    let item = client
        .get_item()
        .table_name(store.table())
        .key("pk", AttributeValue::S("idempotency#orders".into()))
        .key("sk", AttributeValue::S(key.as_str().into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .expect("the record's item");
    assert_eq!(item["status"].as_s().unwrap(), "INPROGRESS");
    let record = store.get(&key).await.unwrap().expect("the record");
    assert_eq!(record.key, key);
    let untouched = client
        .get_item()
        .table_name(store.table())
        .set_key(Some(other(key.as_str())))
        .send()
        .await
        .unwrap()
        .item
        .expect("the other item");
    assert_eq!(untouched.len(), 2);
}
