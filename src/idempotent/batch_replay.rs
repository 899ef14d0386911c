//! Replaying a batch's pre-checked duplicates together ([`BatchProcessor::with_batch_replay`]):
//! the records of a concurrent batch that the pre-check finds completed are answered at their
//! turn from one replay phase, instead of each through its own call of the service.
//!
//! [`BatchProcessor::with_batch_replay`]: crate::batch::BatchProcessor::with_batch_replay

use std::fmt;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use lambda_runtime::Context;
use serde::de::DeserializeOwned;
use tower::util::Either;

use super::batch_scope::Batch;
use super::precheck::{replay_offered, Candidate};
use super::protocol::Protocol;
use crate::clock::Clock;
use crate::input::Input;
use crate::key::KeyExtractor;
use crate::store::Store;

/// The replays of one protocol: given a batch and its context, a candidate for each record
/// the batch offered to the pre-check, by offered position.
type Replays<R, T> =
    dyn Fn(Arc<Batch<R>>, Context) -> BoxFuture<'static, Vec<Option<Candidate<T>>>> + Send + Sync;

/// How a per-record service replays the pre-checked records of a batch of records `R`
/// together, answering `T`: made by an [`Idempotent`](crate::Idempotent) service (see
/// [`BatchReplay`]). Opaque.
pub struct BatchReplayer<R, T>(Option<Arc<Replays<R, T>>>);

impl<R, T> Clone for BatchReplayer<R, T> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<R, T> fmt::Debug for BatchReplayer<R, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BatchReplayer")
    }
}

impl<R, T> BatchReplayer<R, T> {
    /// No replay: every record answers through its own call.
    pub(crate) fn none() -> Self {
        Self(None)
    }

    /// The candidates of `batch`'s offered records, by offered position (none without a
    /// replay).
    pub(crate) fn candidates(
        &self,
        batch: &Arc<Batch<R>>,
        context: &Context,
    ) -> BoxFuture<'static, Vec<Option<Candidate<T>>>>
    where
        T: 'static,
    {
        match &self.0 {
            Some(replays) => replays(Arc::clone(batch), context.clone()),
            None => Box::pin(futures_util::future::ready(Vec::new())),
        }
    }

    /// The replayer of `protocol`'s records: [`replay_offered`].
    pub(crate) fn of<St, K, C>(protocol: Arc<Protocol<St, K, C>>) -> Self
    where
        St: Store,
        K: KeyExtractor<R>,
        C: Clock,
        R: Input + Send + Sync + 'static,
        T: DeserializeOwned + Send + 'static,
    {
        Self(Some(Arc::new(move |batch: Arc<Batch<R>>, context| {
            let protocol = Arc::clone(&protocol);
            async move {
                let (offer, failures) = (&batch.offer, &batch.failures);
                replay_offered(&protocol, offer, failures, &context).await
            }
            .boxed()
        })))
    }
}

/// How a [`BatchProcessor`](crate::batch::BatchProcessor) replays pre-checked records.
///
/// `()`: not together (the default); a [`BatchReplayer`]: with its service's
/// ([`with_batch_replay`](crate::batch::BatchProcessor::with_batch_replay)). Sealed.
pub trait ReplayPhase<R, T>: phase::Phase<R, T> {}

impl<R, T> ReplayPhase<R, T> for () {}
impl<R, T> ReplayPhase<R, T> for BatchReplayer<R, T> {}

/// The sealed half of [`ReplayPhase`], which only this crate can name.
pub(crate) mod phase {
    use super::BatchReplayer;

    /// The replay phase of a batch of records `R` answering `T`.
    pub trait Phase<R, T> {
        /// The replayer of the batch's pre-checked records, if they are replayed together.
        fn replayer(&self) -> Option<&BatchReplayer<R, T>>;
    }

    impl<R, T> Phase<R, T> for () {
        fn replayer(&self) -> Option<&BatchReplayer<R, T>> {
            None
        }
    }

    impl<R, T> Phase<R, T> for BatchReplayer<R, T> {
        fn replayer(&self) -> Option<&BatchReplayer<R, T>> {
            self.0.is_some().then_some(self)
        }
    }
}

/// A per-record service that can replay a batch's pre-checked records together.
///
/// See [`BatchProcessor::with_batch_replay`](crate::batch::BatchProcessor::with_batch_replay).
/// It is an [`Idempotent`](crate::Idempotent) service (one whose handler kind has no such
/// replay, the sequence-guarded one, answers none), or either of two such services.
pub trait BatchReplay<R> {
    /// The result the service answers (in [`Processed`](crate::Processed)).
    type Value;

    /// This service's replayer (one that replays nothing, if its handler kind has none).
    #[doc(hidden)]
    fn batch_replayer(&self) -> BatchReplayer<R, Self::Value>;
}

impl<A, B, R> BatchReplay<R> for Either<A, B>
where
    A: BatchReplay<R>,
    B: BatchReplay<R, Value = A::Value>,
{
    type Value = A::Value;

    fn batch_replayer(&self) -> BatchReplayer<R, A::Value> {
        match self {
            Either::Left(a) => a.batch_replayer(),
            Either::Right(b) => b.batch_replayer(),
        }
    }
}
