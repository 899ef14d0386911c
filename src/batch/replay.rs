//! Replaying a batch's pre-checked duplicates together ([`BatchProcessor::with_batch_replay`]):
//! the records the pre-check finds completed are answered in one pass over the batch, before
//! the others run, instead of each through its own call of the service.
//!
//! [`BatchProcessor::with_batch_replay`]: super::BatchProcessor::with_batch_replay

use std::any::Any;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use lambda_runtime::Context;
use tower::util::Either;

use crate::clock::{Clock, Deadline};
use crate::processed::Processed;

/// The type-erased replays of one protocol: given the batch's context, the replays of the
/// records the batch offered to the pre-check, by offered position, each a boxed
/// `Processed<T>` of the protocol's result type.
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
        F: Fn(Context) -> BoxFuture<'static, Vec<Option<Processed<T>>>> + Send + Sync + 'static,
    {
        Self(Arc::new(move |context| {
            replays(context)
                .map(|replays| {
                    replays
                        .into_iter()
                        .map(|replay| replay.map(|p| Box::new(p) as Box<dyn Any + Send>))
                        .collect()
                })
                .boxed()
        }))
    }

    /// The replays of the current batch's offered records, by offered position: none when the
    /// deadline comes first (less than `margin` left before it at the start, or
    /// [`ANSWER_MARGIN`](super::ANSWER_MARGIN) left at the end), when the replays panic (a
    /// user's hook or store: each record then meets it on its own path, and fails alone), or
    /// when a replay is not of the processor's result type `T`.
    pub(crate) async fn replays<T: 'static, C: Clock>(
        &self,
        context: &Context,
        deadline: Deadline,
        margin: std::time::Duration,
        clock: &C,
    ) -> Vec<Option<Processed<T>>> {
        if deadline.is_within(margin, clock.now()) {
            return Vec::new();
        }
        let replays = AssertUnwindSafe((self.0)(context.clone())).catch_unwind();
        let replays = tokio::select! {
            replays = replays => replays.unwrap_or_default(),
            () = clock.sleep_until(deadline.before(super::ANSWER_MARGIN)) => Vec::new(),
        };
        replays
            .into_iter()
            .map(|replay| Some(*replay?.downcast::<Processed<T>>().ok()?))
            .collect()
    }
}

/// A per-record service that can replay a batch's pre-checked records together
/// ([`BatchProcessor::with_batch_replay`](super::BatchProcessor::with_batch_replay)): an
/// [`Idempotent`](crate::Idempotent) service (one whose mode has no such replay, the
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
