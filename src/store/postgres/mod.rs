//! [`PostgresStore`]: the records in a PostgreSQL table (feature `postgres`), each transition
//! one statement.
//!
//! The table ([`schema.sql`](https://docs.rs/crate/lambda-idempotency/latest/source/src/store/postgres/schema.sql),
//! or [`PostgresStore::create_table`]) has the DynamoDB layout's columns: `id` (the primary
//! key), `status`, `expiration` (epoch seconds), `in_progress_expiration` (epoch
//! milliseconds), `lease_owner`, `data`, `validation`.
//!
//! - acquire: one `INSERT ... ON CONFLICT (id) DO UPDATE ... WHERE <expired or lease
//!   elapsed>`, in a statement that also answers the record it found, so a refusal costs no
//!   second round trip; an acquire resent after a lost answer finds its own lease;
//! - complete, extend, release: `UPDATE`/`DELETE` conditioned on `INPROGRESS` and the
//!   caller's owner token (a resent completion recognises its own earlier success).
//!
//! As on DynamoDB, every condition compares the record's times with the caller's (the
//! layer's clock), never the server's. PostgreSQL has no TTL: expired rows stay until
//! [`PostgresStore::delete_expired`] (or the equivalent SQL job) removes them, which is
//! garbage collection only.
//!
//! Pool size. A handler's transaction ([`PgTransaction`], for
//! [`IdempotencyLayer::in_transaction`](crate::IdempotencyLayer::in_transaction)) holds one
//! connection from its begin to its commit. The store runs at most the pool's max size minus
//! one of them at once, in turn: the last connection is kept for the lease calls (acquire,
//! heartbeat extensions, release, reads), which would otherwise wait behind the transactions
//! of the very handlers whose leases they keep, until those leases lapse. A record waiting
//! for its turn holds no lease yet, and waits at most until its invocation's deadline. So a
//! pool for in-transaction handlers needs a max size of at least 2 (the transactions to run
//! at once, plus one); `in_transaction` refuses a smaller one with
//! [`StoreError::Misconfigured`]. The count is shared by the store's clones and read from
//! the pool when the store is built: build one store per pool, and leave the pool to it (a
//! connection you hold from [`PostgresStore::pool`] while a handler runs is one fewer for
//! the lease calls).
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use lambda_idempotency::store::PostgresStore;
//! use lambda_idempotency::IdempotencyLayer;
//!
//! let config: tokio_postgres::Config = "postgres://app@db.example/app".parse()?;
//! let manager = deadpool_postgres::Manager::new(config, tokio_postgres::NoTls);
//! // Up to 3 handlers' transactions at once, and a connection for the lease calls.
//! let pool = deadpool_postgres::Pool::builder(manager).max_size(4).build()?;
//! let store = PostgresStore::new(pool);
//! store.create_table().await?;
//! let layer = IdempotencyLayer::new(store);
//! # let _ = layer;
//! # Ok(())
//! # }
//! ```

mod table;
mod transaction;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use deadpool_postgres::Pool;
use tokio::sync::Semaphore;
use tokio_postgres::Row;

pub use self::table::DEFAULT_TABLE;
use self::table::{AcquireArgs, Table};
pub use self::transaction::{PgTransaction, TransactionClient, TransactionFinished};
use super::item_size::{check_item_size, completed_size_bytes, record_size_bytes};
use super::{
    is_our_completion, readable, Acquire, AcquireRequest, AttributeNames, CompleteRequest,
    ExtendRequest, Fenced, Misconfiguration, Store, StoreError, TransactionScope,
};
use crate::clock::epoch_secs;
use crate::key::IdempotencyKey;
use crate::record::{OwnerToken, Record, Status};

/// How long after a record expires [`PostgresStore::delete_expired`] deletes it by default
/// (room for clocks that disagree).
pub const CLEANUP_GRACE: Duration = Duration::from_secs(300);

/// How many of the pool's connections handlers' transactions never take: the lease calls'
/// (acquire, heartbeat extensions, release, reads).
const LEASE_CONNECTIONS: usize = 1;

/// The idempotency records in a PostgreSQL table, through a `deadpool-postgres` pool. See the
/// [module](crate::store::postgres) docs.
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    table: Table,
    /// The pool's max size when the store was built.
    pool_max_size: usize,
    /// Admits handlers' transactions, one permit each for as long as it holds its connection:
    /// [`LEASE_CONNECTIONS`] fewer than the pool's, so a lease call never waits for a
    /// connection behind the transactions of the handlers whose leases it keeps. Shared by
    /// clones; FIFO, so a waiting transaction is never overtaken.
    transactions: Arc<Semaphore>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("table", &self.table.name)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// A store on the table `idempotency_records`, through `pool`.
    ///
    /// Handlers' transactions ([`IdempotencyLayer::in_transaction`](crate::IdempotencyLayer::in_transaction))
    /// take one connection each for as long as they run, at most the pool's max size minus one
    /// at once (read here, when the store is built): the last connection is kept for the lease
    /// calls (acquire, heartbeat extensions, release), which would otherwise wait behind those
    /// transactions until the leases they keep lapse. So a pool for in-transaction handlers
    /// needs a max size of at least 2 (the transactions you want at once, plus one); on a
    /// smaller one every transaction is refused (`StoreError::Misconfigured`). Build one
    /// store per pool and clone it: clones share the count.
    pub fn new(pool: Pool) -> Self {
        let pool_max_size = pool.status().max_size;
        let at_once = pool_max_size
            .saturating_sub(LEASE_CONNECTIONS)
            .min(Semaphore::MAX_PERMITS);
        Self {
            pool,
            table: Table::new(DEFAULT_TABLE).expect("the default table name is valid"),
            pool_max_size,
            transactions: Arc::new(Semaphore::new(at_once)),
        }
    }

    /// Uses the table `name` (`table` or `schema.table`) instead.
    ///
    /// # Panics
    ///
    /// If `name` is not one or two dot-separated identifiers of ASCII letters, digits and
    /// underscores (the name is written into the SQL, so nothing else is accepted).
    pub fn with_table(mut self, name: &str) -> Self {
        self.table = Table::new(name)
            .unwrap_or_else(|| panic!("not a PostgreSQL table name this store accepts: {name:?}"));
        self
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.table.name
    }

    /// The pool. A connection you hold from it (in a handler, say) is one fewer for the
    /// store's lease calls while you hold it: see [`new`](Self::new).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The DDL of the store's table and its cleanup index (the shipped `schema.sql`, for
    /// this table name).
    pub fn schema_sql(&self) -> String {
        self.table.schema_sql()
    }

    /// Creates the table and its index if they do not exist. Safe when many function
    /// instances start at once: the DDL runs in a transaction under an advisory lock (on its
    /// own, PostgreSQL's `IF NOT EXISTS` races, and all but one would fail).
    pub async fn create_table(&self) -> Result<(), StoreError> {
        self.create_table_with("").await
    }

    /// As [`create_table`](Self::create_table), and runs `extra_ddl` (your own tables, as
    /// idempotent statements such as `CREATE TABLE IF NOT EXISTS`) in the same transaction,
    /// under the same lock.
    pub async fn create_table_with(&self, extra_ddl: &str) -> Result<(), StoreError> {
        let object = self.pool.get().await.map_err(pool_error)?;
        // The name is an identifier (checked), so it is safe inside the literal.
        let sql = format!(
            "BEGIN; SELECT pg_advisory_xact_lock(hashtext('lambda-idempotency:{name}')); \
             {ddl}{extra_ddl}; COMMIT;",
            name = self.table.name,
            ddl = self.table.schema_sql(),
        );
        match object.batch_execute(&sql).await {
            Ok(()) => Ok(()),
            Err(err) => {
                // Its transaction is aborted: the connection does not go back to the pool.
                drop(deadpool_postgres::Object::take(object));
                Err(sql_error(err))
            }
        }
    }

    /// Deletes up to `limit` records that expired more than `grace` before `now` (garbage
    /// collection: an expired record no longer counts, whether or not it is still there).
    /// Answers how many it deleted; call it again while that equals `limit`. A record taken
    /// over meanwhile is left alone.
    pub async fn delete_expired(
        &self,
        now: SystemTime,
        grace: Duration,
        limit: u32,
    ) -> Result<u64, StoreError> {
        let before = epoch_secs(now.checked_sub(grace).unwrap_or(SystemTime::UNIX_EPOCH));
        let client = self.pool.get().await.map_err(pool_error)?;
        let statement = client
            .prepare_cached(&self.table.delete_expired_sql())
            .await
            .map_err(sql_error)?;
        client
            .execute(&statement, &[&to_sql(before), &i64::from(limit)])
            .await
            .map_err(sql_error)
    }

    /// How many handlers' transactions the store runs at once: the pool's max size minus
    /// the connection kept for lease calls.
    pub(crate) fn transactions_at_once(&self) -> usize {
        self.pool_max_size.saturating_sub(LEASE_CONNECTIONS)
    }

    /// A place among the transactions the store runs at once, in turn (FIFO); refused at
    /// once on a pool too small for any
    /// ([`check_transactions`](TransactionScope::check_transactions)).
    pub(crate) async fn admit_transaction(
        &self,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, StoreError> {
        self.check_transactions()?;
        Ok(Arc::clone(&self.transactions)
            .acquire_owned()
            .await
            .expect("the store never closes its semaphore"))
    }

    /// Runs `sql` with `params` on a pooled connection, prepared once per connection.
    async fn query_one(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Row, StoreError> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let statement = client.prepare_cached(sql).await.map_err(sql_error)?;
        client
            .query_one(&statement, params)
            .await
            .map_err(sql_error)
    }

    async fn execute(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Fenced, StoreError> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let statement = client.prepare_cached(sql).await.map_err(sql_error)?;
        let rows = client
            .execute(&statement, params)
            .await
            .map_err(sql_error)?;
        Ok(if rows == 1 {
            Fenced::Applied
        } else {
            Fenced::LeaseLost
        })
    }
}

/// A time for a `bigint` column: past `i64::MAX` it saturates (no record lives that long).
pub(crate) fn to_sql(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A connection the pool could not give: the server refused the login
/// ([`StoreError::Misconfigured`]), or could not be reached in time (unavailable).
pub(crate) fn pool_error(err: deadpool_postgres::PoolError) -> StoreError {
    if let deadpool_postgres::PoolError::Backend(backend) = &err {
        if let Some(misconfigured) = misconfiguration(backend) {
            return misconfigured;
        }
    }
    StoreError::Unavailable(Box::new(err))
}

/// PostgreSQL's codes (SQLSTATE) for a request refused because the database is not set up
/// for this function: no such table (or column), no privilege, a login refused, no such
/// database. No retry can help.
const MISCONFIGURED_STATES: [&str; 6] = ["42P01", "42703", "42501", "28P01", "28000", "3D000"];

/// The misconfiguration `err` shows, if it shows one, naming the table when the server did
/// (`relation "..." does not exist`).
fn misconfiguration(err: &tokio_postgres::Error) -> Option<StoreError> {
    let state = err.code()?.code();
    if !MISCONFIGURED_STATES.contains(&state) {
        return None;
    }
    let db = err.as_db_error();
    let message = db.map_or_else(|| err.to_string(), |db| db.message().to_string());
    let table = db
        .and_then(|db| db.table().map(str::to_string))
        .or_else(|| {
            let quoted = message.split('"').nth(1)?;
            message.starts_with("relation ").then(|| quoted.to_string())
        })
        .unwrap_or_default();
    Some(StoreError::Misconfigured(Misconfiguration::new(
        "PostgreSQL",
        table,
        state,
        message,
    )))
}

/// The one place a PostgreSQL error is classified: the database not set up for this
/// function ([`StoreError::Misconfigured`]: a missing table, a privilege or login refused);
/// a data exception (class 22: text the server cannot store, a number out of range) is the
/// request's fault; anything else leaves the store unavailable.
pub(crate) fn sql_error(err: tokio_postgres::Error) -> StoreError {
    if let Some(misconfigured) = misconfiguration(&err) {
        return misconfigured;
    }
    if err
        .code()
        .is_some_and(|state| state.code().starts_with("22"))
    {
        return StoreError::InvalidRequest {
            write_index: None,
            reason: Box::new(err),
        };
    }
    StoreError::Unavailable(Box::new(err))
}

/// The record in `row` from column `first` on ([`table::COLUMNS`]), `None` when the row has
/// no record (a left join that found none).
pub(crate) fn parse(
    key: &IdempotencyKey,
    row: &Row,
    first: usize,
) -> Result<Option<Record>, StoreError> {
    let malformed = |reason: String| StoreError::Malformed {
        key: key.as_str().to_string(),
        reason,
    };
    let column = |i: usize| first + i;
    let read_err = |err: tokio_postgres::Error| malformed(format!("unreadable column: {err}"));
    let Some(status_text) = row
        .try_get::<_, Option<String>>(column(0))
        .map_err(read_err)?
    else {
        return Ok(None);
    };
    let status = Status::parse(&status_text)
        .ok_or_else(|| malformed(format!("unknown status {status_text:?}")))?;
    let unsigned = |name: &str, value: i64| {
        u64::try_from(value).map_err(|_| malformed(format!("{name} is negative: {value}")))
    };
    let expiration: i64 = row.try_get(column(1)).map_err(read_err)?;
    let lease: Option<i64> = row.try_get(column(2)).map_err(read_err)?;
    Ok(Some(Record {
        key: key.clone(),
        status,
        expiration_secs: unsigned("expiration", expiration)?,
        lease_expiration_ms: lease
            .map(|ms| unsigned("in_progress_expiration", ms))
            .transpose()?,
        owner: row
            .try_get::<_, Option<String>>(column(3))
            .map_err(read_err)?
            .map(OwnerToken::new),
        data: row.try_get(column(4)).map_err(read_err)?,
        validation: row.try_get(column(5)).map_err(read_err)?,
    }))
}

impl Store for PostgresStore {
    async fn acquire(&self, request: &AcquireRequest) -> Result<Acquire, StoreError> {
        // The same item size limit, counted the same way, as DynamoDB.
        check_item_size(record_size_bytes(
            &AttributeNames::default(),
            &request.shape(),
        ))?;
        let row = self
            .query_one(
                &self.table.acquire_sql(),
                &AcquireArgs::new(request).params(),
            )
            .await?;
        let taken: bool = row.try_get(0).map_err(sql_error)?;
        if taken {
            return Ok(Acquire::Acquired);
        }
        let ours = |record: &Record| {
            record.status == Status::InProgress && record.owner.as_ref() == Some(&request.owner)
        };
        Ok(match parse(&request.key, &row, 1)? {
            // Sent again after a lost answer, the lease may already be ours. The row above is
            // the statement's snapshot, which can predate a takeover its conflict check saw:
            // only a fresh read can say the lease is still ours.
            Some(record) if ours(&record) => match self.get(&request.key).await? {
                Some(now) if ours(&now) => Acquire::Acquired,
                Some(now) => Acquire::Existing(now),
                None => Acquire::Contended,
            },
            Some(record) => Acquire::Existing(record),
            // Written and committed after this statement's snapshot: ask again.
            None => Acquire::Contended,
        })
    }

    async fn complete(&self, request: &CompleteRequest) -> Result<Fenced, StoreError> {
        check_item_size(completed_size_bytes(&AttributeNames::default(), request))?;
        let row = self
            .query_one(
                &self.table.complete_sql(),
                &[
                    &request.key.as_str(),
                    &request.owner.as_str(),
                    &request.status.as_str(),
                    &request.data,
                    &to_sql(request.expiration_secs),
                ],
            )
            .await?;
        let done: bool = row.try_get(0).map_err(sql_error)?;
        if done {
            return Ok(Fenced::Applied);
        }
        Ok(match parse(&request.key, &row, 1)? {
            Some(record) if is_our_completion(&record, request) => Fenced::Applied,
            _ => Fenced::LeaseLost,
        })
    }

    async fn extend(&self, request: &ExtendRequest) -> Result<Fenced, StoreError> {
        self.execute(
            &self.table.extend_sql(),
            &[
                &request.key.as_str(),
                &request.owner.as_str(),
                &to_sql(request.lease_expiration_ms),
                &to_sql(request.expiration_secs),
            ],
        )
        .await
    }

    async fn release(
        &self,
        key: &IdempotencyKey,
        owner: &OwnerToken,
    ) -> Result<Fenced, StoreError> {
        self.execute(&self.table.release_sql(), &[&key.as_str(), &owner.as_str()])
            .await
    }

    async fn get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        let client = self.pool.get().await.map_err(pool_error)?;
        let statement = client
            .prepare_cached(&self.table.get_sql())
            .await
            .map_err(sql_error)?;
        match client
            .query_opt(&statement, &[&key.as_str()])
            .await
            .map_err(sql_error)?
        {
            Some(row) => parse(key, &row, 0),
            None => Ok(None),
        }
    }

    /// One statement for all the keys (`WHERE id = ANY($1)`), on one connection.
    async fn get_many(&self, keys: &[IdempotencyKey]) -> Result<Vec<Record>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<&str> = keys.iter().map(IdempotencyKey::as_str).collect();
        let client = self.pool.get().await.map_err(pool_error)?;
        let statement = client
            .prepare_cached(&self.table.get_many_sql())
            .await
            .map_err(sql_error)?;
        let rows = client.query(&statement, &[&ids]).await.map_err(sql_error)?;
        // A row that cannot be read (a malformed record) is left absent: the conditional write
        // then meets it and fails its record alone.
        let mut found = Vec::with_capacity(rows.len());
        for row in &rows {
            let read = row
                .try_get::<_, String>(0)
                .map_err(sql_error)
                .and_then(|id| parse(&IdempotencyKey::from_stored(id), row, 1));
            found.extend(readable(read));
        }
        Ok(found)
    }
}
