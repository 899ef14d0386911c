//! The pg-order-consumer's wiring, shared by its binary (`src/main.rs`) and its tests: the
//! order consumer's contract with its idempotency records and its ledger in PostgreSQL.
//!
//! Contract:
//! - Environment: `DATABASE_URL` (a `postgres://` URL), `IDEMPOTENCY_MODE` = `optimistic`
//!   (the default) or `lease`, `IDEMPOTENCY_EXPIRES_AFTER_SECS` (as the order-consumer's:
//!   default 23 days) and `DEADLINE_MARGIN_MS`, the time that must remain before the
//!   invocation deadline to start a record (as the order-consumer's: default 1 s, the
//!   library's).
//! - Tables, created if missing before the first batch (a database unreachable at start does
//!   not fail the start: each invocation fails until it is reached, and its batch is
//!   retried): the store's `idempotency_records` (the shipped DDL) and
//!   `ledger (account text primary key, balance bigint not null)`.
//! - Message body and key: the order-consumer's (`{"eventId", "account", "amount"}`; the
//!   `Idempotency-Key` attribute, else `eventId`; payload validation on the body).
//! - Effect: `balance` of `account` grows by `amount`, in the same PostgreSQL transaction as
//!   the idempotency record's final state, so a killed process applies it zero times and a
//!   redelivery once.

#![warn(missing_docs)]

use std::time::Duration;

use lambda_idempotency::aws_lambda_events::sqs::SqsMessage;
use lambda_idempotency::batch::{BatchProcessor, BatchRecord};
use lambda_idempotency::key::PayloadValidation;
use lambda_idempotency::store::postgres::PgTransaction;
use lambda_idempotency::store::{PostgresStore, StoreError, TransactionScope};
use lambda_idempotency::{deadpool_postgres, tokio_postgres};
use lambda_idempotency::{BoxError, CommitStrategy, Config, Error, IdempotencyLayer, Processed};
pub use order_consumer::{order_key, parse_order, Applied, Order, KEY_PREFIX};

/// The ledger's DDL.
pub const LEDGER_DDL: &str =
    "CREATE TABLE IF NOT EXISTS ledger (account text PRIMARY KEY, balance bigint NOT NULL)";

/// How one deployment runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `DATABASE_URL`.
    pub database_url: String,
    /// Lease or optimistic transactions.
    pub mode: CommitStrategy,
    /// How long records count.
    pub expires_after: Duration,
    /// The time that must remain before the deadline to start a record.
    pub deadline_margin: Duration,
}

impl Settings {
    /// The defaults for `database_url` in `mode`.
    pub fn new(database_url: impl Into<String>, mode: CommitStrategy) -> Self {
        Self {
            database_url: database_url.into(),
            mode,
            expires_after: order_consumer::DEFAULT_EXPIRES_AFTER,
            deadline_margin: lambda_idempotency::batch::DEFAULT_DEADLINE_MARGIN,
        }
    }

    /// The settings from the environment (see the crate documentation).
    pub fn from_env() -> Result<Self, lambda_runtime::Error> {
        let url = std::env::var("DATABASE_URL")
            .ok()
            .filter(|v| !v.is_empty())
            .ok_or("environment variable DATABASE_URL is required")?;
        let mode_text = std::env::var("IDEMPOTENCY_MODE").unwrap_or_else(|_| "optimistic".into());
        let mode = CommitStrategy::parse(&mode_text).ok_or_else(|| {
            format!("IDEMPOTENCY_MODE must be optimistic or lease, not {mode_text:?}")
        })?;
        let mut settings = Self::new(url, mode);
        settings.expires_after = order_consumer::expires_after(
            std::env::var("IDEMPOTENCY_EXPIRES_AFTER_SECS")
                .ok()
                .as_deref(),
        )?;
        settings.deadline_margin =
            order_consumer::deadline_margin(std::env::var("DEADLINE_MARGIN_MS").ok().as_deref())?;
        Ok(settings)
    }
}

/// A store on `database_url` through a pool of 2 connections (one invocation runs at a time
/// per instance): one for the transaction of the record that runs, one kept for the lease
/// calls, so the batch's records run their transactions one at a time (see
/// [`processor`]). Without TLS (see the README for RDS), with bounded connects and waits. It
/// does not connect yet: the pool connects on first use, so a database that is briefly
/// unreachable does not fail the function's start ([`Tables`] creates the tables then).
pub fn connect(database_url: &str) -> Result<PostgresStore, BoxError> {
    let mut config: tokio_postgres::Config = database_url.parse()?;
    config.connect_timeout(Duration::from_secs(2));
    let manager = deadpool_postgres::Manager::new(config, tokio_postgres::NoTls);
    let pool = deadpool_postgres::Pool::builder(manager)
        .max_size(2)
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .wait_timeout(Some(Duration::from_secs(2)))
        .create_timeout(Some(Duration::from_secs(3)))
        .build()?;
    Ok(PostgresStore::new(pool))
}

/// The function's tables, created if missing (the store's and the ledger), once per process:
/// before the first batch that finds the database reachable. Until then each invocation
/// fails as a whole (its batch is retried), rather than the function failing its start.
#[derive(Debug, Default)]
pub struct Tables {
    created: tokio::sync::OnceCell<()>,
}

impl Tables {
    /// Creates the tables on `store` unless this process already did: an error leaves them
    /// to the next call.
    pub async fn ensure(&self, store: &PostgresStore) -> Result<(), StoreError> {
        self.created
            // Instances that start together: the DDL runs once at a time.
            .get_or_try_init(|| store.create_table_with(LEDGER_DDL))
            .await
            .map(|_| ())
    }
}

/// Credits the order in `message` to the ledger, in `transaction` (the record's).
pub async fn apply_order(
    message: SqsMessage,
    transaction: PgTransaction,
) -> Result<Applied, BoxError> {
    let order = parse_order(&message)?;
    let client = transaction.client().await?;
    client
        .execute(
            "INSERT INTO ledger (account, balance) VALUES ($1, $2) \
             ON CONFLICT (account) DO UPDATE SET balance = ledger.balance + EXCLUDED.balance",
            &[&order.account, &order.amount],
        )
        .await?;
    Ok(Applied {
        account: order.account,
        amount: order.amount,
    })
}

/// The batch processor of one deployment on `store` (a [`PostgresStore`], or a wrapper of
/// one in tests): each order credited in the transaction of its record.
///
/// # Errors
///
/// A store that could never run a record's transaction (a pool of fewer than 2 connections:
/// each transaction holds one, and one is kept for the lease calls) is refused here, at
/// start-up, with [`StoreError::Misconfigured`].
pub fn processor<St>(
    store: St,
    settings: &Settings,
) -> Result<
    BatchProcessor<
        impl tower::Service<
                BatchRecord<SqsMessage>,
                Response = Processed<Applied>,
                Error = Error,
                Future = impl Send,
            > + Clone
            + Send
            + Sync
            + 'static,
    >,
    StoreError,
>
where
    St: TransactionScope<Transaction = PgTransaction> + Clone,
{
    let handler = IdempotencyLayer::new(store)
        .with_key(order_key())
        .with_config(
            Config::new()
                .with_key_prefix(KEY_PREFIX)
                .with_expires_after(settings.expires_after)
                .with_payload_validation(PayloadValidation::Body),
        )
        .in_transaction()?
        .with_commit(settings.mode)
        .handler(apply_order);
    Ok(BatchProcessor::new(handler).with_deadline_margin(settings.deadline_margin))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool of 1 leaves no connection for a record's transaction besides the lease calls':
    /// the processor is refused when it is built, before any record (nothing is sent: there
    /// is no server at this address).
    #[test]
    fn a_pool_of_one_is_refused_at_start() {
        let store = |max_size: usize| {
            let config: tokio_postgres::Config =
                "postgres://nobody@127.0.0.1:1/none".parse().expect("a URL");
            let manager = deadpool_postgres::Manager::new(config, tokio_postgres::NoTls);
            PostgresStore::new(
                deadpool_postgres::Pool::builder(manager)
                    .max_size(max_size)
                    .build()
                    .expect("a pool"),
            )
        };
        let settings = Settings::new("postgres://nobody@127.0.0.1:1/none", CommitStrategy::Lease);
        match processor(store(1), &settings) {
            Err(StoreError::Misconfigured(fault)) => assert!(
                fault
                    .reason
                    .starts_with("a PostgreSQL pool of max size 1 leaves no connection"),
                "{fault}"
            ),
            Err(other) => panic!("{other:?}"),
            Ok(_) => panic!("a pool of 1 was accepted"),
        }
        assert!(processor(store(2), &settings).is_ok());
    }
}
