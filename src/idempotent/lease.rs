//! The lease driver: take the lease with one conditional write, run the handler under its
//! heartbeat, then finish the record with the mode's [`Finish`] step (an owner-fenced
//! completion, or a commit of the handler's writes with the record); on failure store a
//! permanent failure or release the lease.

use std::sync::Arc;
use std::time::SystemTime;

use lambda_runtime::LambdaEvent;
use tower::{BoxError, Service};

use super::admission::{Claim, Claimed};
use super::finish::{self, commit_error, finish_under_lease, Finish};
use super::heartbeat::{self, expiration_for, lease_end_ms};
use super::in_flight::FlightResult;
use super::invoke::{call_handler, is_permanent};
use super::protocol::Protocol;
use super::store_call::within_deadline;
use super::stored_result::{self, store_fitting};
use crate::clock::{epoch_ms, later_secs, Clock};
use crate::config::Config;
use crate::error::Error;
use crate::hooks::Created;
use crate::key::KeyError;
use crate::outcome::Processed;
use crate::record::{OwnerToken, Status};
use crate::store::{Acquire, AcquireRequest, Commit, CommitRequest, Store};

/// How taking a record's lease ended.
pub(crate) enum Lease<T> {
    /// The lease is ours, under `owner`, until `until_ms` (epoch milliseconds).
    Held { owner: OwnerToken, until_ms: u64 },
    /// The record is answered without it: from what the store holds (a replay, in progress,
    /// another payload), or a failure to take it.
    Answered(Result<Processed<T>, Error>),
}

/// What the handler's run under the lease came to.
pub(crate) enum Ran<D> {
    /// The handler answered, and its final write was sent: `D`.
    Finished(D),
    /// The handler failed.
    HandlerFailed(Error),
}

/// Takes the lease, or answers the record from what the store holds.
pub(crate) async fn acquire<St, K, C, T>(
    protocol: &Protocol<St, K, C>,
    claim: &mut Claim,
) -> Lease<T>
where
    St: Store,
    C: Clock,
    T: serde::de::DeserializeOwned,
{
    let config = &protocol.config;
    let owner = OwnerToken::generate();
    for _ in 0..config.acquire_attempts {
        let now = protocol.clock.now();
        let lease_ms = lease_end_ms(config, claim.deadline, now);
        if lease_ms <= epoch_ms(now) {
            return Lease::Answered(Err(Error::DeadlineNear));
        }
        let request = acquire_request(config, claim, &owner, now, lease_ms);
        let (store, clock) = (&protocol.store, &protocol.clock);
        let acquired = within_deadline(clock, claim.deadline, || store.acquire(&request)).await;
        let existing = match acquired {
            Ok(Acquire::Acquired) => {
                config.hooks.created(&Created {
                    key: &claim.key,
                    status: Status::InProgress,
                    expiration_secs: request.expiration_secs,
                });
                return Lease::Held {
                    owner,
                    until_ms: lease_ms,
                };
            }
            Ok(Acquire::Existing(record)) => record,
            Ok(Acquire::Contended) => continue,
            Err(err) => {
                if err.is_transient() {
                    // The write may have been applied with its answer lost: release it
                    // under our token rather than leave it held by nobody until the deadline
                    // (once: the store has just failed, so do not wait on it long).
                    heartbeat::release(store, clock, 1, &claim.key, &owner, claim.deadline).await;
                }
                return Lease::Answered(Err(Error::Store(err)));
            }
        };
        if let Some(answer) = claim.answer_existing(protocol, existing, now) {
            return Lease::Answered(answer);
        }
    }
    Lease::Answered(Err(Error::Contended {
        key: claim.key.clone(),
    }))
}

/// The request that takes `claim`'s lease under `owner` at `now`, until `lease_ms`.
pub(crate) fn acquire_request(
    config: &Config,
    claim: &Claim,
    owner: &OwnerToken,
    now: SystemTime,
    lease_ms: u64,
) -> AcquireRequest {
    AcquireRequest {
        key: claim.key.clone(),
        owner: owner.clone(),
        now,
        lease_expiration_ms: lease_ms,
        expiration_secs: expiration_for(config, now, lease_ms),
        validation: claim.stored_validation(),
    }
}

/// After the handler failed under a lease: store a permanent failure, or release.
pub(crate) async fn settle_failure<St, K, C, T>(
    protocol: &Protocol<St, K, C>,
    claim: &mut Claim,
    owner: &OwnerToken,
    err: Error,
) -> Result<Processed<T>, Error>
where
    St: Store,
    C: Clock,
{
    if matches!(err, Error::LeaseLost { .. }) {
        // Cancelled by the heartbeat: the lease is someone else's now.
        return Err(err);
    }
    let (store, clock, config) = (&protocol.store, &protocol.clock, &protocol.config);
    if !is_permanent(&err) {
        let attempts = config.commit_attempts;
        heartbeat::release(store, clock, attempts, &claim.key, owner, claim.deadline).await;
        claim.handler_failed();
        return Err(err);
    }
    let answer = finish::store_failure(
        store,
        clock,
        config,
        &claim.key,
        owner,
        claim.deadline,
        &err,
    )
    .await;
    if let Error::Permanent { .. } = &answer {
        let stored = finish::stored_failure_message(config, &err);
        claim.finish(FlightResult::FailedPermanently {
            data: serde_json::Value::String(stored).to_string(),
            validation: claim.stored_validation(),
        });
    }
    Err(answer)
}

/// A record without a key, processing without idempotency chosen
/// ([`MissingKey::ProcessUnprotected`](crate::MissingKey)): the handler runs, unprotected.
pub(crate) async fn unprotected<St, K, C, S, I, T>(
    protocol: Arc<Protocol<St, K, C>>,
    inner: S,
    event: LambdaEvent<I>,
    _err: KeyError,
) -> Result<Processed<T>, Error>
where
    S: Service<LambdaEvent<I>, Response = T>,
    S::Error: Into<BoxError>,
    C: Clock,
{
    tracing::warn!(
        error_type = "Idempotency.KeyError",
        "no idempotency key: processing without idempotency"
    );
    let response = Box::pin(call_handler(inner, event, &protocol.clock)).await?;
    Ok(Processed::Unprotected(response))
}

/// The lease protocol for a claimed record: acquire, run the handler under the heartbeat,
/// finish with `M`'s step (or store the failure, or release).
pub(crate) async fn run<M, S, St, K, C, I>(
    record: Claimed<St, K, C, S, I>,
) -> Result<Processed<M::Value>, Error>
where
    M: Finish<S::Response, St>,
    S: Service<LambdaEvent<I>>,
    S::Error: Into<BoxError>,
    St: Store,
    C: Clock,
{
    let (protocol, inner, event, mut claim) = record.into_parts();
    let (owner, held_until_ms) = match acquire(&protocol, &mut claim).await {
        Lease::Held { owner, until_ms } => (owner, until_ms),
        Lease::Answered(answer) => return answer,
    };
    let (store, clock, config) = (&protocol.store, &protocol.clock, &protocol.config);
    let (key, deadline) = (&claim.key, claim.deadline);
    // Only a commit carries the payload hash again; a completion keeps the one the lease
    // stored (so a result-only handler copies no hash it would drop).
    let validation = if M::HAS_WRITES {
        claim.stored_validation()
    } else {
        None
    };
    let heartbeat = protocol.heartbeat(key, &owner, deadline, held_until_ms);
    // The heartbeat covers the handler and the final write.
    let work = async {
        let response = match call_handler(inner, event, &protocol.clock).await {
            Ok(response) => response,
            Err(err) => return Ran::HandlerFailed(err),
        };
        let (value, writes) = M::into_parts(response);
        let now = clock.now();
        let expiration_secs = later_secs(now, config.expires_after);
        let request = M::request(CommitRequest {
            key: key.clone(),
            owner: owner.clone(),
            now,
            status: Status::Completed,
            data: String::new(),
            expiration_secs,
            validation,
            writes,
        });
        heartbeat.final_write_sending();
        let json = stored_result::to_json(&value, config);
        let finished = store_fitting(json, request, |request| async move {
            let answer =
                finish_under_lease::<M, _, _, _>(store, clock, config, &request, deadline).await;
            (request, answer)
        })
        .await;
        Ran::Finished((value, expiration_secs, finished))
    };
    let (value, expiration_secs, finished) = match heartbeat.run(work).await {
        Ok(Ran::Finished(done)) => done,
        Ok(Ran::HandlerFailed(err)) => {
            return settle_failure(&protocol, &mut claim, &owner, err).await
        }
        Err(lost) => return Err(lost),
    };
    let answer = match finished {
        Ok((Commit::Applied, data)) => {
            return claim.executed(&protocol, value, data, expiration_secs)
        }
        Ok((Commit::RecordRefused(_), _)) => return Err(Error::LeaseLost { key: claim.key }),
        Ok((other, _)) => Ok(other),
        // The store stayed down: the record keeps its lease until the deadline.
        Err(err) => Err(err),
    };
    let err = commit_error(&claim.key, answer);
    let refused_for_good = err.is_request_fault() || matches!(err, Error::Conflict { .. });
    if refused_for_good || err.misconfiguration().is_some() {
        // Nothing was applied and sending it again will not help now: free the key (for a
        // store not set up, a table of the handler's writes missing say, so that the batch
        // applies once it is fixed without waiting for this lease to end).
        let attempts = config.commit_attempts;
        heartbeat::release(store, clock, attempts, &claim.key, &owner, claim.deadline).await;
        if refused_for_good {
            claim.handler_failed();
        }
    }
    Err(err)
}
