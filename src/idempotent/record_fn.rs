//! [`RecordFn`]: a plain `async fn(E) -> Result<T, Err>` as a service of `LambdaEvent<E>`.

use std::future::Future;
use std::task::{Context, Poll};

use lambda_runtime::LambdaEvent;
use tower::Service;

use super::in_transaction::TransactionEvent;

/// Adapts a plain async function of one event (an SQS message, say) into a
/// `Service<LambdaEvent<E>>`; a function of the event and a transaction into a
/// `Service<TransactionEvent<E, Tx>>`. Built by
/// [`IdempotencyLayer::handler`](crate::IdempotencyLayer::handler) or [`record_fn`].
#[derive(Debug, Clone, Copy)]
pub struct RecordFn<F> {
    f: F,
}

/// Wraps `f` as a per-event service.
pub fn record_fn<F>(f: F) -> RecordFn<F> {
    RecordFn { f }
}

impl<F, E, Fut, T, Err> Service<LambdaEvent<E>> for RecordFn<F>
where
    F: FnMut(E) -> Fut,
    Fut: Future<Output = Result<T, Err>>,
{
    type Response = T;
    type Error = Err;
    type Future = Fut;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Err>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, event: LambdaEvent<E>) -> Fut {
        (self.f)(event.payload)
    }
}

impl<F, E, Tx, Fut, T, Err> Service<TransactionEvent<E, Tx>> for RecordFn<F>
where
    F: FnMut(E, Tx) -> Fut,
    Fut: Future<Output = Result<T, Err>>,
{
    type Response = T;
    type Error = Err;
    type Future = Fut;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Err>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: TransactionEvent<E, Tx>) -> Fut {
        (self.f)(request.event.payload, request.transaction)
    }
}
