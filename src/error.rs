//! [`Error`]: why one record was not processed, classified once: its
//! [`Outcome`], its stable `error_type`, and whether it is the request's own fault.

use crate::key::{IdempotencyKey, KeyError};
use crate::outcome::Outcome;
use crate::store::StoreError;

/// A boxed error from code this crate does not own (handlers, SDKs): tower's.
pub use tower::BoxError;

/// Why one record was not processed (or its result not stored). Each maps to an
/// [`Outcome`] and a stable [`error_type`](Error::error_type).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No idempotency key or payload hash could be derived from the record.
    #[error("could not derive the idempotency key")]
    Key(#[from] KeyError),
    /// The key was already used with a different payload.
    #[error("idempotency key {key} was already used with a different payload")]
    PayloadMismatch {
        /// The stored key.
        key: IdempotencyKey,
    },
    /// Another invocation holds the lease on the key.
    #[error("idempotency key {key} is being processed by another invocation")]
    InProgress {
        /// The stored key.
        key: IdempotencyKey,
        /// When the holder's lease ends, in epoch milliseconds, when the record said so (a
        /// record running in this same process: unknown).
        lease_ends_ms: Option<u64>,
    },
    /// The record kept changing while acquiring it.
    #[error("idempotency record {key} kept changing during acquire")]
    Contended {
        /// The stored key.
        key: IdempotencyKey,
    },
    /// The store failed.
    #[error("the store failed")]
    Store(#[from] StoreError),
    /// The handler returned an error.
    #[error("the record handler failed")]
    Handler(#[source] BoxError),
    /// An earlier record of the same invocation with the same key failed in the handler;
    /// this one was not run again.
    #[error("a record with idempotency key {key} failed earlier in this batch")]
    SameKeyFailed {
        /// The stored key.
        key: IdempotencyKey,
    },
    /// The handler panicked.
    #[error("the record handler panicked: {message}")]
    Panic {
        /// The panic message, if it was a string.
        message: String,
    },
    /// The lease was taken over before the result could be stored.
    #[error("the lease on {key} was lost before the result was stored")]
    LeaseLost {
        /// The stored key.
        key: IdempotencyKey,
    },
    /// The invocation deadline is too near (or past) to start the record.
    #[error("the invocation deadline is too near to start this record")]
    DeadlineNear,
    /// The record was still running when only the time to answer was left before the
    /// invocation deadline: it was stopped. What it did may have been applied (its record
    /// then replays it) or not (it runs again on redelivery, once its lease ends).
    #[error("the invocation deadline came before this record finished")]
    DeadlineReached,
    /// The handler failed with an error it marked [`Permanent`]: the failure is stored and
    /// the message acknowledged; duplicates get the stored error until the record expires.
    /// A sequence-guarded handler stores nothing: under
    /// [`SequenceRule::Newer`](crate::idempotent::SequenceRule::Newer) its event is skipped
    /// (this error, acknowledged); in turn the entity is read once, and the event is replayed
    /// when the entity is at or past it, else its handler's error is reported as it is.
    #[error("the record failed permanently: {message}")]
    Permanent {
        /// The error message (stored in the record).
        message: String,
        /// The failure was stored by an earlier delivery.
        replayed: bool,
    },
    /// A condition of one of the handler's writes failed: nothing was applied.
    #[error("condition of write {write_index} failed for {key}; nothing was applied")]
    ConditionFailed {
        /// The stored key.
        key: IdempotencyKey,
        /// Index into the handler's writes.
        write_index: usize,
    },
    /// The commit kept meeting concurrent transactions on the same items.
    #[error("the commit for {key} met a concurrent transaction; nothing was applied")]
    Conflict {
        /// The stored key.
        key: IdempotencyKey,
    },
    /// A sequence-guarded event arrived ahead of its turn: its entity is at `stored` (none
    /// yet: `None`), and the event is number `sequence`, more than one ahead. Nothing was
    /// written; worth retrying once the events in between are applied.
    #[error("event {sequence} of {entity} is ahead of its turn (the entity is at {stored:?}); nothing was written")]
    OutOfOrder {
        /// The entity: its table and key.
        entity: String,
        /// Where the entity's sequence stood.
        stored: Option<u64>,
        /// The event's place in the sequence.
        sequence: u64,
    },
}

impl Error {
    /// The handler's own doing rather than an outage: its writes or result were refused as
    /// invalid or too large, or a business condition of its writes failed. Not retried; in
    /// lease mode the lease is released.
    pub fn is_request_fault(&self) -> bool {
        match self {
            Error::ConditionFailed { .. } => true,
            Error::Store(store) => store.is_request_fault(),
            _ => false,
        }
    }
}

impl Error {
    /// The store is not set up for this function ([`StoreError::Misconfigured`]): no record
    /// can be processed until it is fixed, so the invocation fails as a whole.
    pub fn misconfiguration(&self) -> Option<&crate::store::Misconfiguration> {
        match self {
            Error::Store(store) => store.misconfiguration(),
            _ => None,
        }
    }

    /// The outcome this error gives the record.
    pub fn outcome(&self) -> Outcome {
        match self {
            Error::Key(_) | Error::PayloadMismatch { .. } | Error::ConditionFailed { .. } => {
                Outcome::Rejected
            }
            Error::InProgress { .. } | Error::Contended { .. } | Error::Conflict { .. } => {
                Outcome::Locked
            }
            Error::Permanent { .. } => Outcome::FailedPermanently,
            Error::Store(StoreError::Misconfigured(_)) => Outcome::Misconfigured,
            Error::Store(store) if store.is_request_fault() => Outcome::Rejected,
            // The handler's own statements may have aborted its transaction.
            Error::Store(StoreError::TransactionAborted(_)) => Outcome::Failed,
            Error::Store(StoreError::DeadlineReached { .. }) => Outcome::DeadlineNear,
            Error::Store(_) => Outcome::StoreUnavailable,
            Error::Handler(_) | Error::Panic { .. } | Error::SameKeyFailed { .. } => {
                Outcome::Failed
            }
            Error::LeaseLost { .. } => Outcome::LeaseLost,
            Error::DeadlineNear | Error::DeadlineReached => Outcome::DeadlineNear,
            Error::OutOfOrder { .. } => Outcome::OutOfOrder,
        }
    }

    /// The record was answered from an earlier delivery's stored record: a replayed
    /// permanent failure.
    pub fn is_replay(&self) -> bool {
        matches!(self, Error::Permanent { replayed: true, .. })
    }

    /// A stable name for Lambda diagnostics and logs.
    pub fn error_type(&self) -> &'static str {
        match self {
            Error::Key(_) => "Idempotency.KeyError",
            Error::PayloadMismatch { .. } => "Idempotency.PayloadMismatch",
            Error::InProgress { .. } => "Idempotency.InProgress",
            Error::Contended { .. } => "Idempotency.Contended",
            Error::Store(StoreError::ItemTooLarge { .. }) => "Idempotency.ResultTooLarge",
            Error::Store(StoreError::TransactionTooLarge { .. }) => {
                "Idempotency.TransactionTooLarge"
            }
            Error::Store(StoreError::InvalidWrite { .. }) => "Idempotency.InvalidWrite",
            Error::Store(StoreError::InvalidRequest { .. }) => "Idempotency.InvalidRequest",
            Error::Store(StoreError::TransactionAborted(_)) => "Idempotency.TransactionAborted",
            Error::Store(StoreError::Misconfigured(_)) => "Idempotency.Misconfigured",
            Error::Store(StoreError::DeadlineReached { .. }) => "Idempotency.DeadlineReached",
            Error::Permanent { .. } => "Idempotency.PermanentFailure",
            Error::ConditionFailed { .. } => "Idempotency.ConditionFailed",
            Error::Conflict { .. } => "Idempotency.TransactionConflict",
            Error::Store(_) => "Idempotency.StoreError",
            Error::Handler(_) => "Idempotency.HandlerError",
            Error::Panic { .. } => "Idempotency.HandlerPanic",
            Error::SameKeyFailed { .. } => "Idempotency.SameKeyFailed",
            Error::LeaseLost { .. } => "Idempotency.LeaseLost",
            Error::DeadlineNear => "Idempotency.DeadlineNear",
            Error::DeadlineReached => "Idempotency.DeadlineReached",
            Error::OutOfOrder { .. } => "Idempotency.OutOfOrder",
        }
    }
}

impl From<Error> for lambda_runtime::Diagnostic {
    fn from(err: Error) -> Self {
        lambda_runtime::Diagnostic {
            error_type: err.error_type().into(),
            error_message: error_chain(&err),
        }
    }
}

/// Marks a handler error as permanent: retrying cannot help (a card declined, an order for
/// an account that does not exist).
///
/// A handler returns `Err(Permanent::new(err).into())` (or `Err(Permanent::new(err))` when
/// its error type is `Permanent`). The failure is then stored in the record, the message is
/// acknowledged instead of retried, and duplicates get the stored error until the record
/// expires ([`Outcome::FailedPermanently`]). Other errors are retryable: the lease is
/// released and the record reported for retry. Sequence-guarded handlers store nothing: see
/// [`Error::Permanent`].
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct Permanent(BoxError);

impl Permanent {
    /// Wraps `err` as a permanent failure.
    pub fn new(err: impl Into<BoxError>) -> Self {
        Self(err.into())
    }

    /// The wrapped error.
    pub fn into_inner(self) -> BoxError {
        self.0
    }
}

/// The error's message followed by its sources, `: `-separated.
pub(crate) fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
