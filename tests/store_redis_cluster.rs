//! The store contract on `RedisStore` over a Redis Cluster connection, against the three-node
//! cluster `scripts/test.sh` starts: every key is its own hash tag, so the keys of one call
//! (a batch's pre-check) live on different slots and nodes.
use lambda_idempotency_test_support as support;
use support::store_contract_suite;

store_contract_suite!(support::redis::fresh_cluster_store().await);

use std::time::{Duration, SystemTime};

use lambda_idempotency::clock::{epoch_ms, epoch_secs};
use lambda_idempotency::key::IdempotencyKey;
use lambda_idempotency::record::{OwnerToken, Status};
use lambda_idempotency::store::{Acquire, AcquireRequest, CompleteRequest, Fenced, Store};

/// A batch whose only looked-up key is one record (asked twice): its pipeline goes to that
/// key's slot whole, not key by key.
#[tokio::test]
async fn get_many_of_one_slot_is_one_pipeline() {
    let Some(store) = support::redis::fresh_cluster_store().await else {
        return;
    };
    let now = SystemTime::now();
    let key = IdempotencyKey::derive("cluster", b"one");
    let owner = OwnerToken::generate();
    let acquired = store
        .acquire(&AcquireRequest {
            key: key.clone(),
            owner: owner.clone(),
            now,
            lease_expiration_ms: epoch_ms(now + Duration::from_secs(30)),
            expiration_secs: epoch_secs(now + Duration::from_secs(3_600)),
            validation: None,
        })
        .await
        .unwrap();
    assert_eq!(acquired, Acquire::Acquired);
    let completed = store
        .complete(&CompleteRequest {
            key: key.clone(),
            owner,
            status: Status::Completed,
            data: "7".into(),
            expiration_secs: epoch_secs(now + Duration::from_secs(3_600)),
            now,
        })
        .await
        .unwrap();
    assert_eq!(completed, Fenced::Applied);
    let found = store.get_many(&[key.clone(), key.clone()]).await.unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].key, key);
    assert_eq!(found[0].data.as_deref(), Some("7"));
    let absent = IdempotencyKey::derive("cluster", b"absent");
    assert!(store.get_many(&[absent]).await.unwrap().is_empty());
}
