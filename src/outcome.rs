//! How a record ended: [`Processed`], a success's result and whether the handler ran for
//! it, and [`Outcome`], every ending's name for logs and metrics.

use std::fmt;

/// How one record of a batch ended. Every record ends in exactly one outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Outcome {
    /// The handler ran and its result was stored.
    Executed,
    /// Completed before: the stored result was returned. Under a lease the handler did not
    /// run for this delivery; with the optimistic commit strategy it may have, and its writes
    /// were not committed.
    Replayed,
    /// The handler ran without idempotency, because the key was absent and
    /// [`MissingKey::ProcessUnprotected`](crate::MissingKey) was chosen.
    Unprotected,
    /// Another invocation holds the lease: reported for retry.
    Locked,
    /// The handler returned an error or panicked: reported for retry (its lease released;
    /// with the optimistic commit strategy nothing was stored).
    Failed,
    /// No key could be derived, or the key came with a different payload: reported.
    Rejected,
    /// The store failed: the handler did not run (or its result was not stored), reported.
    StoreUnavailable,
    /// The store is not set up for this function (a missing table, denied access, wrong
    /// credentials: [`StoreError::Misconfigured`](crate::store::StoreError::Misconfigured)):
    /// nothing of the record was stored. A batch with such a record fails its invocation as a
    /// whole (the source retries the batch until the setup is fixed), unless the refused
    /// table is one of the handler's writes that other records of the batch could write:
    /// then the record is reported alone.
    Misconfigured,
    /// The handler failed with a [`Permanent`](crate::Permanent) error (now, or in an
    /// earlier delivery whose stored failure is replayed): acknowledged, not retried.
    FailedPermanently,
    /// The lease was taken over before the result was stored: reported.
    LeaseLost,
    /// The invocation deadline was too near to start the record, or came before it
    /// finished (it was stopped): reported for retry.
    DeadlineNear,
    /// FIFO: an earlier record of the batch (or of the message group) failed, so this one
    /// was not started: reported for retry, in order.
    FifoSkipped,
    /// A [sequence-guarded](crate::idempotent::Sequence) event arrived before the events
    /// ahead of it in its entity's sequence were applied: nothing was written, reported for
    /// retry.
    OutOfOrder,
}

impl Outcome {
    /// Every outcome, in declaration order.
    pub const ALL: [Outcome; 13] = [
        Outcome::Executed,
        Outcome::Replayed,
        Outcome::Unprotected,
        Outcome::Locked,
        Outcome::Failed,
        Outcome::Rejected,
        Outcome::StoreUnavailable,
        Outcome::Misconfigured,
        Outcome::FailedPermanently,
        Outcome::LeaseLost,
        Outcome::DeadlineNear,
        Outcome::FifoSkipped,
        Outcome::OutOfOrder,
    ];

    /// A stable snake_case name, for logs and metric dimensions.
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::Executed => "executed",
            Outcome::Replayed => "replayed",
            Outcome::Unprotected => "unprotected",
            Outcome::Locked => "locked",
            Outcome::Failed => "failed",
            Outcome::Rejected => "rejected",
            Outcome::StoreUnavailable => "store_unavailable",
            Outcome::Misconfigured => "misconfigured",
            Outcome::FailedPermanently => "failed_permanently",
            Outcome::LeaseLost => "lease_lost",
            Outcome::DeadlineNear => "deadline_near",
            Outcome::FifoSkipped => "fifo_skipped",
            Outcome::OutOfOrder => "out_of_order",
        }
    }

    /// The name of its metric (see [`metrics`](crate::metrics)): `Records` and the outcome in
    /// PascalCase (`RecordsExecuted`, `RecordsStoreUnavailable`, ...).
    pub const fn metric_name(self) -> &'static str {
        match self {
            Outcome::Executed => "RecordsExecuted",
            Outcome::Replayed => "RecordsReplayed",
            Outcome::Unprotected => "RecordsUnprotected",
            Outcome::Locked => "RecordsLocked",
            Outcome::Failed => "RecordsFailed",
            Outcome::Rejected => "RecordsRejected",
            Outcome::StoreUnavailable => "RecordsStoreUnavailable",
            Outcome::Misconfigured => "RecordsMisconfigured",
            Outcome::FailedPermanently => "RecordsFailedPermanently",
            Outcome::LeaseLost => "RecordsLeaseLost",
            Outcome::DeadlineNear => "RecordsDeadlineNear",
            Outcome::FifoSkipped => "RecordsFifoSkipped",
            Outcome::OutOfOrder => "RecordsOutOfOrder",
        }
    }

    /// The message is done and may be deleted from the queue (it is not reported in
    /// `batchItemFailures`).
    pub const fn is_acknowledged(self) -> bool {
        matches!(
            self,
            Outcome::Executed
                | Outcome::Replayed
                | Outcome::Unprotected
                | Outcome::FailedPermanently
        )
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The result of one record that succeeded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Processed<T> {
    /// The handler ran now and its result was stored.
    Executed(T),
    /// The result stored by an earlier run was returned. In lease mode the handler did not
    /// run; in optimistic mode it may have run, its writes not committed (another run's were).
    Replayed(T),
    /// An earlier run completed (see [`Replayed`](Processed::Replayed)), but its result is not available
    /// (it was too large to store even compressed, could not be serialized, or no longer
    /// decodes as the result type). The message is a duplicate and is acknowledged.
    ReplayedWithoutResult,
    /// The handler ran without idempotency (the key was absent and that was allowed).
    Unprotected(T),
}

impl<T> Processed<T> {
    /// The result, however it was obtained (`None` for
    /// [`ReplayedWithoutResult`](Processed::ReplayedWithoutResult)).
    pub fn into_value(self) -> Option<T> {
        match self {
            Processed::Executed(v) | Processed::Replayed(v) | Processed::Unprotected(v) => Some(v),
            Processed::ReplayedWithoutResult => None,
        }
    }

    /// A reference to the result, if there is one.
    pub fn value(&self) -> Option<&T> {
        match self {
            Processed::Executed(v) | Processed::Replayed(v) | Processed::Unprotected(v) => Some(v),
            Processed::ReplayedWithoutResult => None,
        }
    }

    /// The result comes from an earlier run (in lease mode the handler did not run; in
    /// optimistic mode it may have, its writes not committed).
    pub fn is_replay(&self) -> bool {
        matches!(
            self,
            Processed::Replayed(_) | Processed::ReplayedWithoutResult
        )
    }

    /// The matching outcome.
    pub fn outcome(&self) -> Outcome {
        match self {
            Processed::Executed(_) => Outcome::Executed,
            Processed::Replayed(_) | Processed::ReplayedWithoutResult => Outcome::Replayed,
            Processed::Unprotected(_) => Outcome::Unprotected,
        }
    }
}
