//! Transactional handlers in optimistic mode: no lease; run the handler, then commit its
//! writes with the final record only if no live record exists. A duplicate learns the
//! stored answer from the refused commit.

use std::sync::Arc;
use std::time::SystemTime;

use aws_lambda_events::sqs::SqsMessage;
use lambda_runtime::LambdaEvent;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tower::Service;

use crate::clock::{epoch_ms, later_secs, Clock};
use crate::engine::{
    answer_existing, call_inner, executed, is_permanent, prelude, Claim, Prelude, Shared,
};
use crate::error::{BoxError, Error};
use crate::finish::{
    self, commit_error, failure_text, is_our_commit, store_fitting, stored_failure_message,
};
use crate::in_flight::FlightResult;
use crate::key::{IdempotencyKey, KeyExtractor};
use crate::processed::Processed;
use crate::record::{decide, Decision, OwnerToken, Record, Status};
use crate::store::{Commit, CommitRequest, StoreError, TransactionalStore};
use crate::stored_result;
use crate::write::{Completion, Write};

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

/// What the commit is about: the record's key, payload hash and deadline.
struct Target<'a> {
    key: &'a IdempotencyKey,
    validation: Option<String>,
    deadline_ms: u64,
}

/// Commits `data` with `status` and `writes` if no live record exists, trying again (with a
/// fresh `now`, so a fresh request token) when the record changes underneath.
async fn commit_fresh<St, K, C>(
    shared: &Shared<St, K, C>,
    target: &Target<'_>,
    owner: &OwnerToken,
    status: Status,
    data: String,
    writes: &[Write],
) -> Result<Fresh, StoreError>
where
    St: TransactionalStore,
    C: Clock,
{
    let (store, clock, config) = (&shared.store, &shared.clock, &shared.config);
    for _ in 0..config.acquire_attempts {
        let now = clock.now();
        let request = CommitRequest {
            key: target.key.clone(),
            owner: owner.clone(),
            now,
            status,
            data: data.clone(),
            expiration_secs: later_secs(now, config.expires_after),
            validation: target.validation.clone(),
            writes: writes.to_vec(),
        };
        let expiration_secs = request.expiration_secs;
        match finish::commit(store, clock, config, &request, true, target.deadline_ms).await? {
            Commit::Applied => return Ok(Fresh::Committed { expiration_secs }),
            Commit::RecordRefused(record) if is_our_commit(record.as_ref(), &request) => {
                return Ok(Fresh::Committed { expiration_secs })
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
    shared: &Shared<St, K, C>,
    claim: &mut Claim,
    fresh: Result<Fresh, StoreError>,
) -> Result<Processed<T>, Error> {
    let err = match fresh {
        Ok(Fresh::Existing(record, now)) => {
            return answer_existing(shared, claim, record, now).unwrap_or_else(|| {
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
    shared: &Shared<St, K, C>,
    claim: &mut Claim,
    err: Error,
) -> Result<Processed<T>, Error>
where
    St: TransactionalStore,
    C: Clock,
    T: DeserializeOwned,
{
    if let Ok(Some(record)) = shared.store.get(&claim.key).await {
        let now = shared.clock.now();
        if matches!(
            decide(&record, now, claim.validation.as_ref()),
            Decision::Replay { .. } | Decision::ReplayFailure { .. } | Decision::PayloadMismatch
        ) {
            if let Some(answer) = answer_existing(shared, claim, record, now) {
                return answer;
            }
        }
    }
    claim.handler_failed();
    Err(err)
}

/// Transactional handlers, optimistic mode.
pub(crate) async fn run_transactional_optimistic<S, St, K, C, T>(
    shared: Arc<Shared<St, K, C>>,
    inner: S,
    event: LambdaEvent<SqsMessage>,
) -> Result<Processed<T>, Error>
where
    S: Service<LambdaEvent<SqsMessage>, Response = Completion<T>>,
    S::Error: Into<BoxError>,
    T: Serialize + DeserializeOwned,
    St: TransactionalStore,
    K: KeyExtractor,
    C: Clock,
{
    let mut claim = match prelude(&shared, &event).await {
        Prelude::Done(answer) => return answer,
        Prelude::Unprotected(err) => return Err(Error::Key(err)),
        Prelude::Proceed(claim) => claim,
    };
    if claim.deadline_ms <= epoch_ms(shared.clock.now()) {
        return Err(Error::DeadlineNear);
    }
    let owner = OwnerToken::generate();
    let target = Target {
        key: &claim.key.clone(),
        validation: claim.stored_validation(),
        deadline_ms: claim.deadline_ms,
    };
    match call_inner(inner, event).await {
        Ok(Completion { result, writes }) => {
            let fresh = store_fitting(stored_result::to_json(&result), |data| {
                commit_fresh(&shared, &target, &owner, Status::Completed, data, &writes)
            })
            .await;
            match fresh {
                Ok((Fresh::Committed { expiration_secs }, data)) => {
                    executed(&shared, &mut claim, result, data, expiration_secs)
                }
                Ok((other, _)) => not_committed(&shared, &mut claim, Ok(other)),
                Err(err) => not_committed(&shared, &mut claim, Err(err)),
            }
        }
        Err(err) if is_permanent(&err) => {
            let message = failure_text(&err);
            let data =
                serde_json::Value::String(stored_failure_message(&shared.config, &err)).to_string();
            let fresh =
                commit_fresh(&shared, &target, &owner, Status::Failed, data.clone(), &[]).await;
            match fresh {
                Ok(Fresh::Committed { .. }) => {
                    claim.finish(FlightResult::FailedPermanently {
                        data,
                        validation: claim.stored_validation(),
                    });
                    Err(Error::Permanent {
                        message,
                        replayed: false,
                    })
                }
                other => not_committed(&shared, &mut claim, other),
            }
        }
        Err(err) => failure_or_duplicate(&shared, &mut claim, err).await,
    }
}
