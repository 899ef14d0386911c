//! The [`Store`] trait: the four primitives the protocol needs from a lock and result store.

use std::future::Future;
use std::sync::Arc;
use std::time::SystemTime;

use crate::error::BoxError;
use crate::key::IdempotencyKey;
use crate::record::{OwnerToken, Record};

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

/// A request to mark a held record completed with its result.
#[derive(Debug, Clone)]
pub struct CompleteRequest {
    /// The key.
    pub key: IdempotencyKey,
    /// The holder's fencing token: completion only succeeds if it is still the holder.
    pub owner: OwnerToken,
    /// The result as JSON.
    pub data: String,
    /// When the completed record expires, in epoch seconds.
    pub expiration_secs: u64,
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
    /// The item would exceed the store's item size limit.
    #[error("the record is {size_bytes} bytes, over the store's limit of {limit_bytes}")]
    ItemTooLarge {
        /// The item's size.
        size_bytes: usize,
        /// The limit.
        limit_bytes: usize,
    },
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
    /// `request.now`. Otherwise returns the existing record.
    fn acquire(
        &self,
        request: &AcquireRequest,
    ) -> impl Future<Output = Result<Acquire, StoreError>> + Send;

    /// Marks the record completed with `request.data`, only if it is in progress and held by
    /// `request.owner`.
    fn complete(
        &self,
        request: &CompleteRequest,
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
