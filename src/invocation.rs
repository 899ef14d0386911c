//! Whole-invocation idempotency: any `LambdaEvent<T>` handler (a direct invoke, an
//! EventBridge rule, an S3 notification, a Step Functions task) run once per key taken from
//! its event, its response stored and replayed.
//!
//! [`IdempotencyLayer::invocation`] wraps a handler service of `LambdaEvent<T>`; the result,
//! an [`IdempotentInvocation`], answers the handler's response type and goes to
//! `lambda_runtime::run` as it is:
//!
//! ```
//! use lambda_idempotency::invocation::IdempotentInvocation;
//! use lambda_idempotency::key::JsonPointer;
//! use lambda_idempotency::store::InMemoryStore;
//! use lambda_idempotency::IdempotencyLayer;
//! use lambda_runtime::{service_fn, Context, LambdaEvent};
//! use serde::{Deserialize, Serialize};
//! use std::time::{Duration, SystemTime, UNIX_EPOCH};
//! use tower::{Service, ServiceExt};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Refund { order_id: String, cents: u64 }
//!
//! #[derive(Serialize, Deserialize, Debug, PartialEq)]
//! struct Receipt { refunded_cents: u64 }
//!
//! async fn refund(event: LambdaEvent<Refund>) -> Result<Receipt, lambda_runtime::Error> {
//!     Ok(Receipt { refunded_cents: event.payload.cents })
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lambda_idempotency::Error> {
//! let layer = IdempotencyLayer::new(InMemoryStore::new()).with_key(JsonPointer::new("/order_id"));
//! let mut function = layer.invocation(service_fn(refund));
//! // In Lambda: `lambda_runtime::run(function).await`.
//!
//! let mut context = Context::default();
//! let deadline = SystemTime::now() + Duration::from_secs(30);
//! context.deadline = deadline.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
//! context.invoked_function_arn = "arn:aws:lambda:eu-west-1:123456789012:function:refunds".into();
//! for _ in 0..2 {
//!     let event = Refund { order_id: "o-1".into(), cents: 250 };
//!     let receipt = function.ready().await?.call(LambdaEvent::new(event, context.clone())).await?;
//!     assert_eq!(receipt, Receipt { refunded_cents: 250 }); // the second is the stored one
//! }
//! # Ok(())
//! # }
//! ```
//!
//! The event is serialized as canonical JSON ([`Serialized`]) for the key extractor and the
//! payload hash: [`JsonPointer`](crate::key::JsonPointer) picks a field (an EventBridge
//! event's `/id`, an order id), [`BodyHash`](crate::key::BodyHash) keys on the whole event
//! (only for events that carry nothing per delivery: an API Gateway or S3 event has request
//! ids and times that differ on each), and a closure reads the event through `Deref`. The
//! default [`MessageId`](crate::key::MessageId) finds no id on a whole event, so every
//! invocation fails with [`KeyError::MissingMessageId`]: choose a key with
//! [`IdempotencyLayer::with_key`].
//!
//! Every [`Error`] fails the invocation (Lambda retries an asynchronous one), except a
//! permanent failure stored earlier, which is returned as the error again, and
//! [`Error::ResultUnavailable`], a duplicate whose stored response could not be kept.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use lambda_runtime::LambdaEvent;
use serde::Serialize;
use tower::{BoxError, Service};

use crate::error::Error;
use crate::idempotent::{IdempotencyLayer, Idempotent, Mode};
use crate::input::Serialized;
use crate::key::KeyError;
use crate::processed::Processed;

/// A handler of `LambdaEvent<T>` made idempotent as a whole: it answers the handler's
/// response (stored, and replayed to duplicates) or an [`Error`]. Built by
/// [`IdempotencyLayer::invocation`].
#[derive(Debug, Clone)]
pub struct IdempotentInvocation<S, St, K, C, M> {
    inner: Idempotent<EventHandler<S>, St, K, C, M>,
}

/// The handler as the idempotent service sees it: a service of the serialized event that
/// hands the event back to the handler.
#[derive(Debug, Clone)]
pub struct EventHandler<S> {
    inner: S,
}

impl<S, T> Service<LambdaEvent<Serialized<T>>> for EventHandler<S>
where
    S: Service<LambdaEvent<T>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, event: LambdaEvent<Serialized<T>>) -> S::Future {
        self.inner
            .call(LambdaEvent::new(event.payload.into_inner(), event.context))
    }
}

impl<St: Clone, K: Clone, C: Clone, M> IdempotencyLayer<St, K, C, M> {
    /// Makes a whole-invocation handler (a service of `LambdaEvent<T>`, such as
    /// `lambda_runtime::service_fn(f)`) idempotent on the key this layer derives from the
    /// event. See the [module](crate::invocation) docs.
    pub fn invocation<S>(&self, handler: S) -> IdempotentInvocation<S, St, K, C, M> {
        IdempotentInvocation {
            inner: tower::Layer::layer(self, EventHandler { inner: handler }),
        }
    }
}

impl<S, St, K, C, M> IdempotentInvocation<S, St, K, C, M> {
    /// The handler.
    pub fn get_ref(&self) -> &S {
        &self.inner.get_ref().inner
    }
}

/// The future an [`IdempotentInvocation`] returns.
pub type InvocationFuture<R> = Pin<Box<dyn Future<Output = Result<R, Error>> + Send>>;

impl<S, St, K, C, M, T> Service<LambdaEvent<T>> for IdempotentInvocation<S, St, K, C, M>
where
    T: Serialize,
    S: Service<LambdaEvent<T>>,
    S::Error: Into<BoxError>,
    M: Mode<EventHandler<S>, St, K, C, Serialized<T>>,
    M::Value: Send + 'static,
{
    type Response = M::Value;
    type Error = Error;
    type Future = InvocationFuture<M::Value>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        Service::<LambdaEvent<Serialized<T>>>::poll_ready(&mut self.inner, cx)
    }

    fn call(&mut self, event: LambdaEvent<T>) -> Self::Future {
        let payload = match Serialized::new(event.payload) {
            Ok(payload) => payload,
            Err(err) => {
                let err = Error::Key(KeyError::Unserializable(err));
                crate::metrics::outcome(err.outcome());
                return Box::pin(std::future::ready(Err(err)));
            }
        };
        let processed = self.inner.call(LambdaEvent::new(payload, event.context));
        Box::pin(async move {
            let processed = processed.await;
            crate::metrics::outcome(match &processed {
                Ok(processed) => processed.outcome(),
                Err(err) => err.outcome(),
            });
            match processed? {
                Processed::Executed(value)
                | Processed::Replayed(value)
                | Processed::Unprotected(value) => Ok(value),
                Processed::ReplayedWithoutResult => Err(Error::ResultUnavailable),
            }
        })
    }
}
