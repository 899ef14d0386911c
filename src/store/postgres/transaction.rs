//! [`PgTransaction`]: the transaction a handler writes in, and [`PostgresStore`]'s
//! [`TransactionScope`]: begin, acquire inside, complete and commit, roll back.

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{ClientWrapper, Object};
use tokio::sync::{Mutex, MutexGuard, OwnedSemaphorePermit};

use super::table::AcquireArgs;
use super::{parse, pool_error, sql_error, to_sql, PostgresStore};
use crate::record::{Record, Status};
use crate::store::item_size::{check_item_size, completed_size_bytes, record_size_bytes};
use crate::store::{
    is_our_completion, Acquire, AcquireRequest, AttributeNames, Commit, CompleteRequest,
    Misconfiguration, StoreError, TransactionScope,
};

/// PostgreSQL's `lock_not_available`: `lock_timeout` passed while waiting on a row.
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// The open transaction a handler writes in (a handle: clones share it). Its writes commit
/// with the record's final state, or not at all.
///
/// Run statements through [`client`](Self::client). Never `COMMIT` or `ROLLBACK` it
/// yourself: the layer does, after the handler returns. Dropped without either (a cancelled
/// or killed invocation), its connection is closed rather than returned to the pool, so the
/// server rolls it back.
#[derive(Clone)]
pub struct PgTransaction {
    shared: Arc<Shared>,
}

struct Shared {
    /// `None` once committed or rolled back.
    client: Mutex<Option<Open>>,
}

/// An open transaction's connection, and its place among the transactions the store admits
/// (given back with the connection).
struct Open {
    object: Object,
    _admitted: OwnedSemaphorePermit,
}

impl Open {
    /// Closes the connection (the server rolls back whatever is open on it) instead of
    /// handing it back to the pool; then the transaction's place is given back.
    fn close(self) {
        drop(Object::take(self.object));
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(open) = self.client.get_mut().take() {
            // Still open: never hand a connection in the middle of a transaction to the pool.
            open.close();
        }
    }
}

impl std::fmt::Debug for PgTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgTransaction").finish_non_exhaustive()
    }
}

/// The transaction was already committed or rolled back (a handle kept past the handler).
#[derive(Debug, thiserror::Error)]
#[error("the idempotency transaction has already committed or rolled back")]
#[non_exhaustive]
pub struct TransactionFinished;

/// The connection of an open [`PgTransaction`], held for the statements of one step (other
/// users of the same transaction wait).
pub struct TransactionClient<'a>(MutexGuard<'a, Option<Open>>);

impl std::fmt::Debug for TransactionClient<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransactionClient").finish_non_exhaustive()
    }
}

impl Deref for TransactionClient<'_> {
    type Target = ClientWrapper;

    fn deref(&self) -> &ClientWrapper {
        &self
            .0
            .as_ref()
            .expect("a TransactionClient is only made while the transaction is open")
            .object
    }
}

impl PgTransaction {
    /// The transaction's connection (a `tokio_postgres::Client` with `prepare_cached`).
    pub async fn client(&self) -> Result<TransactionClient<'_>, TransactionFinished> {
        let guard = self.shared.client.lock().await;
        if guard.is_none() {
            return Err(TransactionFinished);
        }
        Ok(TransactionClient(guard))
    }

    async fn lock(&self) -> Result<MutexGuard<'_, Option<Open>>, StoreError> {
        let guard = self.shared.client.lock().await;
        if guard.is_none() {
            return Err(StoreError::TransactionAborted(Box::new(
                TransactionFinished,
            )));
        }
        Ok(guard)
    }
}

/// Ends the transaction in `guard` with `sql` (`COMMIT` or `ROLLBACK`): the connection goes
/// back to the pool if that worked, and is closed if not; either way the transaction's place
/// is given back. It stays in the guard until the answer came, so a future dropped while
/// waiting closes it too.
async fn end(
    guard: &mut MutexGuard<'_, Option<Open>>,
    sql: &str,
) -> Result<(), tokio_postgres::Error> {
    let Some(open) = guard.as_ref() else {
        return Ok(());
    };
    let ended = open.object.batch_execute(sql).await;
    let open = guard.take().expect("still held");
    match ended {
        Ok(()) => Ok(()),
        Err(err) => {
            open.close();
            Err(err)
        }
    }
}

fn whole_millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .clamp(1, i32::MAX as u64)
}

impl TransactionScope for PostgresStore {
    type Transaction = PgTransaction;

    /// Refuses a pool whose max size (read when the store was built) is below 2: it leaves no
    /// connection for a transaction besides the one kept for the lease calls.
    fn check_transactions(&self) -> Result<(), StoreError> {
        if self.transactions_at_once() > 0 {
            return Ok(());
        }
        Err(StoreError::Misconfigured(Misconfiguration::new(
            "PostgreSQL",
            self.table(),
            "PoolTooSmall",
            format!(
                "a PostgreSQL pool of max size {} leaves no connection for handlers' \
                 transactions besides the one kept for lease calls: build it with a max size \
                 of at least 2 (the transactions to run at once, plus one)",
                self.pool_max_size
            ),
        )))
    }

    async fn begin(&self, hold_for: Duration) -> Result<PgTransaction, StoreError> {
        let waited = tokio::time::Instant::now();
        // A place among the transactions the store admits, then a connection: lease calls
        // never wait behind transactions for one. Both waits end at the deadline.
        let admitted = tokio::time::timeout(hold_for, async {
            let admitted = self.admit_transaction().await?;
            let object = self.pool.get().await.map_err(pool_error)?;
            Ok(Open {
                object,
                _admitted: admitted,
            })
        })
        .await;
        let open = match admitted {
            Ok(open) => open?,
            Err(_elapsed) => {
                return Err(pool_error(deadpool_postgres::PoolError::Timeout(
                    deadpool_postgres::TimeoutType::Wait,
                )))
            }
        };
        let ms = whole_millis(hold_for.saturating_sub(waited.elapsed()));
        // A wait on another transaction's row ends first (`55P03`: in flight elsewhere),
        // before the statement's own timeout (`57014`, which reads as an outage).
        let lock_ms = (ms - ms / 5).max(1);
        // The connection is owned by the transaction before BEGIN is sent: dropped from here
        // on (a cancelled invocation, a heartbeat that lost the lease), it is closed, never
        // handed back to the pool inside a transaction.
        let shared = Arc::new(Shared {
            client: Mutex::new(Some(open)),
        });
        // READ COMMITTED whatever the role's default: a duplicate waiting on a row must see
        // the row's committed version when it gets it. Bounded waits: on another
        // transaction's row, on a statement, and on this transaction left idle (a frozen or
        // killed function's transaction ends there).
        let begun = {
            let guard = shared.client.lock().await;
            let open = guard.as_ref().expect("just stored");
            open.object
                .batch_execute(&format!(
                    "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL lock_timeout = {lock_ms}; \
                     SET LOCAL statement_timeout = {ms}; \
                     SET LOCAL idle_in_transaction_session_timeout = {ms}"
                ))
                .await
        };
        // A connection in an unknown state is not handed back to the pool: dropping `shared`
        // closes it.
        begun.map_err(sql_error)?;
        Ok(PgTransaction { shared })
    }

    async fn acquire_in(
        &self,
        transaction: &PgTransaction,
        request: &AcquireRequest,
    ) -> Result<Acquire, StoreError> {
        check_item_size(record_size_bytes(
            &AttributeNames::default(),
            &request.shape(),
        ))?;
        let guard = transaction.lock().await?;
        let client = &guard.as_ref().expect("locked while open").object;
        let statement = client
            .prepare_cached(&self.table.acquire_sql())
            .await
            .map_err(sql_error)?;
        let answer = client
            .query_one(&statement, &AcquireArgs::new(request).params())
            .await;
        let row = match answer {
            Ok(row) => row,
            Err(err) if err.code().is_some_and(|c| c.code() == LOCK_NOT_AVAILABLE) => {
                // Another transaction has held the row all this time: in flight elsewhere.
                return Ok(Acquire::Existing(Record {
                    key: request.key.clone(),
                    status: Status::InProgress,
                    expiration_secs: request.expiration_secs,
                    lease_expiration_ms: None,
                    owner: None,
                    data: None,
                    validation: None,
                }));
            }
            Err(err) => return Err(sql_error(err)),
        };
        if row.try_get::<_, bool>(0).map_err(sql_error)? {
            return Ok(Acquire::Acquired);
        }
        Ok(match parse(&request.key, &row, 1)? {
            Some(record) => Acquire::Existing(record),
            None => Acquire::Contended,
        })
    }

    async fn complete_in(
        &self,
        transaction: &PgTransaction,
        request: &CompleteRequest,
    ) -> Result<Commit, StoreError> {
        check_item_size(completed_size_bytes(&AttributeNames::default(), request))?;
        let mut guard = transaction.lock().await?;
        let client = &guard.as_ref().expect("locked while open").object;
        let statement = client
            .prepare_cached(&self.table.complete_sql())
            .await
            .map_err(|err| StoreError::TransactionAborted(Box::new(err)));
        let answer = match statement {
            Ok(statement) => client
                .query_one(
                    &statement,
                    &[
                        &request.key.as_str(),
                        &request.owner.as_str(),
                        &request.status.as_str(),
                        &request.data,
                        &to_sql(request.expiration_secs),
                    ],
                )
                .await
                .map_err(|err| StoreError::TransactionAborted(Box::new(err))),
            Err(err) => Err(err),
        };
        let row = match answer {
            Ok(row) => row,
            Err(err) => {
                // The transaction is aborted (or its connection gone): nothing is applied.
                let _ = end(&mut guard, "ROLLBACK").await;
                return Err(err);
            }
        };
        let done = row.try_get::<_, bool>(0).unwrap_or(false);
        if !done {
            let record = parse(&request.key, &row, 1);
            let _ = end(&mut guard, "ROLLBACK").await;
            return Ok(Commit::RecordRefused(record?));
        }
        match end(&mut guard, "COMMIT").await {
            Ok(()) => Ok(Commit::Applied),
            // The server answered: it did not commit (a serialization failure, a deferred
            // constraint).
            Err(err) if err.code().is_some() => Err(StoreError::TransactionAborted(Box::new(err))),
            // No answer: the record tells whether the commit landed.
            Err(err) => match crate::store::Store::get(self, &request.key).await {
                Ok(Some(record)) if is_our_completion(&record, request) => Ok(Commit::Applied),
                _ => Err(StoreError::Unavailable(Box::new(err))),
            },
        }
    }

    async fn rollback(&self, transaction: &PgTransaction) {
        let mut guard = transaction.shared.client.lock().await;
        let _ = end(&mut guard, "ROLLBACK").await;
    }
}
