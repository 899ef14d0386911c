//! The optimistic driver, for handlers with writes: no lease; run the handler, then commit its
//! writes with the final record only if no live record exists. A duplicate learns the
//! stored answer from the refused commit.

use std::time::SystemTime;

use lambda_runtime::LambdaEvent;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tower::{BoxError, Service};

use super::admission::{Claim, Claimed};
use super::completion::Completion;
use super::finish::{self, commit_error, failure_text, is_our_commit, stored_failure_message};
use super::in_flight::FlightResult;
use super::invoke::{call_handler, is_permanent};
use super::protocol::Protocol;
use super::stored_result::{self, store_fitting};
use crate::clock::{epoch_ms, later_secs, Clock, Deadline};
use crate::error::Error;
use crate::hooks::Created;
use crate::outcome::Processed;
use crate::record::{decide, Decision, OwnerToken, Record, Status};
use crate::store::{Commit, CommitRequest, StoreError, TransactionalStore, Write};

/// How an optimistic commit ended.
enum Fresh {
    /// The writes and the record were committed (now, or by an earlier send).
    Committed { expiration_secs: u64 },
    /// A live record written by someone else refused it.
    Existing(Record, SystemTime),
    /// Refused for another reason (a business condition, a conflict).
    Refused(Commit),
    /// The record kept changing.
    Contended,
}

/// A commit of `status` with `writes` of the claim's key by `owner`, its data, time and
/// expiry not yet set: [`store_fitting`] sets the data, [`commit_fresh`] the time.
fn commit_request(
    claim: &Claim,
    owner: OwnerToken,
    status: Status,
    writes: Vec<Write>,
) -> CommitRequest {
    CommitRequest {
        key: claim.key.clone(),
        owner,
        now: SystemTime::UNIX_EPOCH,
        status,
        data: String::new(),
        expiration_secs: 0,
        validation: claim.stored_validation(),
        writes,
    }
}

/// Commits `request` if no live record exists, trying again (with a fresh `now`, so a fresh
/// request token) when the record changes underneath.
async fn commit_fresh<St, K, C>(
    protocol: &Protocol<St, K, C>,
    request: &mut CommitRequest,
    deadline: Deadline,
) -> Result<Fresh, StoreError>
where
    St: TransactionalStore,
    C: Clock,
{
    let (store, clock, config) = (&protocol.store, &protocol.clock, &protocol.config);
    for _ in 0..config.acquire_attempts {
        let now = clock.now();
        request.now = now;
        request.expiration_secs = later_secs(now, config.expires_after);
        let request = &*request;
        let expiration_secs = request.expiration_secs;
        let committed = || {
            config.hooks.created(&Created {
                key: &request.key,
                status: request.status,
                expiration_secs,
            });
            Ok(Fresh::Committed { expiration_secs })
        };
        match finish::commit_fresh(store, clock, config, request, deadline).await? {
            Commit::Applied => return committed(),
            Commit::RecordRefused(record) if is_our_commit(record.as_ref(), request) => {
                return committed()
            }
            Commit::RecordRefused(Some(record)) => {
                if decide(&record, now, None) != Decision::Retry {
                    return Ok(Fresh::Existing(record, now));
                }
            }
            Commit::RecordRefused(None) => {}
            other => return Ok(Fresh::Refused(other)),
        }
    }
    Ok(Fresh::Contended)
}

/// The answer once the commit ended other than committed.
fn not_committed<St, K, C, T: DeserializeOwned>(
    protocol: &Protocol<St, K, C>,
    claim: &mut Claim,
    fresh: Result<Fresh, StoreError>,
) -> Result<Processed<T>, Error> {
    let err = match fresh {
        Ok(Fresh::Existing(record, now)) => {
            return claim
                .answer_existing(protocol, record, now)
                .unwrap_or_else(|| {
                    Err(Error::Contended {
                        key: claim.key.clone(),
                    })
                })
        }
        Ok(Fresh::Contended) => Error::Contended {
            key: claim.key.clone(),
        },
        Ok(Fresh::Refused(commit)) => commit_error(&claim.key, Ok(commit)),
        Err(store) => Error::Store(store),
        Ok(Fresh::Committed { .. }) => unreachable!("committed is answered by the caller"),
    };
    if err.is_request_fault() {
        claim.handler_failed();
    }
    Err(err)
}

/// The handler failed: if the message is a duplicate of one that completed (or failed
/// permanently), it is answered as such; otherwise the failure stands.
async fn failure_or_duplicate<St, K, C, T>(
    protocol: &Protocol<St, K, C>,
    claim: &mut Claim,
    err: Error,
) -> Result<Processed<T>, Error>
where
    St: TransactionalStore,
    C: Clock,
    T: DeserializeOwned,
{
    if let Some(record) = claim.stored_now(protocol).await {
        let now = protocol.clock.now();
        if matches!(
            decide(&record, now, claim.validation.as_ref()),
            Decision::Replay { .. } | Decision::ReplayFailure { .. } | Decision::PayloadMismatch
        ) {
            if let Some(answer) = claim.answer_existing(protocol, record, now) {
                return answer;
            }
        }
    }
    claim.handler_failed();
    Err(err)
}

/// Handlers with writes, optimistic mode, for a claimed record: run the handler, then
/// commit its writes with the record if no live record exists.
pub(crate) async fn run<S, St, K, C, I, T>(
    record: Claimed<St, K, C, S, I>,
) -> Result<Processed<T>, Error>
where
    S: Service<LambdaEvent<I>, Response = Completion<T>>,
    S::Error: Into<BoxError>,
    T: Serialize + DeserializeOwned,
    St: TransactionalStore,
    C: Clock,
{
    let (protocol, inner, event, mut claim) = record.into_parts();
    if claim.deadline.epoch_ms() <= epoch_ms(protocol.clock.now()) {
        return Err(Error::DeadlineNear);
    }
    // The pre-check found the record in progress before this record's turn: read as it is
    // now, it is replayed when its holder completed it meanwhile, "in progress" while it is
    // still held, so that the handler does not run for nothing. One that can be taken, or
    // cannot be read, goes on (the commit decides).
    if claim.held_before_turn {
        if let Some(record) = claim.stored_now(&protocol).await {
            let now = protocol.clock.now();
            if let Some(answer) = claim.answer_existing(&protocol, record, now) {
                return answer;
            }
        }
    }
    let owner = OwnerToken::generate();
    let deadline = claim.deadline;
    match call_handler(inner, event, &protocol.clock).await {
        Ok(Completion { result, writes }) => {
            let request = commit_request(&claim, owner, Status::Completed, writes);
            let json = stored_result::to_json(&result, &protocol.config);
            let fresh = store_fitting(json, request, |mut request| {
                let protocol = &protocol;
                async move {
                    let fresh = commit_fresh(protocol, &mut request, deadline).await;
                    (request, fresh)
                }
            })
            .await;
            match fresh {
                Ok((Fresh::Committed { expiration_secs }, data)) => {
                    claim.executed(&protocol, result, data, expiration_secs)
                }
                Ok((other, _)) => not_committed(&protocol, &mut claim, Ok(other)),
                Err(err) => not_committed(&protocol, &mut claim, Err(err)),
            }
        }
        Err(err) if is_permanent(&err) => {
            let message = failure_text(&err);
            let mut request = commit_request(&claim, owner, Status::Failed, Vec::new());
            request.data =
                serde_json::Value::String(stored_failure_message(&protocol.config, &err))
                    .to_string();
            match commit_fresh(&protocol, &mut request, deadline).await {
                Ok(Fresh::Committed { .. }) => {
                    claim.finish(FlightResult::FailedPermanently {
                        data: request.data,
                        validation: request.validation,
                    });
                    Err(Error::Permanent {
                        message,
                        replayed: false,
                    })
                }
                other => not_committed(&protocol, &mut claim, other),
            }
        }
        Err(err) => failure_or_duplicate(&protocol, &mut claim, err).await,
    }
}
