//! Replaying a batch's pre-checked duplicates together ([`BatchProcessor::with_batch_replay`]):
//! the records of a concurrent batch that the pre-check finds completed are answered at their
//! turn from one replay phase, instead of each through its own call of the service.
//!
//! [`BatchProcessor::with_batch_replay`]: crate::batch::BatchProcessor::with_batch_replay

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use lambda_runtime::Context;
use tower::util::Either;

use crate::outcome::Processed;

/// One offered record's replay, decided at the record's turn (its expiry, lease and payload
/// checked against what was read then, the response hook called, the local cache filled):
/// `None` when its own call answers it instead.
pub(crate) type Candidate<T> = Box<dyn FnOnce() -> Option<Processed<T>> + Send>;

/// The type-erased replays of one protocol: given the batch's context, a candidate for each
/// record the batch offered to the pre-check, by offered position, each a boxed
/// [`Candidate`] of the protocol's result type.
type Replays =
    dyn Fn(Context) -> BoxFuture<'static, Vec<Option<Box<dyn Any + Send>>>> + Send + Sync;

/// How a per-record service replays the batch's pre-checked records together: made by an
/// [`Idempotent`](crate::Idempotent) service (see [`BatchReplay`]). Opaque.
#[derive(Clone)]
pub struct BatchReplayer(Arc<Replays>);

impl fmt::Debug for BatchReplayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BatchReplayer")
    }
}

impl BatchReplayer {
    pub(crate) fn new<T, F>(replays: F) -> Self
    where
        T: Send + 'static,
        F: Fn(Context) -> BoxFuture<'static, Vec<Option<Candidate<T>>>> + Send + Sync + 'static,
    {
        Self(Arc::new(move |context| {
            replays(context)
                .map(|candidates| {
                    candidates
                        .into_iter()
                        .map(|candidate| candidate.map(|c| Box::new(c) as Box<dyn Any + Send>))
                        .collect()
                })
                .boxed()
        }))
    }

    /// The candidates of the current batch's offered records, by offered position: none
    /// for a candidate not of the processor's result type `T`.
    pub(crate) async fn candidates<T: 'static>(
        &self,
        context: &Context,
    ) -> Vec<Option<Candidate<T>>> {
        (self.0)(context.clone())
            .await
            .into_iter()
            .map(|candidate| Some(*candidate?.downcast::<Candidate<T>>().ok()?))
            .collect()
    }
}

/// A per-record service that can replay a batch's pre-checked records together.
///
/// See [`BatchProcessor::with_batch_replay`](crate::batch::BatchProcessor::with_batch_replay).
/// It is an [`Idempotent`](crate::Idempotent) service (one whose mode has no such replay, the
/// sequence-guarded one, answers none), or either of two such services.
pub trait BatchReplay<R> {
    /// This service's replayer, if its mode has one.
    #[doc(hidden)]
    fn batch_replayer(&self) -> Option<BatchReplayer>;
}

impl<A, B, R> BatchReplay<R> for Either<A, B>
where
    A: BatchReplay<R>,
    B: BatchReplay<R>,
{
    fn batch_replayer(&self) -> Option<BatchReplayer> {
        match self {
            Either::Left(a) => a.batch_replayer(),
            Either::Right(b) => b.batch_replayer(),
        }
    }
}
