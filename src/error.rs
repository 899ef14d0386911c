//! Errors: [`Error`] for one record, [`BatchError`] for the invocation.

use crate::key::{IdempotencyKey, KeyError};
use crate::outcome::Outcome;
use crate::store::StoreError;

/// A boxed error from code this crate does not own (handlers, SDKs).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

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
    },
    /// The record kept changing while acquiring it.
    #[error("idempotency record {key} kept changing during acquire")]
    Contended {
        /// The stored key.
        key: IdempotencyKey,
    },
    /// The store failed.
    #[error("the idempotency store failed")]
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
    /// The handler's result could not be serialized, or a stored result deserialized.
    #[error("the result could not be serialized or deserialized")]
    Codec(#[source] serde_json::Error),
}

impl Error {
    /// The outcome this error gives the record.
    pub fn outcome(&self) -> Outcome {
        match self {
            Error::Key(_) | Error::PayloadMismatch { .. } => Outcome::Rejected,
            Error::InProgress { .. } | Error::Contended { .. } => Outcome::Locked,
            Error::Store(StoreError::ItemTooLarge { .. }) => Outcome::Failed,
            Error::Store(_) => Outcome::StoreUnavailable,
            Error::Handler(_)
            | Error::Panic { .. }
            | Error::Codec(_)
            | Error::SameKeyFailed { .. } => Outcome::Failed,
            Error::LeaseLost { .. } => Outcome::LeaseLost,
            Error::DeadlineNear => Outcome::DeadlineNear,
        }
    }

    /// A stable name for Lambda diagnostics and logs.
    pub fn error_type(&self) -> &'static str {
        match self {
            Error::Key(_) => "Idempotency.KeyError",
            Error::PayloadMismatch { .. } => "Idempotency.PayloadMismatch",
            Error::InProgress { .. } => "Idempotency.InProgress",
            Error::Contended { .. } => "Idempotency.Contended",
            Error::Store(StoreError::ItemTooLarge { .. }) => "Idempotency.ResultTooLarge",
            Error::Store(_) => "Idempotency.StoreError",
            Error::Handler(_) => "Idempotency.HandlerError",
            Error::Panic { .. } => "Idempotency.HandlerPanic",
            Error::SameKeyFailed { .. } => "Idempotency.SameKeyFailed",
            Error::LeaseLost { .. } => "Idempotency.LeaseLost",
            Error::DeadlineNear => "Idempotency.DeadlineNear",
            Error::Codec(_) => "Idempotency.CodecError",
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

/// Why a whole invocation failed: SQS then retries the whole batch.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BatchError {
    /// Records that need a retry have no `messageId`, so they cannot be listed in
    /// `batchItemFailures` (an empty `itemIdentifier` would make SQS retry the whole batch
    /// anyway, silently). The invocation fails instead; records that completed replay their
    /// stored results when the batch comes back.
    #[error("{count} record(s) to retry have no messageId; failing the invocation so SQS retries the batch")]
    UnreportableFailures {
        /// How many such records.
        count: usize,
    },
}

impl BatchError {
    /// A stable name for Lambda diagnostics and logs.
    pub fn error_type(&self) -> &'static str {
        match self {
            BatchError::UnreportableFailures { .. } => "Idempotency.UnreportableFailures",
        }
    }
}

impl From<BatchError> for lambda_runtime::Diagnostic {
    fn from(err: BatchError) -> Self {
        lambda_runtime::Diagnostic {
            error_type: err.error_type().into(),
            error_message: error_chain(&err),
        }
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
