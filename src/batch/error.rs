//! [`BatchError`]: why a whole batch invocation failed.

use crate::error::error_chain;

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
