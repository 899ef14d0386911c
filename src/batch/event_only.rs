//! [`EventOnly`]: a service of `LambdaEvent<R>` as a batch processor's per-record service.

use std::task::{Context, Poll};

use lambda_runtime::LambdaEvent;
use tower::Service;

use crate::idempotent::batch_scope::BatchRecord;

/// Adapts a service of `LambdaEvent<R>` to a [`BatchProcessor`](super::BatchProcessor),
/// which hands each record over as a [`BatchRecord<R>`]: the service gets the record's event
/// alone.
///
/// What the batch knows of the record is dropped: an [`Idempotent`](crate::Idempotent)
/// service inside processes it as a record of no batch (no pre-check, no memo of the keys
/// that failed earlier in the batch). A layer that should keep them takes the `BatchRecord`
/// and passes it on instead.
///
/// ```
/// use aws_lambda_events::sqs::SqsMessage;
/// use lambda_idempotency::batch::{BatchProcessor, EventOnly};
/// use lambda_idempotency::{Error, Processed};
/// use lambda_runtime::LambdaEvent;
///
/// // Acknowledges every record without idempotency.
/// let service = tower::service_fn(|_event: LambdaEvent<SqsMessage>| async {
///     Ok::<_, Error>(Processed::Executed(()))
/// });
/// let processor = BatchProcessor::new(EventOnly::new(service));
/// # let _ = processor;
/// ```
#[derive(Debug, Clone)]
pub struct EventOnly<S> {
    inner: S,
}

impl<S> EventOnly<S> {
    /// `inner`, given each record's event.
    pub fn new(inner: S) -> Self {
        Self { inner }
    }

    /// The inner service, consuming the adapter.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, R> Service<BatchRecord<R>> for EventOnly<S>
where
    S: Service<LambdaEvent<R>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, record: BatchRecord<R>) -> Self::Future {
        self.inner.call(record.into_event())
    }
}
