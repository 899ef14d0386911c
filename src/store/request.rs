//! The requests a [`Store`](super::Store) answers: one per record transition.

use std::time::SystemTime;

use crate::key::IdempotencyKey;
use crate::record::{OwnerToken, Record, Status};
use crate::store::Write;

/// A record's attributes as their size is counted, borrowed from a request (the
/// expiry is always there, a number at its largest).
pub(crate) struct RecordShape<'a> {
    pub(crate) key: &'a str,
    pub(crate) status: Status,
    pub(crate) leased: bool,
    pub(crate) owner: Option<&'a str>,
    pub(crate) data: Option<&'a str>,
    pub(crate) validation: Option<&'a str>,
}

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
    /// The in-progress record this acquire writes, as its size is counted.
    pub(crate) fn shape(&self) -> RecordShape<'_> {
        RecordShape {
            key: self.key.as_str(),
            status: Status::InProgress,
            leased: true,
            owner: Some(self.owner.as_str()),
            data: None,
            validation: self.validation.as_deref(),
        }
    }

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
    /// The current time (stores that garbage-collect by a time-to-live measure it from here,
    /// not from their own clock).
    pub now: SystemTime,
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
    /// The current time (stores that garbage-collect by a time-to-live measure it from here,
    /// not from their own clock).
    pub now: SystemTime,
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
    pub writes: Vec<Write>,
}

impl CommitRequest {
    /// The final record this commit writes with the request's payload hash, as its size is
    /// counted.
    #[cfg(any(test, feature = "testing", feature = "dynamodb"))]
    pub(crate) fn shape(&self) -> RecordShape<'_> {
        RecordShape {
            key: self.key.as_str(),
            status: self.status,
            leased: false,
            owner: Some(self.owner.as_str()),
            data: Some(&self.data),
            validation: self.validation.as_deref(),
        }
    }

    /// The final record this commit writes, with the payload hash `validation` (the
    /// request's for an optimistic commit, the held record's for a lease-mode one). For the
    /// in-memory emulator (with the `testing` feature).
    #[cfg(any(test, feature = "testing"))]
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

/// The record shows that this very completion was applied before: same status, owner and
/// data (a resent completion whose first answer was lost).
pub(crate) fn is_our_completion(record: &Record, request: &CompleteRequest) -> bool {
    record.status == request.status
        && record.owner.as_ref() == Some(&request.owner)
        && record.data.as_deref() == Some(request.data.as_str())
}
