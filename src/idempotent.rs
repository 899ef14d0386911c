//! [`IdempotencyLayer`] and the [`Idempotent`] service it builds around a per-record
//! handler.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use aws_lambda_events::sqs::SqsMessage;
use lambda_runtime::LambdaEvent;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tower::{Layer, Service};

use crate::clock::{Clock, SystemClock};
use crate::config::{Config, IdempotencyMode};
use crate::engine::{self, Shared, State};
use crate::error::{BoxError, Error};
use crate::key::{KeyExtractor, MessageId};
use crate::processed::Processed;
use crate::record_fn::{record_fn, RecordFn};
use crate::store::{Store, TransactionalStore};
use crate::write::Completion;

/// Builds [`Idempotent`] services: the per-record idempotency protocol around a handler.
///
/// Clones (and every service built from one layer) share the local cache and the in-process
/// single-flight table.
#[derive(Debug, Clone)]
pub struct IdempotencyLayer<St, K = MessageId, C = SystemClock> {
    store: St,
    key: K,
    clock: C,
    config: Config,
    state: Arc<State>,
}

impl<St: Store> IdempotencyLayer<St> {
    /// A layer on `store`, keyed by `messageId`, with the default [`Config`].
    pub fn new(store: St) -> Self {
        let config = Config::default();
        Self {
            store,
            key: MessageId,
            clock: SystemClock,
            state: State::new(&config),
            config,
        }
    }
}

impl<St, K, C> IdempotencyLayer<St, K, C> {
    /// Derives keys with `key` instead.
    pub fn with_key<K2: KeyExtractor>(self, key: K2) -> IdempotencyLayer<St, K2, C> {
        IdempotencyLayer {
            store: self.store,
            key,
            clock: self.clock,
            config: self.config,
            state: self.state,
        }
    }

    /// Reads time from `clock` instead of the system clock.
    pub fn with_clock<C2: Clock>(self, clock: C2) -> IdempotencyLayer<St, K, C2> {
        IdempotencyLayer {
            store: self.store,
            key: self.key,
            clock,
            config: self.config,
            state: self.state,
        }
    }

    /// Uses `config` (this starts a fresh local cache).
    pub fn with_config(mut self, config: Config) -> Self {
        self.state = State::new(&config);
        self.config = config;
        self
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The store.
    pub fn store(&self) -> &St {
        &self.store
    }

    /// Wraps a plain `async fn(SqsMessage) -> Result<T, E>` handler.
    pub fn handler<F>(&self, f: F) -> Idempotent<RecordFn<F>, St, K, C>
    where
        St: Clone,
        K: Clone,
        C: Clone,
    {
        self.layer(record_fn(f))
    }

    /// Wraps an `async fn(SqsMessage) -> Result<Completion<T>, E>` handler whose DynamoDB
    /// writes are committed with the record in one transaction (see [`Transactional`]).
    pub fn transactional_handler<F>(&self, f: F) -> Transactional<RecordFn<F>, St, K, C>
    where
        St: Clone,
        K: Clone,
        C: Clone,
    {
        self.transactional(record_fn(f))
    }

    /// Wraps a service answering [`Completion`]s (see [`Transactional`]).
    pub fn transactional<S>(&self, inner: S) -> Transactional<S, St, K, C>
    where
        St: Clone,
        K: Clone,
        C: Clone,
    {
        Transactional {
            inner,
            shared: self.shared(),
        }
    }

    /// A layer that builds [`Transactional`] services, for tower composition.
    pub fn into_transactional(self) -> TransactionalLayer<St, K, C> {
        TransactionalLayer { layer: self }
    }

    fn shared(&self) -> Arc<Shared<St, K, C>>
    where
        St: Clone,
        K: Clone,
        C: Clone,
    {
        Arc::new(Shared {
            store: self.store.clone(),
            key: self.key.clone(),
            clock: self.clock.clone(),
            config: self.config.clone(),
            state: Arc::clone(&self.state),
        })
    }
}

/// Builds [`Transactional`] services; made by [`IdempotencyLayer::into_transactional`].
#[derive(Debug, Clone)]
pub struct TransactionalLayer<St, K = MessageId, C = SystemClock> {
    layer: IdempotencyLayer<St, K, C>,
}

impl<S, St: Clone, K: Clone, C: Clone> Layer<S> for TransactionalLayer<St, K, C> {
    type Service = Transactional<S, St, K, C>;

    fn layer(&self, inner: S) -> Self::Service {
        self.layer.transactional(inner)
    }
}

impl<S, St: Clone, K: Clone, C: Clone> Layer<S> for IdempotencyLayer<St, K, C> {
    type Service = Idempotent<S, St, K, C>;

    fn layer(&self, inner: S) -> Self::Service {
        Idempotent {
            inner,
            shared: self.shared(),
        }
    }
}

/// A per-record service made idempotent: the inner handler runs at most once per key while
/// the record counts, under a lease that ends at the invocation deadline.
///
/// Request: `LambdaEvent<SqsMessage>` (the `Context` carries the deadline). Response:
/// [`Processed<T>`]. Error: [`Error`], each mapping to an [`Outcome`](crate::Outcome).
///
/// # Clone
/// The inner service is cloned for every call: the ready one is taken for the call and a
/// clone is left in its place, because the call awaits the store before using it.
#[derive(Debug)]
pub struct Idempotent<S, St, K = MessageId, C = SystemClock> {
    inner: S,
    shared: Arc<Shared<St, K, C>>,
}

impl<S: Clone, St, K, C> Clone for Idempotent<S, St, K, C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S, St, K, C> Idempotent<S, St, K, C> {
    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, consuming the wrapper.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

/// The future an [`Idempotent`] service returns.
pub type ResponseFuture<T> = Pin<Box<dyn Future<Output = Result<Processed<T>, Error>> + Send>>;

impl<S, St, K, C, T> Service<LambdaEvent<SqsMessage>> for Idempotent<S, St, K, C>
where
    S: Service<LambdaEvent<SqsMessage>, Response = T> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    T: Serialize + DeserializeOwned + Send + 'static,
    St: Store,
    K: KeyExtractor,
    C: Clock,
{
    type Response = Processed<T>;
    type Error = Error;
    type Future = ResponseFuture<T>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.inner
            .poll_ready(cx)
            .map_err(|e| Error::Handler(e.into()))
    }

    fn call(&mut self, event: LambdaEvent<SqsMessage>) -> Self::Future {
        let clone = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, clone);
        Box::pin(engine::run_plain(Arc::clone(&self.shared), ready, event))
    }
}

/// A per-record service whose handler answers a [`Completion`]: a result and DynamoDB
/// writes, committed with the record in one `TransactWriteItems`, so the writes are applied
/// exactly once even if the process dies at any instant.
///
/// Two modes ([`Config::with_mode`]):
/// - [`IdempotencyMode::Lease`] (default): take the lease (a conditional put), run the
///   handler, then commit the writes with the record, fenced by the lease owner token. Two
///   round trips for a fresh record; the handler never runs twice at the same time. Choose
///   it when the handler has effects besides the writes it hands back, or is costly.
/// - [`IdempotencyMode::Optimistic`]: no lease. Run the handler, then commit the writes
///   with a completed record conditioned on no live record: one round trip for a fresh
///   record; a duplicate learns the stored result from the refused commit. Two concurrent
///   deliveries may both run the handler; exactly one commits. Choose it when the writes are
///   the handler's only effects.
///
/// # Clone
/// As for [`Idempotent`], the ready inner service is taken for the call and a clone left in
/// its place.
#[derive(Debug)]
pub struct Transactional<S, St, K = MessageId, C = SystemClock> {
    inner: S,
    shared: Arc<Shared<St, K, C>>,
}

impl<S: Clone, St, K, C> Clone for Transactional<S, St, K, C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S, St, K, C> Transactional<S, St, K, C> {
    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, consuming the wrapper.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, St, K, C, T> Service<LambdaEvent<SqsMessage>> for Transactional<S, St, K, C>
where
    S: Service<LambdaEvent<SqsMessage>, Response = Completion<T>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    T: Serialize + DeserializeOwned + Send + 'static,
    St: TransactionalStore,
    K: KeyExtractor,
    C: Clock,
{
    type Response = Processed<T>;
    type Error = Error;
    type Future = ResponseFuture<T>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.inner
            .poll_ready(cx)
            .map_err(|e| Error::Handler(e.into()))
    }

    fn call(&mut self, event: LambdaEvent<SqsMessage>) -> Self::Future {
        let clone = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, clone);
        let shared = Arc::clone(&self.shared);
        match shared.config.mode {
            IdempotencyMode::Lease => {
                Box::pin(engine::run_transactional_lease(shared, ready, event))
            }
            IdempotencyMode::Optimistic => Box::pin(
                crate::optimistic::run_transactional_optimistic(shared, ready, event),
            ),
        }
    }
}
