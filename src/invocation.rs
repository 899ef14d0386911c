//! Whole-invocation idempotency: any `LambdaEvent<T>` handler run once per key.
//!
//! A direct invoke, an EventBridge rule, an S3 notification, a Step Functions task: the key
//! is taken from the event, and the response is stored and replayed.
//!
//! [`IdempotencyLayer::invocation`] wraps a handler service of `LambdaEvent<T>`; the result,
//! an [`IdempotentInvocation`], is a service of `LambdaEvent<Received<T>>`: the event as
//! Lambda delivered it, its JSON text with `T` deserialized from it ([`Received`]). It answers
//! the handler's response type and goes to `lambda_runtime::run` as it is (the runtime
//! deserializes the `Received<T>` from the invocation's body); the handler still gets its
//! `LambdaEvent<T>`:
//!
//! ```
//! use lambda_idempotency::invocation::Received;
//! use lambda_idempotency::key::JsonPointer;
//! use lambda_idempotency::store::InMemoryStore;
//! use lambda_idempotency::IdempotencyLayer;
//! use lambda_runtime::{service_fn, Context, LambdaEvent};
//! use serde::{Deserialize, Serialize};
//! use std::time::{Duration, SystemTime, UNIX_EPOCH};
//! use tower::{Service, ServiceExt};
//!
//! #[derive(Deserialize)]
//! struct Refund { order_id: String, cents: u64 }
//!
//! #[derive(Serialize, Deserialize, Debug, PartialEq)]
//! struct Receipt { refunded_cents: u64 }
//!
//! async fn refund(event: LambdaEvent<Refund>) -> Result<Receipt, lambda_runtime::Error> {
//!     Ok(Receipt { refunded_cents: event.payload.cents })
//! }
//!
//! // In Lambda:
//! async fn serve(layer: IdempotencyLayer<InMemoryStore, JsonPointer>) -> Result<(), lambda_runtime::Error> {
//!     lambda_runtime::run(layer.invocation(service_fn(refund))).await
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lambda_runtime::Error> {
//! let layer = IdempotencyLayer::new(InMemoryStore::new()).with_key(JsonPointer::new("/order_id"));
//! let mut function = layer.invocation(service_fn(refund));
//!
//! let mut context = Context::default();
//! let deadline = SystemTime::now() + Duration::from_secs(30);
//! context.deadline = deadline.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
//! context.invoked_function_arn = "arn:aws:lambda:eu-west-1:123456789012:function:refunds".into();
//! for _ in 0..2 {
//!     // The event as Lambda delivers it: its JSON text.
//!     let event = Received::from_json(r#"{"order_id": "o-1", "cents": 250}"#)?;
//!     let receipt = function.ready().await?.call(LambdaEvent::new(event, context.clone())).await?;
//!     assert_eq!(receipt, Receipt { refunded_cents: 250 }); // the second is the stored one
//! }
//! # Ok(())
//! # }
//! ```
//!
//! The key extractor and the payload hash read the event's JSON text as received, in canonical
//! form (a [`Serialized`] of that text), never `T` serialized again: a number keeps every
//! digit (two ids differing past 64 bits are two keys, also when `T` holds them as `f64`, as
//! `serde_json::Value` does), a redelivered event is the same payload whatever order a
//! `HashSet` in `T` iterates in, and the fields `T` does not read count too.
//! [`JsonPointer`](crate::key::JsonPointer) picks a field (an EventBridge event's `/id`, an
//! order id), [`BodyHash`](crate::key::BodyHash) keys on the whole event (only for events
//! that carry nothing per delivery: an API Gateway or S3 event has request ids and times that
//! differ on each), and a closure over `&Serialized<T>` reads the deserialized event through
//! `Deref`. The default [`MessageId`](crate::key::MessageId) reads a batch record's id and
//! finds none on a whole event: a layer still keyed by it does not compile with
//! [`IdempotencyLayer::invocation`], so choose a key with [`IdempotencyLayer::with_key`]. An event without a canonical form (nested deeper than 128
//! levels, or holding a lone surrogate escape, in a field `T` does not read) is keyed on its
//! text as received: a redelivery sends the same bytes.
//!
//! Every [`Error`] fails the invocation (Lambda retries an asynchronous one), a permanent
//! failure stored earlier too (returned as the error again); a duplicate whose stored
//! response could not be kept answers [`InvocationError::ResultUnavailable`].

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use lambda_runtime::LambdaEvent;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use tower::{BoxError, Service};

use crate::error::Error;
use crate::idempotent::{
    HandlerKind, IdempotencyLayer, Idempotent, Sequence, Sequenced, SequencedLayer,
};
use crate::input::Serialized;
use crate::key::KeyExtractor;
use crate::outcome::Processed;

/// A whole invocation's event as Lambda delivered it: its JSON text, and the handler's `T`
/// deserialized from that text.
///
/// The event an [`IdempotentInvocation`] takes. `lambda_runtime` deserializes it from the
/// invocation's body (its `Deserialize` keeps the text and deserializes `T` from it); the
/// key and payload hash are derived from that text, canonical, so they keep what `T` would
/// lose: every digit of a number past 64 bits (in a `serde_json::Value` it is an `f64`), the
/// order of a list's elements as sent (a `HashSet` in `T` iterates in an order of its own; a
/// resend that lists a set's elements in another order is another payload), and the fields
/// `T` does not read. In tests, build it from the text Lambda would deliver
/// ([`from_json`](Received::from_json)), or from a value
/// ([`from_value`](Received::from_value)), and wrap it in a `LambdaEvent` (with the testing
/// kit's `invocation`, for one).
pub struct Received<T> {
    value: T,
    json: Box<RawValue>,
}

impl<T: DeserializeOwned> Received<T> {
    /// The event whose JSON text is `json`, as Lambda delivers it. Fails when `json` is not
    /// one JSON value, or not a `T` (the error names the field that is not, as
    /// `lambda_runtime` does).
    pub fn from_json(json: impl Into<String>) -> Result<Self, serde_json::Error> {
        Self::from_raw(RawValue::from_string(json.into())?)
    }

    fn from_raw(json: Box<RawValue>) -> Result<Self, serde_json::Error> {
        let mut deserializer = serde_json::Deserializer::from_str(json.get());
        let value = serde_path_to_error::deserialize(&mut deserializer)
            .map_err(<serde_json::Error as serde::de::Error>::custom)?;
        deserializer.end()?;
        Ok(Self { value, json })
    }
}

impl<T: Serialize> Received<T> {
    /// The event `value`, its JSON text the value as serde_json writes it (as [`Serialized`]
    /// serializes it: the same key as the text Lambda would deliver for it, when `T`
    /// serializes as it deserializes). Fails when `value` cannot be serialized as JSON (a
    /// map with keys that are not strings) or is nested deeper than 128 levels.
    pub fn from_value(value: T) -> Result<Self, serde_json::Error> {
        let text = crate::canonical::serialized_text(&value)?;
        // Checked as the key material will be: nested deeper than 128 levels fails here.
        crate::canonical::canonical(&text)?;
        let json = RawValue::from_string(text)?;
        Ok(Self { value, json })
    }
}

impl<T> Received<T> {
    /// The event, deserialized.
    pub fn get(&self) -> &T {
        &self.value
    }

    /// The event, consuming the wrapper.
    pub fn into_inner(self) -> T {
        self.value
    }

    /// The event's JSON text, as received.
    pub fn json(&self) -> &str {
        self.json.get()
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Received<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let json = Box::<RawValue>::deserialize(deserializer)?;
        Self::from_raw(json).map_err(serde::de::Error::custom)
    }
}

impl<T: Clone> Clone for Received<T> {
    fn clone(&self) -> Self {
        Self {
            value: self.value.clone(),
            json: self.json.clone(),
        }
    }
}

impl<T> std::fmt::Debug for Received<T> {
    // The event stays out of debug output: it may hold what the logs must not.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Received")
            .field("json_bytes", &self.json.get().len())
            .finish_non_exhaustive()
    }
}

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
    ///
    /// The layer's key must read a whole event ([`JsonPointer`](crate::key::JsonPointer),
    /// [`BodyHash`](crate::key::BodyHash), a closure over `&Serialized<T>`): the default
    /// [`MessageId`](crate::key::MessageId) finds no id on one, and does not compile here.
    pub fn invocation<S, T>(&self, handler: S) -> IdempotentInvocation<S, St, K, C, M>
    where
        S: Service<LambdaEvent<T>>,
        K: KeyExtractor<Serialized<T>>,
    {
        IdempotentInvocation {
            inner: tower::Layer::layer(self, EventHandler { inner: handler }),
        }
    }
}

impl<St: Clone, P: Clone, C: Clone> SequencedLayer<St, P, C> {
    /// Makes a whole-invocation handler sequence-guarded.
    ///
    /// The handler is a service of `LambdaEvent<T>` answering a
    /// [`Completion`](crate::Completion) with the entity's one write. The sequence places the
    /// event (a [`Serialized`] of its JSON as received), as
    /// [`IdempotencyLayer::invocation`] keys it.
    pub fn invocation<S>(
        &self,
        handler: S,
    ) -> IdempotentInvocation<S, St, Sequence<P>, C, Sequenced> {
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
pub type InvocationFuture<R> = Pin<Box<dyn Future<Output = Result<R, InvocationError>> + Send>>;

/// Why an idempotent invocation answers no response: the record failed, or it is a
/// duplicate of a completed invocation whose response was not kept.
///
/// Either way the runtime answers Lambda with an error, whose `errorType` is stable
/// ([`error_type`](InvocationError::error_type)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InvocationError {
    /// The record failed: see [`Error`].
    #[error(transparent)]
    Failed(#[from] Error),
    /// A duplicate of an invocation that completed, whose stored response is not available
    /// (it was too large to store even compressed, or no longer decodes as the response
    /// type): the handler did not run again, and there is no response to replay. Not a
    /// failure of the record (its outcome is [`Outcome::Replayed`](crate::Outcome::Replayed)),
    /// but the runtime has no answer but an error for it.
    #[error("the invocation completed before, but its stored result is not available")]
    ResultUnavailable,
}

impl InvocationError {
    /// The record's outcome.
    pub fn outcome(&self) -> crate::Outcome {
        match self {
            InvocationError::Failed(err) => err.outcome(),
            InvocationError::ResultUnavailable => crate::Outcome::Replayed,
        }
    }

    /// A stable name for Lambda diagnostics and logs: the record's
    /// [`Error::error_type`], or `Idempotency.ResultUnavailable`.
    pub fn error_type(&self) -> &'static str {
        match self {
            InvocationError::Failed(err) => err.error_type(),
            InvocationError::ResultUnavailable => "Idempotency.ResultUnavailable",
        }
    }
}

impl From<InvocationError> for lambda_runtime::Diagnostic {
    fn from(err: InvocationError) -> Self {
        match err {
            InvocationError::Failed(err) => err.into(),
            unavailable => lambda_runtime::Diagnostic {
                error_type: unavailable.error_type().into(),
                error_message: unavailable.to_string(),
            },
        }
    }
}

impl<S, St, K, C, M, T> Service<LambdaEvent<Received<T>>> for IdempotentInvocation<S, St, K, C, M>
where
    S: Service<LambdaEvent<T>>,
    S::Error: Into<BoxError>,
    M: HandlerKind<EventHandler<S>, St, K, C, Serialized<T>>,
    M::Value: Send + 'static,
{
    type Response = M::Value;
    type Error = InvocationError;
    type Future = InvocationFuture<M::Value>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), InvocationError>> {
        Service::<LambdaEvent<Serialized<T>>>::poll_ready(&mut self.inner, cx).map_err(Into::into)
    }

    fn call(&mut self, event: LambdaEvent<Received<T>>) -> Self::Future {
        let Received { value, json } = event.payload;
        let payload = Serialized::from_json(value, json.get());
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
                Processed::ReplayedWithoutResult => Err(InvocationError::ResultUnavailable),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use serde::Deserialize;

    use super::*;
    use crate::key::{BodyHash, JsonPointer, KeyExtractor};

    #[derive(Debug, Deserialize)]
    struct Order {
        id: serde_json::Value,
        tags: HashSet<String>,
    }

    /// What `lambda_runtime` 1.x does with an invocation's body
    /// (`lambda_runtime::deserializer::deserialize`, crate-private there).
    fn as_lambda_runtime_does<T: DeserializeOwned>(body: &[u8]) -> Result<T, String> {
        let deserializer = &mut serde_json::Deserializer::from_slice(body);
        serde_path_to_error::deserialize(deserializer).map_err(|err| err.to_string())
    }

    #[test]
    fn lambda_runtime_deserializes_the_text_and_the_value() {
        let body = br#" {"tags": ["b", "a", "c"], "id": 12345678901234567890123} "#;
        let event: Received<Order> = as_lambda_runtime_does(body).unwrap();
        assert_eq!(event.json(), std::str::from_utf8(body).unwrap().trim());
        assert_eq!(event.get().tags.len(), 3);
        assert!(event.get().id.is_f64(), "T keeps what it can of the id");
        let input = Serialized::from_json(event.into_inner(), std::str::from_utf8(body).unwrap());
        assert_eq!(
            input.json(),
            br#"{"id":12345678901234567890123e0,"tags":["b","a","c"]}"#
        );
        assert_eq!(
            JsonPointer::new("/id").key_material(&input).unwrap(),
            [&[0xFF][..], b"12345678901234567890123e0"].concat()
        );

        // A body that is not T fails as T's deserialization does, naming the field.
        let err =
            as_lambda_runtime_does::<Received<Order>>(br#"{"id": 1, "tags": 7}"#).unwrap_err();
        assert!(err.starts_with("tags: invalid type"), "{err}");
        let err = Received::<Order>::from_json(r#"{"id": 1, "tags": [7]}"#)
            .err()
            .unwrap();
        assert!(
            err.to_string().starts_with("tags[0]: invalid type"),
            "{err}"
        );
        assert!(as_lambda_runtime_does::<Received<Order>>(b"{").is_err());
    }

    #[test]
    fn events_from_text_or_value_key_alike() {
        #[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
        struct Refund {
            order_id: String,
            cents: u128,
        }
        let from_text = Received::<Refund>::from_json(
            r#"{"order_id": "o-1", "cents": 340282366920938463463374607431768211455}"#,
        )
        .unwrap();
        let from_value = Received::from_value(Refund {
            order_id: "o-1".into(),
            cents: u128::MAX,
        })
        .unwrap();
        assert_eq!(from_text.get(), from_value.get());
        let input = |event: &Received<Refund>| Serialized::from_json((), event.json());
        assert_eq!(
            BodyHash.key_material(&input(&from_text)).unwrap(),
            BodyHash.key_material(&input(&from_value)).unwrap()
        );
        let debug = format!("{from_text:?}");
        assert!(
            debug.contains("json_bytes") && !debug.contains("o-1"),
            "{debug}"
        );
        assert_eq!(from_text.clone().json(), from_text.json());
    }
}
