//! PostgreSQL for the store tests: a [`PostgresStore`] on the server `scripts/test.sh` starts
//! (`LAMBDA_IDEMPOTENCY_POSTGRES_URL`), each on a fresh table so tests never share a record.

use lambda_idempotency::store::PostgresStore;

fn required() -> bool {
    std::env::var("LAMBDA_IDEMPOTENCY_REQUIRE_POSTGRES").is_ok_and(|v| v == "1")
        || std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false")
}

/// A pool of up to 8 connections on the test server, or `None` (test skipped) when no server
/// is configured and PostgreSQL is not required. Panics when the server is required and
/// missing.
pub fn pool() -> Option<deadpool_postgres::Pool> {
    pool_of(8)
}

/// As [`pool`], of up to `max_size` connections.
pub fn pool_of(max_size: usize) -> Option<deadpool_postgres::Pool> {
    let url = match std::env::var("LAMBDA_IDEMPOTENCY_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => url,
        _ if required() => panic!(
            "LAMBDA_IDEMPOTENCY_POSTGRES_URL is not set but PostgreSQL is required: run scripts/test.sh"
        ),
        _ => {
            eprintln!(
                "SKIPPED: LAMBDA_IDEMPOTENCY_POSTGRES_URL is not set (scripts/test.sh starts PostgreSQL)"
            );
            return None;
        }
    };
    let config: tokio_postgres::Config = url.parse().unwrap_or_else(|e| panic!("{url}: {e}"));
    let manager = deadpool_postgres::Manager::new(config, tokio_postgres::NoTls);
    Some(
        deadpool_postgres::Pool::builder(manager)
            .max_size(max_size)
            .build()
            .expect("a pool"),
    )
}

/// A store on a fresh table of the test server, created, or `None` as [`pool`]. Panics when
/// the server is required and unreachable.
pub async fn fresh_store() -> Option<PostgresStore> {
    let pool = pool()?;
    let table = format!(
        "records_{}",
        lambda_idempotency::record::OwnerToken::generate()
            .as_str()
            .replace(|c: char| !c.is_ascii_alphanumeric(), "_")
            .to_ascii_lowercase()
    );
    let store = PostgresStore::new(pool).with_table(&table);
    store
        .create_table()
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL is unreachable or refused the table: {e:?}"));
    Some(store)
}

/// A fresh ledger table (`account text primary key, balance bigint not null`) on the store's
/// server, named after the store's table; answers its name.
pub async fn fresh_ledger(store: &PostgresStore) -> String {
    let name = format!("ledger_{}", store.table());
    let client = store.pool().get().await.expect("a PostgreSQL connection");
    client
        .batch_execute(&format!(
            "CREATE TABLE {name} (account text PRIMARY KEY, balance bigint NOT NULL)"
        ))
        .await
        .expect("create the ledger");
    name
}

/// The balances of `ledger`, by account.
pub async fn balances(store: &PostgresStore, ledger: &str) -> Vec<(String, i64)> {
    let client = store.pool().get().await.expect("a PostgreSQL connection");
    client
        .query(
            &format!("SELECT account, balance FROM {ledger} ORDER BY account"),
            &[],
        )
        .await
        .expect("read the ledger")
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

/// A fresh, empty database on the test server; answers its URL, or `None` as [`pool`].
pub async fn fresh_database() -> Option<String> {
    let pool = pool()?;
    let url = std::env::var("LAMBDA_IDEMPOTENCY_POSTGRES_URL").expect("checked by pool()");
    let name = format!(
        "db_{}",
        lambda_idempotency::record::OwnerToken::generate()
            .as_str()
            .replace('-', "_")
    );
    let client = pool
        .get()
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at {url} is unreachable: {e}"));
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("create a database");
    let (base, _) = url.rsplit_once('/').expect("a URL with a database");
    Some(format!("{base}/{name}"))
}
