//! The [`Store`] trait: the four primitives the protocol needs from a lock and result store.

use std::future::Future;
use std::sync::Arc;
use std::time::SystemTime;

use crate::error::BoxError;
use crate::key::IdempotencyKey;
use crate::record::{OwnerToken, Record, Status};

/// A request to take the lease on a key.
#[derive(Debug, Clone)]
pub struct AcquireRequest {
    /// The key to lock.
    pub key: IdempotencyKey,
    /// The new holder's fencing token.
    pub owner: OwnerToken,
    /// The current time: the store takes over a record that is expired or whose lease has
    /// elapsed at this instant.
    pub now: SystemTime,
    /// When the lease ends, in epoch milliseconds.
    pub lease_expiration_ms: u64,
    /// When the in-progress record expires, in epoch seconds (never before the lease ends).
    pub expiration_secs: u64,
    /// The payload hash, if payload validation is on.
    pub validation: Option<String>,
}

impl AcquireRequest {
    /// The in-progress record this acquire writes.
    pub(crate) fn record(&self) -> Record {
        Record {
            key: self.key.clone(),
            status: Status::InProgress,
            expiration_secs: self.expiration_secs,
            lease_expiration_ms: Some(self.lease_expiration_ms),
            owner: Some(self.owner.clone()),
            data: None,
            validation: self.validation.clone(),
        }
    }
}

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

/// A request to mark a held record completed (or permanently failed) with its result.
#[derive(Debug, Clone)]
pub struct CompleteRequest {
    /// The key.
    pub key: IdempotencyKey,
    /// The holder's fencing token: completion only succeeds if it is still the holder.
    pub owner: OwnerToken,
    /// [`Status::Completed`], or [`Status::Failed`] for a permanent failure.
    pub status: Status,
    /// The result as JSON (for a permanent failure: the error message as a JSON string).
    pub data: String,
    /// When the record expires, in epoch seconds.
    pub expiration_secs: u64,
}

/// A request to extend a held lease (heartbeat).
#[derive(Debug, Clone)]
pub struct ExtendRequest {
    /// The key.
    pub key: IdempotencyKey,
    /// The holder's fencing token.
    pub owner: OwnerToken,
    /// The new end of the lease, in epoch milliseconds.
    pub lease_expiration_ms: u64,
    /// The new record expiry, in epoch seconds (never before the lease ends).
    pub expiration_secs: u64,
}

/// A request to commit a handler's writes together with the record's final state, in one
/// transaction.
#[derive(Debug, Clone)]
pub struct CommitRequest {
    /// The key.
    pub key: IdempotencyKey,
    /// Lease mode: the lease holder's token. Optimistic mode: a fresh token that marks this
    /// commit as ours if its response is lost and it is sent again.
    pub owner: OwnerToken,
    /// The current time (optimistic mode takes over expired records and elapsed leases at
    /// this instant).
    pub now: SystemTime,
    /// [`Status::Completed`], or [`Status::Failed`] for a permanent failure.
    pub status: Status,
    /// The result as JSON.
    pub data: String,
    /// When the record expires, in epoch seconds.
    pub expiration_secs: u64,
    /// The payload hash, if payload validation is on.
    pub validation: Option<String>,
    /// The handler's writes, applied with the record or not at all.
    pub writes: Vec<crate::write::Write>,
}

impl CommitRequest {
    /// The final record this commit writes, with the payload hash `validation` (the
    /// request's for an optimistic commit, the held record's for a lease-mode one).
    pub(crate) fn record(&self, validation: Option<String>) -> Record {
        Record {
            key: self.key.clone(),
            status: self.status,
            expiration_secs: self.expiration_secs,
            lease_expiration_ms: None,
            owner: Some(self.owner.clone()),
            data: Some(self.data.clone()),
            validation,
        }
    }
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

/// The record shows that this very completion was applied before: same status, owner and
/// data (a resent completion whose first answer was lost).
pub(crate) fn is_our_completion(record: &Record, request: &CompleteRequest) -> bool {
    record.status == request.status
        && record.owner.as_ref() == Some(&request.owner)
        && record.data.as_deref() == Some(request.data.as_str())
}

/// A fault of the store: it could not answer. Expected outcomes (a held lock, a lost lease)
/// are never errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The backend could not be reached or failed the request.
    #[error("the idempotency store is unavailable")]
    Unavailable(#[source] BoxError),
    /// A stored item does not have the record's shape.
    #[error("stored record {key} is malformed: {reason}")]
    Malformed {
        /// The stored key.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A handler's write cannot be turned into a request.
    #[error("write {write_index} is invalid: {reason}")]
    InvalidWrite {
        /// Index into the handler's writes.
        write_index: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// The transaction would exceed the store's limits.
    #[error("the transaction has {items} items ({size_bytes} bytes); the limits are {item_limit} items and {limit_bytes} bytes")]
    TransactionTooLarge {
        /// Items, the record included.
        items: usize,
        /// The item limit.
        item_limit: usize,
        /// Approximate size.
        size_bytes: usize,
        /// The size limit.
        limit_bytes: usize,
    },
    /// The item would exceed the store's item size limit.
    #[error("the record is {size_bytes} bytes, over the store's limit of {limit_bytes}")]
    ItemTooLarge {
        /// The item's size.
        size_bytes: usize,
        /// The limit.
        limit_bytes: usize,
    },
    /// The store refused the request as invalid (DynamoDB's `ValidationException`, at the
    /// top level or as a transaction's cancellation reason): a bad expression, two
    /// operations on one item, an item over the limit. Sending it again cannot help.
    #[error("the store refused the request as invalid (write {write_index:?})")]
    InvalidRequest {
        /// Index into the handler's writes, when the store named one.
        write_index: Option<usize>,
        /// The store's explanation.
        #[source]
        reason: BoxError,
    },
}

impl StoreError {
    /// A fault that may pass: sending the same request again may succeed (the store was
    /// unreachable, throttled or failed). The one place that decides what is retried.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }

    /// The request itself is at fault (a handler's invalid or oversized writes, a result
    /// over the item limit): the record is rejected, not retried.
    pub fn is_request_fault(&self) -> bool {
        matches!(
            self,
            StoreError::ItemTooLarge { .. }
                | StoreError::TransactionTooLarge { .. }
                | StoreError::InvalidWrite { .. }
                | StoreError::InvalidRequest { .. }
        )
    }
}

/// A lock and result store for idempotency records.
///
/// Implementations must give every call the semantics below, which the shared contract test
/// suite checks for [`InMemoryStore`](crate::InMemoryStore) and
/// [`DynamoDbStore`](crate::DynamoDbStore) alike. Expiry is always checked against the
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
}

/// A store that can commit a handler's writes with the record in one transaction
/// ([`DynamoDbStore`](crate::DynamoDbStore)).
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
