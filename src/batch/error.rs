//! [`BatchError`]: why a whole batch invocation failed.

use crate::error::error_chain;
use crate::store::Misconfiguration;

/// Why a whole invocation failed: the source then retries the whole batch.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BatchError {
    /// Records that need a retry have no identifier (SQS `messageId`, a stream record's
    /// sequence number), so they cannot be listed in `batchItemFailures` (an empty
    /// `itemIdentifier` would make the source retry the whole batch anyway, silently). The invocation fails instead; records that completed replay their
    /// stored results when the batch comes back.
    #[error("{count} record(s) to retry have no item identifier; failing the invocation so the whole batch is retried")]
    UnreportableFailures {
        /// How many such records.
        count: usize,
    },
    /// The invocation had no more time before its deadline than a record needs to start
    /// (the processor's deadline margin), so none could run: the function's timeout is
    /// shorter than the margin. Reported once, as an error naming both figures, rather than
    /// as every record `deadline_near` until the messages are dead-lettered.
    #[error("the invocation had {left_ms} ms before its deadline, no more than the {margin_ms} ms a record needs to start (the deadline margin): raise the function's timeout (or lower the margin)")]
    DeadlineTooShort {
        /// The time the invocation had left when the batch began.
        left_ms: u64,
        /// The processor's deadline margin.
        margin_ms: u64,
    },
    /// The store is not set up for this function (a table that does not exist, denied
    /// access, wrong credentials): no record can be processed until it is fixed, and none is
    /// labelled a poison record for it. The invocation fails, so the source retries the
    /// whole batch; once the store is set up the batch is applied once. For a table of the
    /// handler's writes, only when no record of the batch could store its result.
    #[error("{0}; failing the invocation so that the batch is retried once it is fixed")]
    Misconfigured(Misconfiguration),
}

impl BatchError {
    /// A stable name for Lambda diagnostics and logs.
    pub fn error_type(&self) -> &'static str {
        match self {
            BatchError::UnreportableFailures { .. } => "Idempotency.UnreportableFailures",
            BatchError::DeadlineTooShort { .. } => "Idempotency.DeadlineTooShort",
            BatchError::Misconfigured(_) => "Idempotency.Misconfigured",
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
