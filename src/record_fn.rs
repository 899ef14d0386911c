//! [`RecordFn`]: a plain `async fn(SqsMessage) -> Result<T, E>` as a per-record service.

use std::future::Future;
use std::task::{Context, Poll};

use aws_lambda_events::sqs::SqsMessage;
use lambda_runtime::LambdaEvent;
use tower::Service;

/// Adapts a plain async function of one SQS record into a
/// `Service<LambdaEvent<SqsMessage>>`. Built by
/// [`IdempotencyLayer::handler`](crate::IdempotencyLayer::handler) or [`record_fn`].
#[derive(Debug, Clone, Copy)]
pub struct RecordFn<F> {
    f: F,
}

/// Wraps `f` as a per-record service.
pub fn record_fn<F>(f: F) -> RecordFn<F> {
    RecordFn { f }
}

impl<F, Fut, T, E> Service<LambdaEvent<SqsMessage>> for RecordFn<F>
where
    F: FnMut(SqsMessage) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    type Response = T;
    type Error = E;
    type Future = Fut;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), E>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, event: LambdaEvent<SqsMessage>) -> Fut {
        (self.f)(event.payload)
    }
}
