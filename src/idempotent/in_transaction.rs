//! The in-transaction driver, for handlers that write in the store's own transaction
//! ([`TransactionScope`]): the handler runs inside a transaction that also writes the
//! record's final state, so its writes commit with the record or not at all.
//! - Lease mode: the transaction is opened first (a record waiting for one holds no lease),
//!   then the lease is taken (and kept by the heartbeat) outside it, as the lease driver
//!   does; the final record is written in the transaction, fenced by the owner, and
//!   committed with the handler's writes.
//! - Optimistic mode: the in-progress record is written inside the transaction, so the
//!   uncommitted row is the mutual exclusion: a duplicate waits on it (up to the deadline)
//!   and then finds the final record. Nothing is visible before the commit, and a process
//!   that dies leaves nothing behind.

use futures_util::FutureExt;

use lambda_runtime::LambdaEvent;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tower::{BoxError, Service};

use super::admission::Claimed;
use super::finish::commit_error;
use super::heartbeat::{self, lease_end_ms};
use super::invoke::{call_handler, is_permanent};
use super::lease::{self, Lease, Ran};
use super::store_call::within_deadline;
use super::stored_result::{self, store_fitting};
use crate::clock::{epoch_ms, later_secs, Clock, Deadline};
use crate::config::CommitStrategy;
use crate::error::Error;
use crate::hooks::Created;
use crate::outcome::Processed;
use crate::record::{OwnerToken, Status};
use crate::store::{Acquire, Commit, CompleteRequest, StoreError, TransactionScope};

/// The handler kind of a handler that writes in the store's own transaction.
///
/// The store is a [`TransactionScope`] such as `PostgresStore` (`postgres` feature); the
/// handler receives the open transaction, and its writes commit with the record's final state. Chosen with
/// [`IdempotencyLayer::in_transaction`](crate::IdempotencyLayer::in_transaction).
#[derive(Debug, Clone, Copy, Default)]
pub struct InTransaction;

/// What a handler in a [`TransactionScope`] receives: the event, and the open transaction
/// its writes go in.
#[derive(Debug)]
#[non_exhaustive]
pub struct TransactionEvent<E, Tx> {
    /// The event (with its `Context`).
    pub event: LambdaEvent<E>,
    /// The transaction (for `PostgresStore` (`postgres` feature), a `PgTransaction`).
    pub transaction: Tx,
}

/// Opens a transaction that may wait or idle until `deadline`'s call margin, within it.
async fn begin<St: TransactionScope, C: Clock>(
    store: &St,
    clock: &C,
    deadline: Deadline,
) -> Result<St::Transaction, StoreError> {
    let hold_for = deadline.left_for_calls(clock.now());
    within_deadline(clock, deadline, || store.begin(hold_for)).await
}

/// Rolls `transaction` back, within `deadline`: a rollback not sent in time is left to the
/// transaction's drop (dropped, it is rolled back).
async fn rollback<St: TransactionScope, C: Clock>(
    store: &St,
    clock: &C,
    transaction: &St::Transaction,
    deadline: Deadline,
) {
    let rollback = || store.rollback(transaction).map(Ok);
    let _ = within_deadline(clock, deadline, rollback).await;
}

/// The final record (`request` with the result as its data) written in `transaction` and
/// committed within `deadline`, in its stored form (compressed or a marker when the result
/// does not fit).
async fn complete_in<St: TransactionScope, C: Clock>(
    store: &St,
    clock: &C,
    transaction: &St::Transaction,
    request: CompleteRequest,
    json: stored_result::ResultText,
    deadline: Deadline,
) -> Result<(Commit, String), StoreError> {
    let finished = store_fitting(json, request, |request| async move {
        let complete = || store.complete_in(transaction, &request);
        let answer = within_deadline(clock, deadline, complete).await;
        (request, answer)
    })
    .await;
    if finished.is_err() {
        // Nothing was committed; end the transaction if it is still open.
        rollback(store, clock, transaction, deadline).await;
    }
    finished
}

/// Runs the handler with `event` and the open `transaction`; a handler that fails has the
/// transaction rolled back, its writes with it.
async fn handle_in<S, St, C, I, T>(
    inner: S,
    event: LambdaEvent<I>,
    (store, transaction): (&St, &St::Transaction),
    clock: &C,
    deadline: Deadline,
) -> Result<T, Error>
where
    S: Service<TransactionEvent<I, St::Transaction>, Response = T>,
    S::Error: Into<BoxError>,
    St: TransactionScope,
    C: Clock,
{
    let handed = TransactionEvent {
        event,
        transaction: transaction.clone(),
    };
    let handled = call_handler(inner, handed, clock).await;
    if handled.is_err() {
        rollback(store, clock, transaction, deadline).await;
    }
    handled
}

/// Handlers that write in the store's transaction, for a claimed record: under a lease or
/// optimistically, as the protocol's commit strategy says.
impl<St, K, C, S, I, T> Claimed<St, K, C, S, I>
where
    S: Service<TransactionEvent<I, St::Transaction>, Response = T>,
    S::Error: Into<BoxError>,
    T: Serialize + DeserializeOwned,
    St: TransactionScope,
    C: Clock,
{
    pub(crate) async fn in_transaction(self) -> Result<Processed<T>, Error> {
        match self.protocol.commit {
            CommitStrategy::Lease => self.under_lease().await,
            CommitStrategy::Optimistic => self.optimistic().await,
        }
    }

    async fn under_lease(self) -> Result<Processed<T>, Error> {
        let (protocol, inner, event, mut claim) = self.into_parts();
        let protocol = &*protocol;
        let (store, clock, config) = (&protocol.store, &protocol.clock, &protocol.config);
        let (key, deadline) = (claim.key.clone(), claim.deadline);
        if deadline.epoch_ms() <= epoch_ms(clock.now()) {
            return Err(Error::DeadlineNear);
        }
        // The transaction first: a record waiting for one (the store runs a few at once) holds
        // no lease meanwhile, so a lease capped for the handler does not lapse in the queue, and
        // a record the batch stops waiting for leaves no lease behind.
        let transaction = begin(store, clock, deadline).await.map_err(Error::Store)?;
        let (owner, held_until_ms) = match lease::acquire(protocol, &mut claim).await {
            Lease::Held { owner, until_ms } => (owner, until_ms),
            Lease::Answered(answer) => {
                rollback(store, clock, &transaction, deadline).await;
                return answer;
            }
        };
        let heartbeat = protocol.heartbeat(&key, &owner, deadline, held_until_ms);
        // The heartbeat covers the handler and the commit; cancelled, the transaction is
        // dropped with the work (its connection closed: the server rolls it back).
        let work = async {
            let transaction = transaction;
            let handled = handle_in(inner, event, (store, &transaction), clock, deadline).await;
            let value = match handled {
                Ok(value) => value,
                Err(err) => return Ran::HandlerFailed(err),
            };
            let now = clock.now();
            let expiration_secs = later_secs(now, config.expires_after);
            let request = CompleteRequest {
                key: key.clone(),
                owner: owner.clone(),
                status: Status::Completed,
                data: String::new(),
                expiration_secs,
                now,
            };
            let json = stored_result::to_json(&value, config);
            heartbeat.final_write_sending();
            let finished = complete_in(store, clock, &transaction, request, json, deadline).await;
            Ran::Finished((value, expiration_secs, finished))
        };
        let (value, expiration_secs, finished) = match heartbeat.run(work).await {
            Ok(Ran::Finished(done)) => done,
            Ok(Ran::HandlerFailed(err)) => {
                return lease::settle_failure(protocol, &mut claim, &owner, err).await
            }
            Err(lost) => return Err(lost),
        };
        match finished {
            Ok((Commit::Applied, data)) => claim.executed(protocol, value, data, expiration_secs),
            Ok((Commit::RecordRefused(_), _)) => Err(Error::LeaseLost { key: claim.key }),
            Ok((other, _)) => Err(commit_error(&claim.key, Ok(other))),
            Err(err) if !err.is_transient() => {
                // Nothing was applied: free the key for the next delivery.
                let attempts = config.commit_attempts;
                heartbeat::release(store, clock, attempts, &claim.key, &owner, deadline).await;
                claim.handler_failed();
                Err(Error::Store(err))
            }
            // The commit's answer was lost and the record could not tell: the lease stays
            // until the deadline, then the next delivery finds the record as it is.
            Err(err) => Err(Error::Store(err)),
        }
    }

    async fn optimistic(self) -> Result<Processed<T>, Error> {
        let (protocol, inner, event, mut claim) = self.into_parts();
        let protocol = &*protocol;
        let (store, clock, config) = (&protocol.store, &protocol.clock, &protocol.config);
        if claim.deadline.epoch_ms() <= epoch_ms(clock.now()) {
            return Err(Error::DeadlineNear);
        }
        let owner = OwnerToken::generate();
        let deadline = claim.deadline;
        let transaction = begin(store, clock, deadline).await.map_err(Error::Store)?;
        let mut acquired = false;
        for _ in 0..config.acquire_attempts {
            let now = clock.now();
            let lease_ms = lease_end_ms(config, claim.deadline, now);
            let request = lease::acquire_request(config, &claim, &owner, now, lease_ms);
            let acquire = || store.acquire_in(&transaction, &request);
            match within_deadline(clock, deadline, acquire).await {
                Ok(Acquire::Acquired) => {
                    acquired = true;
                    break;
                }
                // Written and committed meanwhile: the next statement sees it.
                Ok(Acquire::Contended) => continue,
                Ok(Acquire::Existing(record)) => {
                    // A record read from before a concurrent commit may show a lease that has
                    // since ended: then ask again (the transaction is intact).
                    if let Some(answer) = claim.answer_existing(protocol, record, now) {
                        rollback(store, clock, &transaction, deadline).await;
                        return answer;
                    }
                }
                Err(err) => {
                    rollback(store, clock, &transaction, deadline).await;
                    return Err(Error::Store(err));
                }
            }
        }
        if !acquired {
            rollback(store, clock, &transaction, deadline).await;
            return Err(Error::Contended { key: claim.key });
        }
        let value = match handle_in(inner, event, (store, &transaction), clock, deadline).await {
            Ok(value) => value,
            Err(err) => {
                // The record went with the handler's writes.
                if !is_permanent(&err) {
                    claim.handler_failed();
                    return Err(err);
                }
                // A permanent failure is stored as the lease driver stores it.
                return match lease::acquire(protocol, &mut claim).await {
                    Lease::Held { owner, .. } => {
                        lease::settle_failure(protocol, &mut claim, &owner, err).await
                    }
                    Lease::Answered(answer) => answer,
                };
            }
        };
        let now = clock.now();
        let expiration_secs = later_secs(now, config.expires_after);
        let request = CompleteRequest {
            key: claim.key.clone(),
            owner,
            status: Status::Completed,
            data: String::new(),
            expiration_secs,
            now,
        };
        let json = stored_result::to_json(&value, config);
        match complete_in(store, clock, &transaction, request, json, deadline).await {
            Ok((Commit::Applied, data)) => {
                config.hooks.created(&Created {
                    key: &claim.key,
                    status: Status::Completed,
                    expiration_secs,
                });
                claim.executed(protocol, value, data, expiration_secs)
            }
            // Our own uncommitted row cannot change under us; answered as contention.
            Ok((Commit::RecordRefused(_), _)) => Err(Error::Contended { key: claim.key }),
            Ok((other, _)) => Err(commit_error(&claim.key, Ok(other))),
            Err(err) => {
                if !err.is_transient() {
                    claim.handler_failed();
                }
                Err(Error::Store(err))
            }
        }
    }
}
