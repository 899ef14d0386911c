//! Stores of idempotency records.
//!
//! This module has the [`Store`] trait (and [`TransactionalStore`] for
//! handlers whose writes commit with the record), the requests and answers they exchange,
//! the limits every store enforces, and the stores themselves: [`InMemoryStore`] (embedded;
//! transactional with the `testing` feature) and, with the `dynamodb` feature (on by default), [`DynamoDbStore`]; with the `redis`
//! feature, `RedisStore` (module `redis`); with the `postgres` feature, `PostgresStore` (module
//! `postgres`).

mod attribute_names;
#[cfg(feature = "dynamodb")]
mod dynamodb;
mod error;
mod guarded;
pub(crate) mod item_size;
mod memory;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
mod request;
mod transaction_scope;
mod write;

use std::future::Future;
use std::sync::Arc;

use crate::key::IdempotencyKey;
use crate::record::{OwnerToken, Record};

#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use self::postgres::PostgresStore;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use self::redis::RedisStore;
pub use attribute_names::AttributeNames;
#[cfg(feature = "dynamodb")]
#[cfg_attr(docsrs, doc(cfg(feature = "dynamodb")))]
pub use dynamodb::DynamoDbStore;
pub use error::{Misconfiguration, StoreError};
pub use guarded::{Guarded, GuardedWrite};
pub use item_size::{MAX_ITEM_BYTES, MAX_TRANSACTION_BYTES, MAX_TRANSACTION_ITEMS};
pub use memory::InMemoryStore;
pub(crate) use request::is_our_completion;
pub use request::{AcquireRequest, CommitRequest, CompleteRequest, ExtendRequest};
pub use transaction_scope::TransactionScope;
pub use write::{Attr, Item, Write, WriteKind, MAX_NESTING};

/// The answer to an acquire. A failed condition is an expected outcome, not an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquire {
    /// The lease is ours.
    Acquired,
    /// A record exists that cannot be taken over at the request's `now` (as the store saw it).
    Existing(Record),
    /// The condition failed, but the record was gone when it was read back: it changed in
    /// between. The caller may try again.
    Contended,
}

/// The answer to a transactional commit. Refusals are expected outcomes, not errors.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Commit {
    /// The writes and the record were committed.
    Applied,
    /// The record's condition failed and nothing was applied. Carries the record as it is
    /// now (`None` if there is none): lease mode, a lost lease, unless the record shows that
    /// this very commit was applied before (its response was lost); optimistic mode, a live
    /// record written by someone else (or by this commit before).
    RecordRefused(Option<Record>),
    /// A business condition of the handler's write at this index failed; nothing was
    /// applied. Not worth retrying.
    ConditionFailed {
        /// Index into [`CommitRequest::writes`].
        write_index: usize,
    },
    /// Another transaction touched the same items at the same time; nothing was applied.
    /// Worth retrying.
    Conflict,
}

/// The answer to an owner-fenced write (complete or release).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fenced {
    /// The write was applied: the caller still held the lease.
    Applied,
    /// The write was refused: the record is no longer in progress under the caller's token
    /// (its lease was taken over, or it is gone). Nothing was changed.
    LeaseLost,
}

/// A lock and result store for idempotency records.
///
/// Implementations must give every call the semantics below, which the shared contract test
/// suite checks for [`InMemoryStore`] and
/// [`DynamoDbStore`] alike. Expiry is always checked against the
/// times passed in, never left to the store's own garbage collection.
pub trait Store: Send + Sync + 'static {
    /// Writes an in-progress record for `request.key` held by `request.owner`, if no record
    /// exists, or the existing one [can be taken over](Record::can_be_taken_over) at
    /// `request.now`. Otherwise returns the existing record, except when that record is in
    /// progress under `request.owner` itself: an earlier send of this acquire was applied
    /// and its answer lost, so the lease is ours ([`Acquire::Acquired`]).
    fn acquire(
        &self,
        request: &AcquireRequest,
    ) -> impl Future<Output = Result<Acquire, StoreError>> + Send;

    /// Marks the record completed with `request.data`, only if it is in progress and held by
    /// `request.owner`. Idempotent: when the record already has `request.status` and
    /// `request.data` under `request.owner` (an earlier send was applied and its answer
    /// lost), the answer is [`Fenced::Applied`] too. Refuses data that would put the record over the item limit
    /// with [`StoreError::ItemTooLarge`], changing nothing.
    fn complete(
        &self,
        request: &CompleteRequest,
    ) -> impl Future<Output = Result<Fenced, StoreError>> + Send;

    /// Moves the lease end of a record that is in progress and held by `request.owner`.
    fn extend(
        &self,
        request: &ExtendRequest,
    ) -> impl Future<Output = Result<Fenced, StoreError>> + Send;

    /// Deletes the record, only if it is in progress and held by `owner`.
    fn release(
        &self,
        key: &IdempotencyKey,
        owner: &OwnerToken,
    ) -> impl Future<Output = Result<Fenced, StoreError>> + Send;

    /// Reads the record with a strongly consistent read.
    fn get(
        &self,
        key: &IdempotencyKey,
    ) -> impl Future<Output = Result<Option<Record>, StoreError>> + Send;

    /// Reads the records of `keys` with strongly consistent reads, in as few calls as the
    /// store allows (DynamoDB: one `BatchGetItem` per 100 keys). Answers the records found, in
    /// any order, each once (a key asked twice is read once); a key without a record is absent
    /// from the answer, and so may be a key the store could not read in time (DynamoDB's
    /// unprocessed keys after its retries), or one whose record cannot be read (malformed) or
    /// whose read failed while others succeeded: a caller treats an absent key as "ask again
    /// with a conditional write", never as "no record". An error means nothing was read.
    ///
    /// The default reads the keys one `get` each, all at once. A store that wraps another
    /// should forward this call too, or its batches are read key by key.
    fn get_many(
        &self,
        keys: &[IdempotencyKey],
    ) -> impl Future<Output = Result<Vec<Record>, StoreError>> + Send {
        get_each(self, keys.iter().collect())
    }
}

/// The records of `keys` (each once), one [`Store::get`] each, all at once: `get_many`'s
/// default, and a store's own when it cannot read them together.
pub(crate) async fn get_each<S: Store + ?Sized>(
    store: &S,
    keys: std::collections::BTreeSet<&IdempotencyKey>,
) -> Result<Vec<Record>, StoreError> {
    let reads = futures_util::future::join_all(keys.into_iter().map(|k| store.get(k))).await;
    read_together(reads.into_iter().map(|read| read.map(Vec::from_iter)))
}

/// What `get_many` answers from the reads it made (one per key, or per call of many keys):
/// every record read, a failed read's keys left absent (asked again with conditional
/// writes) without costing the others theirs; an error only when no read succeeded.
pub(crate) fn read_together(
    reads: impl IntoIterator<Item = Result<Vec<Record>, StoreError>>,
) -> Result<Vec<Record>, StoreError> {
    let (mut found, mut failed, mut any_read) = (Vec::new(), None, false);
    for read in reads {
        match read {
            // The first read's records are kept as they are, not moved one by one.
            Ok(records) if !any_read => {
                any_read = true;
                found = records;
            }
            Ok(records) => found.extend(records),
            Err(err) => {
                tracing::warn!(error = %err, "pre-check: a read failed; its records go on to their conditional writes");
                failed = Some(err);
            }
        }
    }
    match failed {
        Some(err) if !any_read => Err(err),
        _ => Ok(found),
    }
}

/// A record `get_many` read back, or `None` when it cannot be read (malformed, another
/// type): it is left out of the answer, and the conditional write then meets it and fails its
/// record alone, not the lookup of the others.
#[cfg(any(feature = "dynamodb", feature = "redis", feature = "postgres"))]
pub(crate) fn readable(read: Result<Option<Record>, StoreError>) -> Option<Record> {
    read.unwrap_or_else(|err| {
        tracing::warn!(error = %err, "pre-check: a stored record cannot be read; its record goes on to its conditional write");
        None
    })
}

impl<S: Store> Store for Arc<S> {
    fn acquire(
        &self,
        request: &AcquireRequest,
    ) -> impl Future<Output = Result<Acquire, StoreError>> + Send {
        (**self).acquire(request)
    }

    fn complete(
        &self,
        request: &CompleteRequest,
    ) -> impl Future<Output = Result<Fenced, StoreError>> + Send {
        (**self).complete(request)
    }

    fn extend(
        &self,
        request: &ExtendRequest,
    ) -> impl Future<Output = Result<Fenced, StoreError>> + Send {
        (**self).extend(request)
    }

    fn release(
        &self,
        key: &IdempotencyKey,
        owner: &OwnerToken,
    ) -> impl Future<Output = Result<Fenced, StoreError>> + Send {
        (**self).release(key, owner)
    }

    fn get(
        &self,
        key: &IdempotencyKey,
    ) -> impl Future<Output = Result<Option<Record>, StoreError>> + Send {
        (**self).get(key)
    }

    fn get_many(
        &self,
        keys: &[IdempotencyKey],
    ) -> impl Future<Output = Result<Vec<Record>, StoreError>> + Send {
        (**self).get_many(keys)
    }
}

/// A store that can commit a handler's writes with the record in one transaction.
///
/// Implemented by [`DynamoDbStore`] (`TransactWriteItems`) and, with the `testing` feature
/// (a dev-dependency, for tests), by [`InMemoryStore`].
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot commit a handler's writes with its record",
    note = "handlers with writes (`with_writes()`) need a `TransactionalStore`: `DynamoDbStore`, or `InMemoryStore` with the crate's `testing` feature (add it to the dev-dependency for tests); a store that runs the handler in its own transaction (`PostgresStore`) takes `in_transaction()`"
)]
pub trait TransactionalStore: Store {
    /// Lease mode: sets the record to `request.status` with `request.data`, only if it is in
    /// progress and held by `request.owner`, together with `request.writes`.
    fn commit(
        &self,
        request: &CommitRequest,
    ) -> impl Future<Output = Result<Commit, StoreError>> + Send;

    /// Optimistic mode: writes the final record, only if no record exists or the existing
    /// one [can be taken over](Record::can_be_taken_over) at `request.now`, together with
    /// `request.writes`.
    fn commit_fresh(
        &self,
        request: &CommitRequest,
    ) -> impl Future<Output = Result<Commit, StoreError>> + Send;
}

impl<S: TransactionalStore> TransactionalStore for Arc<S> {
    fn commit(
        &self,
        request: &CommitRequest,
    ) -> impl Future<Output = Result<Commit, StoreError>> + Send {
        (**self).commit(request)
    }

    fn commit_fresh(
        &self,
        request: &CommitRequest,
    ) -> impl Future<Output = Result<Commit, StoreError>> + Send {
        (**self).commit_fresh(request)
    }
}
