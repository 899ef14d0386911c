//! The store contract on `PostgresStore`, against the PostgreSQL server `scripts/test.sh`
//! starts.
use lambda_idempotency_test_support as support;
use support::store_contract_suite;

store_contract_suite!(support::postgres::fresh_store().await);

use std::time::{Duration, SystemTime};

use lambda_idempotency::clock::{epoch_ms, epoch_secs};
use lambda_idempotency::key::IdempotencyKey;
use lambda_idempotency::record::{OwnerToken, Status};
use lambda_idempotency::store::postgres::CLEANUP_GRACE;
use lambda_idempotency::store::{Acquire, AcquireRequest, PostgresStore, Store, StoreError};

fn acquire_at(key: &IdempotencyKey, now: SystemTime, window: Duration) -> AcquireRequest {
    AcquireRequest {
        key: key.clone(),
        owner: OwnerToken::generate(),
        now,
        lease_expiration_ms: epoch_ms(now + Duration::from_secs(1)),
        expiration_secs: epoch_secs(now + window),
        validation: None,
    }
}

/// The cleanup deletes records that expired more than the grace ago, in batches, and leaves
/// live records and records taken over after they expired.
#[tokio::test]
async fn cleanup_deletes_only_what_expired_long_enough_ago() {
    let Some(store) = support::postgres::fresh_store().await else {
        return;
    };
    let now = SystemTime::now();
    let old = now - Duration::from_secs(3_600);
    let expired: Vec<IdempotencyKey> = (0..5)
        .map(|i| IdempotencyKey::derive("gc", format!("expired-{i}").as_bytes()))
        .collect();
    for key in &expired {
        let request = acquire_at(key, old, Duration::from_secs(60));
        assert_eq!(store.acquire(&request).await.unwrap(), Acquire::Acquired);
    }
    // Expired 59 minutes ago, then taken over now: live again.
    let taken = &expired[0];
    let takeover = acquire_at(taken, now, Duration::from_secs(60));
    assert_eq!(store.acquire(&takeover).await.unwrap(), Acquire::Acquired);
    // Expired, but within the grace.
    let recent = IdempotencyKey::derive("gc", b"recent");
    let request = acquire_at(
        &recent,
        now - Duration::from_secs(120),
        Duration::from_secs(60),
    );
    assert_eq!(store.acquire(&request).await.unwrap(), Acquire::Acquired);
    let live = IdempotencyKey::derive("gc", b"live");
    let request = acquire_at(&live, now, Duration::from_secs(3_600));
    assert_eq!(store.acquire(&request).await.unwrap(), Acquire::Acquired);

    assert_eq!(
        store.delete_expired(now, CLEANUP_GRACE, 3).await.unwrap(),
        3
    );
    assert_eq!(
        store.delete_expired(now, CLEANUP_GRACE, 3).await.unwrap(),
        1
    );
    assert_eq!(
        store.delete_expired(now, CLEANUP_GRACE, 3).await.unwrap(),
        0
    );
    for key in &expired[1..] {
        assert_eq!(store.get(key).await.unwrap(), None);
    }
    for key in [taken, &recent, &live] {
        let record = store.get(key).await.unwrap().expect("kept");
        assert_eq!(record.status, Status::InProgress);
    }
}

async fn raw(store: &PostgresStore, sql: &str, key: &IdempotencyKey) {
    let client = store.pool().get().await.unwrap();
    client
        .execute(&sql.replace("{table}", store.table()), &[&key.as_str()])
        .await
        .unwrap();
}

/// Rows the store did not write are `Malformed` (the record fails alone, its handler does
/// not run) and are not taken over before they expire.
#[tokio::test]
async fn foreign_rows_are_malformed_and_left_as_they_are() {
    let Some(store) = support::postgres::fresh_store().await else {
        return;
    };
    let now = SystemTime::now();
    let later = epoch_secs(now) + 3_600;
    let cases = [
        ("status", format!("INSERT INTO {{table}} (id, status, expiration) VALUES ($1, 'DONE', {later})")),
        ("negative", "INSERT INTO {table} (id, status, expiration, in_progress_expiration) VALUES ($1, 'INPROGRESS', -1, -5)".to_string()),
    ];
    for (name, sql) in cases {
        let key = IdempotencyKey::derive("foreign", name.as_bytes());
        raw(&store, &sql, &key).await;
        let answer = store.get(&key).await;
        assert!(
            matches!(answer, Err(StoreError::Malformed { .. })),
            "{name}: {answer:?}"
        );
        if name == "status" {
            let answer = store
                .acquire(&acquire_at(&key, now, Duration::from_secs(60)))
                .await;
            assert!(
                matches!(answer, Err(StoreError::Malformed { .. })),
                "{answer:?}"
            );
        }
    }
}

#[test]
#[should_panic(expected = "table name")]
fn table_names_are_checked() {
    let config: tokio_postgres::Config = "postgres://nobody@127.0.0.1:1/none".parse().unwrap();
    let manager = deadpool_postgres::Manager::new(config, tokio_postgres::NoTls);
    let pool = deadpool_postgres::Pool::builder(manager).build().unwrap();
    let _ = PostgresStore::new(pool).with_table("records; DROP TABLE ledger");
}

/// Function instances that start together all create the table (PostgreSQL's `IF NOT
/// EXISTS` alone races: one of them would fail its start with a unique violation).
#[tokio::test]
async fn concurrent_starts_all_create_the_table() {
    let Some(pool) = support::postgres::pool() else {
        return;
    };
    let table = format!(
        "records_{}",
        OwnerToken::generate().as_str().replace('-', "_")
    );
    let stores: Vec<PostgresStore> = (0..8)
        .map(|_| PostgresStore::new(pool.clone()).with_table(&table))
        .collect();
    let created = futures_util::future::join_all(stores.iter().map(|s| s.create_table())).await;
    for answer in created {
        answer.expect("created, or found created");
    }
}
