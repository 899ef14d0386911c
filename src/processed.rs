//! [`Processed`]: a record's result and whether the handler ran for it.

use crate::outcome::Outcome;

/// The result of one record that succeeded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Processed<T> {
    /// The handler ran now and its result was stored.
    Executed(T),
    /// The result stored by an earlier run was returned. In lease mode the handler did not
    /// run; in optimistic mode it may have run, its writes not committed (another run's were).
    Replayed(T),
    /// An earlier run completed (see [`Replayed`](Processed::Replayed)), but its result is not available
    /// (it was too large to store even compressed, could not be serialized, or no longer
    /// decodes as the result type). The message is a duplicate and is acknowledged.
    ReplayedWithoutResult,
    /// The handler ran without idempotency (the key was absent and that was allowed).
    Unprotected(T),
}

impl<T> Processed<T> {
    /// The result, however it was obtained (`None` for
    /// [`ReplayedWithoutResult`](Processed::ReplayedWithoutResult)).
    pub fn into_value(self) -> Option<T> {
        match self {
            Processed::Executed(v) | Processed::Replayed(v) | Processed::Unprotected(v) => Some(v),
            Processed::ReplayedWithoutResult => None,
        }
    }

    /// A reference to the result, if there is one.
    pub fn value(&self) -> Option<&T> {
        match self {
            Processed::Executed(v) | Processed::Replayed(v) | Processed::Unprotected(v) => Some(v),
            Processed::ReplayedWithoutResult => None,
        }
    }

    /// The result comes from an earlier run (in lease mode the handler did not run; in
    /// optimistic mode it may have, its writes not committed).
    pub fn is_replay(&self) -> bool {
        matches!(
            self,
            Processed::Replayed(_) | Processed::ReplayedWithoutResult
        )
    }

    /// The matching outcome.
    pub fn outcome(&self) -> Outcome {
        match self {
            Processed::Executed(_) => Outcome::Executed,
            Processed::Replayed(_) | Processed::ReplayedWithoutResult => Outcome::Replayed,
            Processed::Unprotected(_) => Outcome::Unprotected,
        }
    }
}
