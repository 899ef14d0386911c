//! [`BatchRecord`]: one record of a batch on its way to the per-record service, with what it
//! needs from its batch (the pre-check's offered records and lookups, the keys whose handler
//! failed earlier in the batch), carried in the request as lambda_http carries a request's
//! context in its extensions.

use std::fmt;
use std::sync::Arc;

use lambda_runtime::LambdaEvent;

use super::in_flight::FailureMemo;
use super::precheck::Offer;

/// One record of a batch as a [`BatchProcessor`](crate::batch::BatchProcessor) hands it to
/// its per-record service: the record's event, and what it needs from its batch.
///
/// An [`Idempotent`](crate::Idempotent) service answers both a `BatchRecord<R>` and a plain
/// `LambdaEvent<R>`; a record that reaches it as a `LambdaEvent` (or a `BatchRecord` made
/// from one) is processed as a record of no batch: it is not looked up with the batch's
/// pre-checked records, and no failure of its key earlier in a batch stops it. A layer
/// between the processor and the idempotent service passes the `BatchRecord` on, changing
/// its [`event`](Self::event) if it must (a record changed so is not the one the pre-check
/// derived a key for, and derives its own). A service of `LambdaEvent<R>` alone goes in a
/// batch processor through [`EventOnly`](crate::batch::EventOnly).
///
/// ```
/// use aws_lambda_events::sqs::SqsMessage;
/// use lambda_idempotency::batch::BatchRecord;
/// use lambda_runtime::{Context, LambdaEvent};
///
/// let record = BatchRecord::from(LambdaEvent::new(SqsMessage::default(), Context::default()));
/// assert!(record.event.payload.body.is_none());
/// ```
pub struct BatchRecord<R> {
    /// The record, and the invocation's context (its deadline normalised by the processor).
    pub event: LambdaEvent<R>,
    /// The record's batch; `None` for a record of no batch.
    pub(crate) batch: Option<Arc<Batch<R>>>,
}

impl<R> BatchRecord<R> {
    /// The record `event` of `batch`.
    pub(crate) fn of(event: LambdaEvent<R>, batch: &Arc<Batch<R>>) -> Self {
        Self {
            event,
            batch: Some(Arc::clone(batch)),
        }
    }

    /// The record's event, leaving its batch.
    pub fn into_event(self) -> LambdaEvent<R> {
        self.event
    }
}

impl<R: Clone> Clone for BatchRecord<R> {
    /// The same record of the same batch (a retry layer's copy keeps the batch).
    fn clone(&self) -> Self {
        Self {
            event: self.event.clone(),
            batch: self.batch.clone(),
        }
    }
}

impl<R> From<LambdaEvent<R>> for BatchRecord<R> {
    /// `event` as a record of no batch.
    fn from(event: LambdaEvent<R>) -> Self {
        Self { event, batch: None }
    }
}

impl<R: fmt::Debug> fmt::Debug for BatchRecord<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchRecord")
            .field("event", &self.event)
            .field("in_a_batch", &self.batch.is_some())
            .finish()
    }
}

/// What the records of one batch share, for as long as it runs: the records offered to the
/// pre-check (with each protocol's lookup of them and the turns begun), and the keys whose
/// handler failed.
pub(crate) struct Batch<R> {
    pub(crate) offer: Offer<R>,
    pub(crate) failures: Arc<FailureMemo>,
}

impl<R> Batch<R> {
    /// A batch offering `offered` to the pre-check, no key failed yet.
    pub(crate) fn new(offered: Vec<R>) -> Self {
        Self {
            offer: Offer::new(offered),
            failures: Arc::default(),
        }
    }
}
