//! [`TransactionScope`]: a store that runs the handler inside one of its own transactions,
//! so the handler's writes commit together with the record's final state.

use std::future::Future;
use std::time::Duration;

use super::{Acquire, AcquireRequest, Commit, CompleteRequest, Store, StoreError};

/// A store whose transactions a handler can write in (`PostgresStore`, `postgres` feature).
/// The handler receives the open transaction, and its writes commit with the record's final
/// state or not at all, so they happen once even if the process dies at any instant.
///
/// Used by [`IdempotencyLayer::in_transaction`](crate::IdempotencyLayer::in_transaction), in
/// both modes:
/// - lease: the lease is taken and kept (heartbeat) outside the transaction; the handler runs
///   in it; [`complete_in`](Self::complete_in) writes the final record, fenced by the owner,
///   and commits.
/// - optimistic: [`acquire_in`](Self::acquire_in) writes the in-progress record inside the
///   transaction, so the uncommitted row itself is the mutual exclusion (a duplicate waits
///   on it, then finds the final record); nothing is visible until the commit.
pub trait TransactionScope: Store {
    /// The open transaction handed to the handler (a handle: clones share it).
    type Transaction: Clone + Send + Sync + 'static;

    /// Refuses a store configured so that it could never run a handler's transaction (for
    /// `PostgresStore`, a pool of fewer than 2 connections, one being kept for the lease
    /// calls) with [`StoreError::Misconfigured`].
    /// [`IdempotencyLayer::in_transaction`](crate::IdempotencyLayer::in_transaction) calls it,
    /// so such a store is refused when the layer is built, not at the first record. The
    /// default accepts every configuration.
    fn check_transactions(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// Opens a transaction. It waits for its turn and its connection (a store may run only
    /// so many at once: `PostgresStore` keeps a connection for the lease calls), waits on a
    /// row held by another transaction, and stays open without activity, each for at most
    /// `hold_for` (the time left before the invocation's call margin); dropped without
    /// [`complete_in`](Self::complete_in) or [`rollback`](Self::rollback), it is rolled
    /// back.
    fn begin(
        &self,
        hold_for: Duration,
    ) -> impl Future<Output = Result<Self::Transaction, StoreError>> + Send;

    /// [`Store::acquire`] inside `transaction`. A row held by another transaction for longer
    /// than the transaction's `hold_for` is answered as [`Acquire::Existing`] with an
    /// in-progress record without lease time (in flight elsewhere).
    fn acquire_in(
        &self,
        transaction: &Self::Transaction,
        request: &AcquireRequest,
    ) -> impl Future<Output = Result<Acquire, StoreError>> + Send;

    /// Writes the final record (fenced as [`Store::complete`]) inside `transaction` and
    /// commits it: [`Commit::Applied`] (the handler's writes with it), or
    /// [`Commit::RecordRefused`] with the record as it is (rolled back: the lease was
    /// lost). [`StoreError::ItemTooLarge`] leaves the transaction open and unchanged. A
    /// commit whose answer was lost is [`Commit::Applied`] if the record shows it applied;
    /// [`StoreError::TransactionAborted`] when the transaction could not commit and nothing
    /// of it was applied.
    fn complete_in(
        &self,
        transaction: &Self::Transaction,
        request: &CompleteRequest,
    ) -> impl Future<Output = Result<Commit, StoreError>> + Send;

    /// Rolls `transaction` back (nothing of it is applied).
    fn rollback(&self, transaction: &Self::Transaction) -> impl Future<Output = ()> + Send;
}
