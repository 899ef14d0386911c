//! [`Processed`]: a record's result and whether the handler ran for it.

use crate::outcome::Outcome;

/// The result of one record that succeeded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Processed<T> {
    /// The handler ran now and its result was stored.
    Executed(T),
    /// The handler did not run: the result stored by an earlier run was returned.
    Replayed(T),
    /// The handler ran without idempotency (the key was absent and that was allowed).
    Unprotected(T),
}

impl<T> Processed<T> {
    /// The result, however it was obtained.
    pub fn into_value(self) -> T {
        match self {
            Processed::Executed(v) | Processed::Replayed(v) | Processed::Unprotected(v) => v,
        }
    }

    /// A reference to the result.
    pub fn value(&self) -> &T {
        match self {
            Processed::Executed(v) | Processed::Replayed(v) | Processed::Unprotected(v) => v,
        }
    }

    /// The matching outcome.
    pub fn outcome(&self) -> Outcome {
        match self {
            Processed::Executed(_) => Outcome::Executed,
            Processed::Replayed(_) => Outcome::Replayed,
            Processed::Unprotected(_) => Outcome::Unprotected,
        }
    }
}
