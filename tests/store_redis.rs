//! The store contract on `RedisStore`, against the Redis server `scripts/test.sh` starts.
use lambda_idempotency_test_support as support;
use support::store_contract_suite;

store_contract_suite!(support::redis::fresh_store().await);

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_lambda_events::sqs::SqsMessage;
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::clock::{epoch_ms, epoch_secs};
use lambda_idempotency::record::{OwnerToken, Status};
use lambda_idempotency::store::{Acquire, AcquireRequest, Store};
use lambda_idempotency::{BoxError, Config, IdempotencyLayer, Outcome};
use support::{invocation, load_event, outcomes};

/// Two processes (two layers on one Redis) get the same batch: each record's handler runs
/// once, the second process replays, and the records are COMPLETED without an owner's lease.
#[tokio::test]
async fn two_processes_run_each_record_once() {
    let Some(store) = support::redis::fresh_store().await else {
        return;
    };
    let runs = Arc::new(AtomicUsize::new(0));
    let process = || {
        let runs = Arc::clone(&runs);
        let handler = IdempotencyLayer::new(store.clone())
            .with_config(Config::new().with_key_prefix("orders"))
            .handler(move |message: SqsMessage| {
                runs.fetch_add(1, Ordering::SeqCst);
                async move { Ok::<_, BoxError>(message.body.unwrap_or_default().len()) }
            });
        BatchProcessor::new(handler)
    };
    let deliver = || {
        invocation(
            load_event("batch.json"),
            SystemTime::now(),
            Duration::from_secs(30),
        )
    };
    let first = process().process(deliver()).await;
    assert_eq!(outcomes(&first), [Outcome::Executed; 3]);
    let second = process().process(deliver()).await;
    assert_eq!(outcomes(&second), [Outcome::Replayed; 3]);
    assert_eq!(second.records[0].value, first.records[0].value);
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    let id = load_event("batch.json").records[0]
        .message_id
        .clone()
        .unwrap();
    let key = lambda_idempotency::key::IdempotencyKey::derive("orders", id.as_bytes());
    let record = store.get(&key).await.unwrap().expect("the record");
    assert_eq!(record.status, Status::Completed);
    assert_eq!(record.lease_expiration_ms, None);
}

/// The key's TTL is garbage collection: it outlives the record's own expiry.
#[tokio::test]
async fn the_ttl_comes_after_the_record_expires() {
    let Some(store) = support::redis::fresh_store().await else {
        return;
    };
    let now = SystemTime::now();
    let key = lambda_idempotency::key::IdempotencyKey::derive("ttl", b"k");
    let expiration_secs = epoch_secs(now) + 60;
    let request = AcquireRequest {
        key: key.clone(),
        owner: OwnerToken::generate(),
        now,
        lease_expiration_ms: epoch_ms(now) + 30_000,
        expiration_secs,
        validation: None,
    };
    assert_eq!(store.acquire(&request).await.unwrap(), Acquire::Acquired);
    let mut connection = store.connection().clone();
    let expire_at_ms: i64 = redis::cmd("PEXPIRETIME")
        .arg(store.redis_key(&key))
        .query_async(&mut connection)
        .await
        .unwrap();
    let expire_at_ms = u64::try_from(expire_at_ms).expect("a TTL is set");
    assert!(
        expire_at_ms >= (expiration_secs + 1) * 1000 + 300_000,
        "{expire_at_ms}"
    );
}
