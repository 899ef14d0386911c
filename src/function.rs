//! Idempotent functions: an async function called inside a handler (a payment call, an
//! email) run once per key of its arguments, its result stored and replayed.
//!
//! [`IdempotencyLayer::function`] names the function and wraps it; each call of the
//! [`IdempotentFn`] goes through the same protocol as a handler: a lease (ending at the
//! invocation deadline with [`call`](IdempotentFn::call), or after an explicit time with
//! [`call_with_lease`](IdempotentFn::call_with_lease)), the function, its stored result.
//!
//! ```
//! use lambda_idempotency::store::InMemoryStore;
//! use lambda_idempotency::{IdempotencyLayer, Processed};
//! use serde::{Deserialize, Serialize};
//! use std::time::Duration;
//!
//! #[derive(Serialize)]
//! struct Charge { customer: String, cents: u64 }
//!
//! #[derive(Serialize, Deserialize, Debug, PartialEq)]
//! struct Receipt { charged_cents: u64 }
//!
//! async fn charge_card(charge: Charge) -> Result<Receipt, std::io::Error> {
//!     // ... call the payment provider ...
//!     Ok(Receipt { charged_cents: charge.cents })
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lambda_idempotency::Error> {
//! let layer = IdempotencyLayer::new(InMemoryStore::new());
//! let charge = layer.function("charge-card", charge_card);
//! let args = || Charge { customer: "c-1".into(), cents: 500 };
//! // Inside a handler, `charge.call(args(), &event.context)` leases until the deadline.
//! let first = charge.call_with_lease(args(), Duration::from_secs(30)).await?;
//! let again = charge.call_with_lease(args(), Duration::from_secs(30)).await?;
//! assert_eq!(first, Processed::Executed(Receipt { charged_cents: 500 }));
//! assert_eq!(again, Processed::Replayed(Receipt { charged_cents: 500 }));
//! # Ok(())
//! # }
//! ```
//!
//! **Keys.** By default the key is the arguments' canonical JSON
//! ([`Arguments`]: [`BodyHash`] over [`Serialized`]): equal arguments are one call, whatever order their
//! serialization visits them in, for arguments made of:
//! - structs, tuples, enums, `Option`, strings, booleans, and numbers (integers up to 128
//!   bits with every digit; finite floats: serde_json writes `NaN` and the infinities as
//!   `null`, like `None`, so they key as it does);
//! - sequences whose order is part of their value: `Vec`, `VecDeque`, arrays and slices
//!   (`[a, b]` and `[b, a]` are two calls), and `BTreeSet`;
//! - maps with string or integer keys, `HashMap` and `BTreeMap` (their entries sorted);
//! - `HashSet`, std's or hashbrown's (its elements sorted by their canonical JSON).
//!
//! The key is built from what the arguments' `Serialize` writes, and serde cannot tell an
//! unordered collection from a list: only the hash sets above are sorted. For anything else
//! whose serialization is not a function of its value (a `Serialize` of your own writing an
//! unordered collection as a sequence, an `IndexSet` whose insertion order does not matter, a
//! field filled at each call such as a timestamp or a request id), name the key data with
//! [`with_key`](IdempotentFn::with_key): equal values giving two texts run twice. Choose a field with
//! [`with_key`](IdempotentFn::with_key) and a [`JsonPointer`](crate::key::JsonPointer), or a
//! closure over `&Serialized<A>` (it derefs to the arguments). The function's records have
//! a namespace of their own: the stored key is `<prefix>#fn:<name>#<sha256 of the
//! material>`, with the layer's key prefix, so two functions, or a function and the
//! handler's own records, never share a record in one table, whatever the handler's input
//! (only a layer configured with the prefix `<prefix>#fn:<name>` itself could). In the
//! [Powertools format](crate::powertools) the key is `<format prefix>.<name>#<digest>`, so
//! functions stay apart there too; to share records with a Powertools function, give it
//! that function's exact prefix with [`with_key_prefix`](IdempotentFn::with_key_prefix).
//!
//! **What is exactly-once.** The function runs once per key while its record counts, under
//! its lease: a function always takes a lease, also from a layer in optimistic mode (which
//! would let two processes run it at once: its effect is outside the store). Its effect is
//! outside the store, so a process that dies after the effect and before the result is
//! stored leaves the record in progress until its lease ends, and the next call runs the
//! function again: pass a key to the API it calls when it takes one (a payment provider's
//! idempotency key) to close that gap.
//!
//! **Concurrent calls.** A call that finds the key held by another process gets
//! [`Error::InProgress`] without running; one in the same process waits for the running call
//! and shares its result (or, when it fails, gets [`Error::SameKeyFailed`]), until that
//! call's lease ends at the most (then it goes to the store, which lets it take the key
//! over). A failed call
//! releases its lease: the next call runs again, also within the same invocation (a retry
//! loop in the handler works). A call is not stopped at its lease's end (unless the layer
//! has a [heartbeat](crate::Config::with_heartbeat) that finds the lease taken over): one
//! that outlives it may find the key taken over, and its result is then refused
//! ([`Error::LeaseLost`]).

use std::future::Future;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use lambda_runtime::{Context, LambdaEvent};
use serde::Serialize;
use tower::{BoxError, Layer, Service, ServiceExt};

use crate::clock::Clock;
use crate::config::{CommitStrategy, FunctionScope};
use crate::error::Error;
use crate::idempotent::{HandlerKind, IdempotencyLayer};
use crate::input::{Input, Serialized};
use crate::key::{BodyHash, KeyError, KeyExtractor};
use crate::outcome::Processed;

/// The deadline of a call outside an invocation: none (the end of time, as epoch
/// milliseconds).
const NO_DEADLINE_MS: u64 = u64::MAX;

/// The function as the idempotent service sees it: a service of its serialized arguments.
#[derive(Debug, Clone)]
pub struct FunctionCall<F> {
    f: F,
}

impl<F, A, Fut, T, E> Service<LambdaEvent<Serialized<A>>> for FunctionCall<F>
where
    F: FnMut(A) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    type Response = T;
    type Error = E;
    type Future = Fut;

    fn poll_ready(&mut self, _cx: &mut TaskContext<'_>) -> Poll<Result<(), E>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, event: LambdaEvent<Serialized<A>>) -> Fut {
        (self.f)(event.payload.into_inner())
    }
}

/// A named async function made idempotent on its arguments. Built by
/// [`IdempotencyLayer::function`]; cheap to clone (clones share the layer's local cache and
/// single flight). See the [module](crate::function) docs.
#[derive(Debug, Clone)]
pub struct IdempotentFn<F, St, K, C, M> {
    layer: IdempotencyLayer<St, K, C, M>,
    name: String,
    f: F,
}

impl<St, K, C, M> IdempotencyLayer<St, K, C, M> {
    /// Wraps the async function `f` of one argument (a tuple or struct for more), named
    /// `name` (keep it stable across deployments: it is part of every stored key), keyed on
    /// its arguments. The layer's store, clock, configuration (key prefix, expiry, payload
    /// validation) and mode apply; its key extractor does not (see
    /// [`IdempotentFn::with_key`]).
    pub fn function<F>(&self, name: impl Into<String>, f: F) -> IdempotentFn<F, St, Arguments, C, M>
    where
        St: Clone,
        K: Clone,
        C: Clone,
    {
        let name = name.into();
        let mut layer = self.clone().with_key(Arguments);
        let config = layer.config_mut();
        config.function = Some(FunctionScope {
            name: name.clone(),
            own_prefix: false,
        });
        // The function's effect is outside the store: never run it without a lease.
        layer.protocol.commit = CommitStrategy::Lease;
        IdempotentFn { layer, name, f }
    }
}

/// Keys a function's calls on all their arguments (the default of
/// [`IdempotencyLayer::function`]).
///
/// The key material is their canonical JSON (as [`BodyHash`] over [`Serialized`]); in the
/// [Powertools format](crate::powertools), the key data is the arguments' JSON value, as
/// Powertools' `idempotent_function` hashes its data without `event_key_jmespath`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Arguments;

impl<A> KeyExtractor<Serialized<A>> for Arguments {
    fn key_material(&self, args: &Serialized<A>) -> Result<Vec<u8>, KeyError> {
        BodyHash.key_material(args)
    }

    fn key_json(&self, args: &Serialized<A>) -> Result<String, KeyError> {
        let text = args.written_body().ok_or(KeyError::MissingBody)?;
        String::from_utf8(text.into_owned()).map_err(|_| KeyError::NotText)
    }
}

impl<F, St, K, C, M> IdempotentFn<F, St, K, C, M> {
    /// Keys calls with `key`, an extractor of the serialized arguments, instead of all of
    /// them (still in the function's namespace).
    pub fn with_key<K2>(self, key: K2) -> IdempotentFn<F, St, K2, C, M> {
        IdempotentFn {
            layer: self.layer.with_key(key),
            name: self.name,
            f: self.f,
        }
    }

    /// Keys this function's records under `prefix` instead of the layer's key prefix.
    ///
    /// The stored key is `<prefix>#fn:<name>#<sha256>` in this crate's format; in the
    /// [Powertools format](crate::powertools), `<prefix>#<digest>` exactly, so that it shares
    /// records with the Powertools function whose ids start with `prefix` (by default
    /// `<the format's prefix>.<name>`, which keeps functions apart but matches no Python
    /// function's default: Powertools' is `<Lambda function>.<module>.<function>`).
    pub fn with_key_prefix(mut self, prefix: impl Into<String>) -> Self {
        let prefix = prefix.into();
        let config = self.layer.config_mut();
        if let Some(format) = config.powertools.as_mut() {
            format.set_prefix(prefix.clone());
        }
        config.key_prefix = Some(prefix);
        if let Some(function) = config.function.as_mut() {
            function.own_prefix = true;
        }
        self
    }

    /// The function's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl<F, St, K, C, M> IdempotentFn<F, St, K, C, M>
where
    F: Clone,
    St: Clone,
    K: Clone,
    C: Clock + Clone,
{
    /// Calls the function with `args` inside the invocation of `context`: its lease ends at
    /// the invocation's deadline, and the layer's key prefix defaults to the function's name
    /// in `context`.
    pub async fn call<A>(&self, args: A, context: &Context) -> Result<Processed<M::Value>, Error>
    where
        A: Serialize,
        M: HandlerKind<FunctionCall<F>, St, K, C, Serialized<A>>,
        FunctionCall<F>: Service<LambdaEvent<Serialized<A>>, Error: Into<BoxError>>,
    {
        self.call_on(&self.layer, args, context).await
    }

    /// Calls the function with `args` outside an invocation (or with a shorter lease than
    /// the invocation's). Its lease ends `lease` from now, by the layer's clock (a lease past
    /// the end of time saturates), or at the layer's own cap
    /// ([`Config::with_max_lease`](crate::Config::with_max_lease)) if that comes first. No
    /// invocation deadline bounds the call, its store calls included: one that outlives its
    /// lease still sends its result, fenced by its owner token (refused,
    /// [`Error::LeaseLost`], when another call took the key over).
    pub async fn call_with_lease<A>(
        &self,
        args: A,
        lease: Duration,
    ) -> Result<Processed<M::Value>, Error>
    where
        A: Serialize,
        M: HandlerKind<FunctionCall<F>, St, K, C, Serialized<A>>,
        FunctionCall<F>: Service<LambdaEvent<Serialized<A>>, Error: Into<BoxError>>,
    {
        let mut layer = self.layer.clone();
        let config = layer.config_mut();
        config.max_lease = Some(config.max_lease.map_or(lease, |cap| cap.min(lease)));
        let mut context = Context::default();
        context.deadline = NO_DEADLINE_MS;
        self.call_on(&layer, args, &context).await
    }

    /// Calls the function with `args` through `layer` (this function's, or one with a
    /// shorter lease) inside the invocation of `context`.
    async fn call_on<A>(
        &self,
        layer: &IdempotencyLayer<St, K, C, M>,
        args: A,
        context: &Context,
    ) -> Result<Processed<M::Value>, Error>
    where
        A: Serialize,
        M: HandlerKind<FunctionCall<F>, St, K, C, Serialized<A>>,
        FunctionCall<F>: Service<LambdaEvent<Serialized<A>>, Error: Into<BoxError>>,
    {
        let args =
            Serialized::new(args).map_err(|err| Error::Key(KeyError::Unserializable(err)))?;
        let service = layer.layer(FunctionCall { f: self.f.clone() });
        // A call of no batch: a failed call does not stop a later one in the batch it runs in.
        service
            .oneshot(LambdaEvent::new(args, context.clone()))
            .await
    }
}
