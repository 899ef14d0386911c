//! The optimistic driver, for handlers with writes: no lease; run the handler, then commit its
//! writes with the final record only if no live record exists. A duplicate learns the
//! stored answer from the refused commit.

use std::sync::Arc;
use std::time::SystemTime;

use lambda_runtime::LambdaEvent;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tower::{BoxError, Service};

use super::admission::{admit, Admission, Claim};
use super::batch_scope::Batch;
use super::completion::Completion;
use super::finish::{self, commit_error, failure_text, is_our_commit, stored_failure_message};
use super::in_flight::FlightResult;
use super::invoke::{call_handler, is_permanent};
use super::protocol::Protocol;
use super::store_call::within_deadline;
use super::stored_result::{self, store_fitting};
use crate::clock::{epoch_ms, later_secs, Clock, Deadline};
use crate::error::Error;
use crate::hooks::Created;
use crate::input::Input;
use crate::key::KeyExtractor;
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
    let (store, key) = (&protocol.store, &claim.key);
    let read = within_deadline(&protocol.clock, claim.deadline, || store.get(key)).await;
    if let Ok(Some(record)) = read {
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

/// The answer for a record that the batch's pre-check found in progress before the
/// record's turn, from the record as it is now: replayed when its holder completed it
/// meanwhile, "in progress" while it is still held, so that the handler does not run for
/// nothing; `None` when it can be taken, or cannot be read (the commit decides).
async fn read_again<St, K, C, T>(
    protocol: &Protocol<St, K, C>,
    claim: &mut Claim,
) -> Option<Result<Processed<T>, Error>>
where
    St: TransactionalStore,
    C: Clock,
    T: DeserializeOwned,
{
    let (store, key) = (&protocol.store, &claim.key);
    let read = within_deadline(&protocol.clock, claim.deadline, || store.get(key)).await;
    let record = read.ok()??;
    let now = protocol.clock.now();
    claim.answer_existing(protocol, record, now)
}

/// Handlers with writes, optimistic mode: run, then commit the writes with the record if no
/// live record exists.
pub(crate) async fn run<S, St, K, C, I, T>(
    protocol: Arc<Protocol<St, K, C>>,
    inner: S,
    event: LambdaEvent<I>,
    batch: Option<Arc<Batch<I>>>,
) -> Result<Processed<T>, Error>
where
    S: Service<LambdaEvent<I>, Response = Completion<T>>,
    S::Error: Into<BoxError>,
    T: Serialize + DeserializeOwned,
    St: TransactionalStore,
    K: KeyExtractor<I>,
    C: Clock,
    I: Input + Send + Sync + 'static,
{
    let claim = match admit(&protocol, &event, batch.as_deref()).await {
        Admission::Answered(answer) => return answer,
        // Writes need the record: a record without a key fails with the key error.
        Admission::Unprotected(err) => return Err(Error::Key(err)),
        Admission::Claimed(claim) => claim,
    };
    // Boxed: the handler and the commit make a future of kilobytes, which a record answered
    // at admission (a duplicate) then never builds or moves.
    Box::pin(run_claimed(protocol, inner, event, claim)).await
}

/// A claimed record: the handler, then its result committed with its writes.
async fn run_claimed<S, St, K, C, I, T>(
    protocol: Arc<Protocol<St, K, C>>,
    inner: S,
    event: LambdaEvent<I>,
    mut claim: Claim,
) -> Result<Processed<T>, Error>
where
    S: Service<LambdaEvent<I>, Response = Completion<T>>,
    S::Error: Into<BoxError>,
    T: Serialize + DeserializeOwned,
    St: TransactionalStore,
    K: KeyExtractor<I>,
    C: Clock,
    I: Input + Send + Sync + 'static,
{
    if claim.deadline.epoch_ms() <= epoch_ms(protocol.clock.now()) {
        return Err(Error::DeadlineNear);
    }
    if claim.held_before_turn {
        if let Some(answer) = read_again(&protocol, &mut claim).await {
            return answer;
        }
    }
    let owner = OwnerToken::generate();
    let deadline = claim.deadline;
    match call_handler(inner, event, &protocol.clock).await {
        Ok(Completion { result, writes }) => {
            let request = commit_request(&claim, owner, Status::Completed, writes);
            let json = stored_result::to_json(&result);
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
