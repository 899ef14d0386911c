//! [`Idempotent`]: one service for every handler, its handler kind a type parameter.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use lambda_runtime::LambdaEvent;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tower::{BoxError, Service};

use super::admission::{admitted, key_required, Claimed};
use super::batch_replay::{BatchReplay, BatchReplayer};
use super::batch_scope::BatchRecord;
use super::completion::Completion;
use super::finish::{ResultAndWrites, ResultOnly};
use super::in_transaction::{InTransaction, TransactionEvent};
use super::protocol::Protocol;
use super::sequenced::{self, PositionOf, Sequence, Sequenced};
use super::{lease, optimistic};
use crate::clock::{Clock, SystemClock};
use crate::config::CommitStrategy;
use crate::error::Error;
use crate::input::Input;
use crate::key::{KeyExtractor, MessageId};
use crate::outcome::Processed;
use crate::store::{GuardedWrite, Store, TransactionScope, TransactionalStore};

/// A handler made idempotent: it runs at most once per key while the key's record counts,
/// under a lease that ends at the invocation deadline, and duplicates get its stored result.
///
/// Request: `LambdaEvent<E>` for any event `E` that is an [`Input`] (an SQS
/// message, for one), which the key extractor and payload validation read; the `Context`
/// carries the deadline. In a batch, a [`BatchRecord<E>`](crate::batch::BatchRecord): the
/// event with what its batch knows. Response: [`Processed<T>`]. Error: [`Error`], each mapping
/// to an [`Outcome`](crate::Outcome).
///
/// The handler kind `M`:
/// - [`ResultOnly`] (the default): the handler answers `T`, stored with an owner-fenced
///   completion under the lease.
/// - [`ResultAndWrites`] ([`IdempotencyLayer::with_writes`](crate::IdempotencyLayer::with_writes)):
///   the handler answers a [`Completion<T>`], its result and DynamoDB writes, committed with
///   the record in one transaction, so the writes are applied exactly once even if the
///   process dies at any instant. Two ways to commit
///   ([`IdempotencyLayer::with_commit`](crate::IdempotencyLayer::with_commit)):
///   - [`CommitStrategy::Lease`] (default): take the lease (a conditional put), run the
///     handler, then commit the writes with the record, fenced by the lease owner token.
///     Two round trips for a fresh record; the handler never runs twice at the same time.
///     Choose it when the handler has effects besides the writes it hands back, or is
///     costly.
///   - [`CommitStrategy::Optimistic`]: no lease. Run the handler, then commit the writes
///     with a completed record conditioned on no live record: one round trip for a fresh
///     record; a duplicate learns the stored result from the refused commit. Two
///     concurrent deliveries may both run the handler; exactly one commits. Choose it when
///     the writes are the handler's only effects.
///
/// # Clone
/// The inner service is cloned for every call: the ready one is taken for the call and a
/// clone is left in its place, because the call awaits the store before using it.
#[derive(Debug)]
pub struct Idempotent<S, St, K = MessageId, C = SystemClock, M = ResultOnly> {
    inner: S,
    protocol: Arc<Protocol<St, K, C>>,
    mode: PhantomData<fn() -> M>,
}

/// An [`Idempotent`] service whose handler's writes commit with its record.
pub type Transactional<S, St, K = MessageId, C = SystemClock> =
    Idempotent<S, St, K, C, ResultAndWrites>;

impl<S: Clone, St, K, C, M> Clone for Idempotent<S, St, K, C, M> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            protocol: Arc::clone(&self.protocol),
            mode: PhantomData,
        }
    }
}

impl<S, St, K, C, M> Idempotent<S, St, K, C, M> {
    pub(crate) fn new(inner: S, protocol: Arc<Protocol<St, K, C>>) -> Self {
        Self {
            inner,
            protocol,
            mode: PhantomData,
        }
    }

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

    /// The ready inner service, for one call (a clone takes its place), and the protocol.
    fn take_ready(&mut self) -> (S, Arc<Protocol<St, K, C>>)
    where
        S: Clone,
    {
        (self.take_ready_inner(), Arc::clone(&self.protocol))
    }

    /// The ready inner service, for one call outside the protocol (a clone takes its place):
    /// the readiness reserved by `poll_ready` goes with it.
    pub(crate) fn take_ready_inner(&mut self) -> S
    where
        S: Clone,
    {
        let clone = self.inner.clone();
        std::mem::replace(&mut self.inner, clone)
    }
}

/// The future an [`Idempotent`] service returns.
pub type ResponseFuture<T> = Pin<Box<dyn Future<Output = Result<Processed<T>, Error>> + Send>>;

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::ResultOnly {}
    impl Sealed for super::ResultAndWrites {}
    impl Sealed for super::InTransaction {}
    impl Sealed for super::Sequenced {}
}

/// A handler kind of [`Idempotent`] for handler `S`, store `St`, key extractor `K`, clock
/// `C` and event `I`: [`ResultOnly`], [`ResultAndWrites`], [`InTransaction`] or
/// [`Sequenced`]. Sealed.
pub trait HandlerKind<S, St, K, C, I>: sealed::Sealed + Sized {
    /// The result that is stored and replayed.
    type Value;

    /// Polls the handler's readiness.
    #[doc(hidden)]
    fn poll_ready(inner: &mut S, cx: &mut Context<'_>) -> Poll<Result<(), Error>>;

    /// Runs the protocol for one record with the service's ready handler.
    #[doc(hidden)]
    fn call(
        service: &mut Idempotent<S, St, K, C, Self>,
        record: BatchRecord<I>,
    ) -> ResponseFuture<Self::Value>;

    /// The replayer of a batch's pre-checked records, for the handler kinds whose admission
    /// reads the pre-check.
    #[doc(hidden)]
    fn batch_replayer(_service: &Idempotent<S, St, K, C, Self>) -> BatchReplayer<I, Self::Value> {
        BatchReplayer::none()
    }
}

/// Polls a handler's readiness, its error the record's [`Error::Handler`].
fn handler_ready<S: Service<R>, R>(inner: &mut S, cx: &mut Context<'_>) -> Poll<Result<(), Error>>
where
    S::Error: Into<BoxError>,
{
    inner.poll_ready(cx).map_err(|e| Error::Handler(e.into()))
}

impl<S, St, K, C, I, T> HandlerKind<S, St, K, C, I> for ResultOnly
where
    S: Service<LambdaEvent<I>, Response = T> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    T: Serialize + DeserializeOwned + Send + 'static,
    St: Store,
    K: KeyExtractor<I>,
    C: Clock,
    I: Input + Send + Sync + 'static,
{
    type Value = T;

    fn poll_ready(inner: &mut S, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        handler_ready::<_, LambdaEvent<I>>(inner, cx)
    }

    fn call(
        service: &mut Idempotent<S, St, K, C, Self>,
        record: BatchRecord<I>,
    ) -> ResponseFuture<T> {
        let (ready, protocol) = service.take_ready();
        Box::pin(admitted(
            protocol,
            ready,
            record,
            lease::run::<Self, _, _, _, _, _>,
            lease::unprotected,
        ))
    }

    fn batch_replayer(service: &Idempotent<S, St, K, C, Self>) -> BatchReplayer<I, T> {
        BatchReplayer::of(Arc::clone(&service.protocol))
    }
}

impl<S, St, K, C, I, T> HandlerKind<S, St, K, C, I> for ResultAndWrites
where
    S: Service<LambdaEvent<I>, Response = Completion<T>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    T: Serialize + DeserializeOwned + Send + 'static,
    St: TransactionalStore,
    K: KeyExtractor<I>,
    C: Clock,
    I: Input + Send + Sync + 'static,
{
    type Value = T;

    fn poll_ready(inner: &mut S, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        handler_ready::<_, LambdaEvent<I>>(inner, cx)
    }

    fn call(
        service: &mut Idempotent<S, St, K, C, Self>,
        record: BatchRecord<I>,
    ) -> ResponseFuture<T> {
        let (ready, protocol) = service.take_ready();
        match protocol.commit {
            CommitStrategy::Lease => Box::pin(admitted(
                protocol,
                ready,
                record,
                lease::run::<Self, _, _, _, _, _>,
                key_required,
            )),
            CommitStrategy::Optimistic => Box::pin(admitted(
                protocol,
                ready,
                record,
                optimistic::run,
                key_required,
            )),
        }
    }

    fn batch_replayer(service: &Idempotent<S, St, K, C, Self>) -> BatchReplayer<I, T> {
        BatchReplayer::of(Arc::clone(&service.protocol))
    }
}

impl<S, St, K, C, I, T> HandlerKind<S, St, K, C, I> for InTransaction
where
    S: Service<TransactionEvent<I, St::Transaction>, Response = T> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    T: Serialize + DeserializeOwned + Send + 'static,
    St: TransactionScope,
    K: KeyExtractor<I>,
    C: Clock,
    I: Input + Send + Sync + 'static,
{
    type Value = T;

    fn poll_ready(inner: &mut S, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        handler_ready::<_, TransactionEvent<I, St::Transaction>>(inner, cx)
    }

    fn call(
        service: &mut Idempotent<S, St, K, C, Self>,
        record: BatchRecord<I>,
    ) -> ResponseFuture<T> {
        let (ready, protocol) = service.take_ready();
        Box::pin(admitted(
            protocol,
            ready,
            record,
            Claimed::in_transaction,
            key_required,
        ))
    }

    fn batch_replayer(service: &Idempotent<S, St, K, C, Self>) -> BatchReplayer<I, T> {
        BatchReplayer::of(Arc::clone(&service.protocol))
    }
}

impl<S, St, P, C, I, T> HandlerKind<S, St, Sequence<P>, C, I> for Sequenced
where
    S: Service<LambdaEvent<I>, Response = Completion<T>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    T: Send + 'static,
    St: GuardedWrite,
    P: PositionOf<I>,
    C: Clock,
    I: Input + Send + Sync + 'static,
{
    type Value = T;

    fn poll_ready(inner: &mut S, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        handler_ready::<_, LambdaEvent<I>>(inner, cx)
    }

    /// The sequence guard reads the entity itself: the batch's pre-check and failure memo
    /// do not apply.
    fn call(
        service: &mut Idempotent<S, St, Sequence<P>, C, Self>,
        record: BatchRecord<I>,
    ) -> ResponseFuture<T> {
        let (ready, protocol) = service.take_ready();
        Box::pin(sequenced::run(protocol, ready, record.event))
    }
}

impl<S, St, K, C, M, I> Service<LambdaEvent<I>> for Idempotent<S, St, K, C, M>
where
    M: HandlerKind<S, St, K, C, I>,
{
    type Response = Processed<M::Value>;
    type Error = Error;
    type Future = ResponseFuture<M::Value>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        M::poll_ready(&mut self.inner, cx)
    }

    /// Processes `event` as a record of no batch.
    fn call(&mut self, event: LambdaEvent<I>) -> Self::Future {
        M::call(self, BatchRecord::from(event))
    }
}

impl<S, St, K, C, M, I> Service<BatchRecord<I>> for Idempotent<S, St, K, C, M>
where
    M: HandlerKind<S, St, K, C, I>,
{
    type Response = Processed<M::Value>;
    type Error = Error;
    type Future = ResponseFuture<M::Value>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        M::poll_ready(&mut self.inner, cx)
    }

    /// Processes `record` with what its batch knows (see [`BatchRecord`]).
    fn call(&mut self, record: BatchRecord<I>) -> Self::Future {
        M::call(self, record)
    }
}

impl<S, St, K, C, M, I> BatchReplay<I> for Idempotent<S, St, K, C, M>
where
    M: HandlerKind<S, St, K, C, I>,
{
    type Value = M::Value;

    fn batch_replayer(&self) -> BatchReplayer<I, M::Value> {
        M::batch_replayer(self)
    }
}
