//! Finishing a record after its handler ran: the handler kinds ([`ResultOnly`],
//! [`ResultAndWrites`]) and their final write under the lease (the lease driver's `Finish`
//! step), storing a permanent failure, and the commits of the optimistic driver; retried
//! while the store is down, and never refused for a result that does not fit.

use std::future::Future;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::completion::Completion;
use super::store_call::with_retries;
use super::stored_result::CarriesData;
use crate::clock::{later_secs, Clock, Deadline};
use crate::config::Config;
use crate::error::{error_chain, Error};
use crate::key::IdempotencyKey;
use crate::record::{OwnerToken, Record, Status};
use crate::store::{
    Commit, CommitRequest, CompleteRequest, Fenced, Store, StoreError, TransactionalStore, Write,
};

/// The handler kind of a handler that answers its result alone: the result is stored
/// with an owner-fenced completion under the lease. The default handler kind of
/// [`Idempotent`](crate::Idempotent).
#[derive(Debug, Clone, Copy, Default)]
pub struct ResultOnly;

/// The handler kind of a handler whose writes commit with its record.
///
/// The handler answers a [`Completion`]: its result and DynamoDB writes, committed with the record in one transaction (in lease or optimistic mode, see
/// [`CommitStrategy`](crate::CommitStrategy)). Needs a
/// [`TransactionalStore`]; chosen with
/// [`IdempotencyLayer::with_writes`](crate::IdempotencyLayer::with_writes).
#[derive(Debug, Clone, Copy, Default)]
pub struct ResultAndWrites;

/// The lease driver's `Finish` step: how the handler's response `R` becomes the record's
/// final state on store `St`, under the lease.
pub(crate) trait Finish<R, St> {
    /// The result that is stored and replayed.
    type Value: Serialize + DeserializeOwned + Send + 'static;
    /// The final write as this mode sends it.
    type Request: CarriesData + Send + Sync;
    /// Whether the response carries writes (a record without a key cannot take them), and
    /// so whether the final write is a commit, which carries the payload hash again (a
    /// completion keeps the one its lease stored).
    const HAS_WRITES: bool;

    /// The result and the writes.
    fn into_parts(response: R) -> (Self::Value, Vec<Write>);

    /// The final write of `commit`, as this mode sends it.
    fn request(commit: CommitRequest) -> Self::Request;

    /// Sends the final write once, fenced by the lease owner.
    fn send(
        store: &St,
        request: &Self::Request,
    ) -> impl Future<Output = Result<Commit, StoreError>> + Send;

    /// The refusing record shows that this very write was applied by an earlier send.
    fn is_ours(record: Option<&Record>, request: &Self::Request) -> bool;
}

impl<T, St> Finish<T, St> for ResultOnly
where
    T: Serialize + DeserializeOwned + Send + 'static,
    St: Store,
{
    type Value = T;
    type Request = CompleteRequest;
    const HAS_WRITES: bool = false;

    fn into_parts(response: T) -> (T, Vec<Write>) {
        (response, Vec::new())
    }

    fn request(commit: CommitRequest) -> CompleteRequest {
        CompleteRequest {
            key: commit.key,
            owner: commit.owner,
            status: commit.status,
            data: commit.data,
            expiration_secs: commit.expiration_secs,
            now: commit.now,
        }
    }

    async fn send(store: &St, request: &CompleteRequest) -> Result<Commit, StoreError> {
        Ok(match store.complete(request).await? {
            Fenced::Applied => Commit::Applied,
            Fenced::LeaseLost => Commit::RecordRefused(None),
        })
    }

    /// The store itself answers a completion sent again after it was applied as applied
    /// (the record shows it ours); a refusal carries no record.
    fn is_ours(_: Option<&Record>, _: &CompleteRequest) -> bool {
        false
    }
}

impl<T, St> Finish<Completion<T>, St> for ResultAndWrites
where
    T: Serialize + DeserializeOwned + Send + 'static,
    St: TransactionalStore,
{
    type Value = T;
    type Request = CommitRequest;
    const HAS_WRITES: bool = true;

    fn into_parts(response: Completion<T>) -> (T, Vec<Write>) {
        (response.result, response.writes)
    }

    fn request(commit: CommitRequest) -> CommitRequest {
        commit
    }

    fn send(
        store: &St,
        request: &CommitRequest,
    ) -> impl Future<Output = Result<Commit, StoreError>> + Send {
        store.commit(request)
    }

    fn is_ours(record: Option<&Record>, request: &CommitRequest) -> bool {
        is_our_commit(record, request)
    }
}

/// Sends the final write of `M` under the lease, again while the store is down or the
/// transaction met a conflict (the request does not change between sends, so a commit keeps
/// its request token and a completion is recognised as our own). A refusal that shows this
/// very write applied by an earlier send is [`Commit::Applied`].
pub(crate) async fn finish_under_lease<M, R, St, C>(
    store: &St,
    clock: &C,
    config: &Config,
    request: &M::Request,
    deadline: Deadline,
) -> Result<Commit, StoreError>
where
    M: Finish<R, St>,
    C: Clock,
{
    let answer = with_retries(
        clock,
        deadline,
        config.commit_attempts,
        || M::send(store, request),
        worth_resending,
    )
    .await;
    match answer {
        Ok(Commit::RecordRefused(record)) if M::is_ours(record.as_ref(), request) => {
            Ok(Commit::Applied)
        }
        other => other,
    }
}

/// A commit or completion answer worth sending again: a store fault that may pass, or a
/// transaction conflict.
fn worth_resending(answer: &Result<Commit, StoreError>) -> bool {
    match answer {
        Ok(Commit::Conflict) => true,
        Err(err) => err.is_transient(),
        Ok(_) => false,
    }
}

/// The longest permanent-failure message stored in a record, in bytes; longer ones are cut
/// (on a character boundary) so that the `FAILED` record always fits.
pub const MAX_STORED_FAILURE_BYTES: usize = 4096;

/// Marks the held record `status` with `data`, retried while the store is down (the
/// completion is owner-fenced and idempotent, so sending it again is safe).
pub(crate) async fn complete<St: Store, C: Clock>(
    store: &St,
    clock: &C,
    config: &Config,
    request: &CompleteRequest,
    deadline: Deadline,
) -> Result<Fenced, StoreError> {
    with_retries(
        clock,
        deadline,
        config.commit_attempts,
        || store.complete(request),
        |answer| matches!(answer, Err(err) if err.is_transient()),
    )
    .await
}

/// A permanent failure's own text: the handler error's chain. It is returned to the caller
/// of this delivery (in [`Error::Permanent`]), never logged by default, and stored only on
/// request.
pub(crate) fn failure_text(err: &Error) -> String {
    match err {
        Error::Handler(inner) => error_chain(inner.as_ref()),
        other => error_chain(other),
    }
}

/// What is stored for a permanent failure whose message is not stored.
pub const UNSTORED_FAILURE_MESSAGE: &str = "permanent failure (its message is not stored)";

/// The stored message of a permanent failure: with
/// [`Config::with_stored_failure_messages`], the error's chain cut to
/// [`MAX_STORED_FAILURE_BYTES`] (it may quote the input); otherwise a fixed text.
pub(crate) fn stored_failure_message(config: &Config, err: &Error) -> String {
    if !config.store_failure_messages {
        return UNSTORED_FAILURE_MESSAGE.to_string();
    }
    let mut message = failure_text(err);
    if message.len() > MAX_STORED_FAILURE_BYTES {
        let mut cut = MAX_STORED_FAILURE_BYTES - "…".len();
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push('…');
    }
    message
}

/// Stores a permanent failure under the lease: the record becomes `FAILED` and the message
/// is acknowledged; duplicates get the stored error. Answers the record's error.
pub(crate) async fn store_failure<St: Store, C: Clock>(
    store: &St,
    clock: &C,
    config: &Config,
    key: &IdempotencyKey,
    owner: &OwnerToken,
    deadline: Deadline,
    err: &Error,
) -> Error {
    let request = CompleteRequest {
        key: key.clone(),
        owner: owner.clone(),
        status: Status::Failed,
        data: serde_json::Value::String(stored_failure_message(config, err)).to_string(),
        expiration_secs: later_secs(clock.now(), config.expires_after),
        now: clock.now(),
    };
    match complete(store, clock, config, &request, deadline).await {
        Ok(Fenced::Applied) => Error::Permanent {
            message: failure_text(err),
            replayed: false,
        },
        Ok(Fenced::LeaseLost) => Error::LeaseLost { key: key.clone() },
        Err(store) => Error::Store(store),
    }
}

/// Sends an optimistic commit, again while the store is down or the transaction met a
/// conflict. Every send of one request carries the same request token, and the request does
/// not change between sends, so DynamoDB applies it at most once.
pub(crate) async fn commit_fresh<St: TransactionalStore, C: Clock>(
    store: &St,
    clock: &C,
    config: &Config,
    request: &CommitRequest,
    deadline: Deadline,
) -> Result<Commit, StoreError> {
    with_retries(
        clock,
        deadline,
        config.commit_attempts,
        || store.commit_fresh(request),
        worth_resending,
    )
    .await
}

/// The refusing record shows that this very commit was applied before (an earlier send's
/// answer was lost). Each run has an owner token of its own and commits one status, so the
/// owner alone would tell; the status is compared as well, defensively.
pub(crate) fn is_our_commit(record: Option<&Record>, request: &CommitRequest) -> bool {
    record.is_some_and(|r| r.owner.as_ref() == Some(&request.owner) && r.status == request.status)
}

/// The error for a commit that was neither applied nor refused by the record.
pub(crate) fn commit_error(key: &IdempotencyKey, commit: Result<Commit, StoreError>) -> Error {
    match commit {
        Ok(Commit::ConditionFailed { write_index }) => Error::ConditionFailed {
            key: key.clone(),
            write_index,
        },
        Ok(Commit::Conflict) => Error::Conflict { key: key.clone() },
        Ok(Commit::Applied | Commit::RecordRefused(_)) => {
            unreachable!("applied and refused commits are answered by the caller")
        }
        Err(err) => Error::Store(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_failure_messages_are_cut_on_a_character_boundary() {
        let stored = Config::new().with_stored_failure_messages(true);
        let err = Error::Handler("é".repeat(10_000).into());
        let message = stored_failure_message(&stored, &err);
        assert!(message.len() <= MAX_STORED_FAILURE_BYTES);
        assert!(message.ends_with('…'));
        let short = stored_failure_message(&stored, &Error::Handler("card declined".into()));
        assert_eq!(short, "card declined");
    }

    #[test]
    fn failure_messages_are_stored_only_when_asked() {
        let err = Error::Handler("card 4111111111111111 declined".into());
        assert_eq!(
            stored_failure_message(&Config::new(), &err),
            UNSTORED_FAILURE_MESSAGE
        );
    }
}
