//! The per-record protocol behind [`Idempotent`](crate::Idempotent) and
//! [`Transactional`](crate::Transactional): key, cache, single flight, lease, handler,
//! completion. The decisions themselves are [`decide`]'s; this module does the I/O.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use aws_lambda_events::sqs::SqsMessage;
use futures_util::FutureExt;
use lambda_runtime::LambdaEvent;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tower::Service;

use crate::cache::CompletedCache;
use crate::clock::{deadline_ms, epoch_ms, epoch_secs, Clock};
use crate::config::{Config, MissingKey};
use crate::error::{error_chain, BoxError, Error, Permanent};
use crate::in_flight::{self, FlightGuard, FlightResult, InFlight, Join};
use crate::key::{IdempotencyKey, KeyError, KeyExtractor, MAX_KEY_BYTES};
use crate::processed::Processed;
use crate::record::{decide, Decision, OwnerToken, Record, Status};
use crate::store::{
    Acquire, AcquireRequest, Commit, CommitRequest, CompleteRequest, ExtendRequest, Fenced, Store,
    StoreError, TransactionalStore,
};
use crate::write::Completion;

/// The prefix used when neither the configuration nor the Lambda environment names one.
pub const FALLBACK_KEY_PREFIX: &str = "lambda-idempotency";

/// State shared by every service built from one layer.
#[derive(Debug)]
pub(crate) struct State {
    cache: Option<Mutex<CompletedCache>>,
    in_flight: Arc<InFlight>,
}

impl State {
    pub(crate) fn new(config: &Config) -> Arc<Self> {
        Arc::new(State {
            cache: (config.local_cache_capacity > 0)
                .then(|| Mutex::new(CompletedCache::new(config.local_cache_capacity))),
            in_flight: Arc::default(),
        })
    }

    fn cached(&self, key: &IdempotencyKey, now: SystemTime) -> Option<Record> {
        let cache = self.cache.as_ref()?;
        cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key, now)
    }

    fn remember(&self, record: Record) {
        if let Some(cache) = &self.cache {
            cache
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(record);
        }
    }
}

/// Everything a service needs, behind one `Arc`.
#[derive(Debug)]
pub(crate) struct Shared<St, K, C> {
    pub(crate) store: St,
    pub(crate) key: K,
    pub(crate) clock: C,
    pub(crate) config: Config,
    pub(crate) state: Arc<State>,
}

fn key_prefix(config: &Config, context: &lambda_runtime::Context) -> String {
    if let Some(prefix) = config.key_prefix() {
        return prefix.to_string();
    }
    if !context.env_config.function_name.is_empty() {
        return context.env_config.function_name.clone();
    }
    std::env::var("AWS_LAMBDA_FUNCTION_NAME")
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| FALLBACK_KEY_PREFIX.to_string())
}

fn replay<T: DeserializeOwned>(data: Option<&str>) -> Result<Processed<T>, Error> {
    serde_json::from_str(data.unwrap_or("null"))
        .map(Processed::Replayed)
        .map_err(Error::Codec)
}

fn replay_failure(data: Option<&str>) -> Error {
    let message = data
        .and_then(|d| serde_json::from_str::<String>(d).ok())
        .unwrap_or_else(|| "permanent failure".to_string());
    Error::Permanent {
        message,
        replayed: true,
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// The handler's error was marked [`Permanent`].
fn is_permanent(err: &Error) -> bool {
    matches!(err, Error::Handler(inner) if inner.is::<Permanent>())
}

/// Runs the inner handler, turning its error or panic into [`Error`].
pub(crate) async fn call_inner<S, R>(inner: S, event: LambdaEvent<SqsMessage>) -> Result<R, Error>
where
    S: Service<LambdaEvent<SqsMessage>, Response = R>,
    S::Error: Into<BoxError>,
{
    let mut inner = inner;
    match AssertUnwindSafe(async move { inner.call(event).await })
        .catch_unwind()
        .await
    {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) => Err(Error::Handler(err.into())),
        Err(panic) => Err(Error::Panic {
            message: panic_message(panic.as_ref()),
        }),
    }
}

/// A record that passed the prelude: its key is derived and this call leads its flight.
pub(crate) struct Claim {
    pub(crate) key: IdempotencyKey,
    pub(crate) validation: Option<String>,
    request_id: String,
    deadline_ms: u64,
    flight: Option<FlightGuard>,
}

impl Claim {
    fn finish(&mut self, state: &State, result: FlightResult) {
        if result == FlightResult::HandlerFailed {
            state.in_flight.record_failure(&self.request_id, &self.key);
        }
        if let Some(guard) = self.flight.take() {
            guard.finish(result);
        }
    }
}

/// What the prelude decided.
pub(crate) enum Prelude<T> {
    /// The record is answered already (replayed, rejected, shared with the flight leader).
    Done(Result<Processed<T>, Error>),
    /// No key, and processing without idempotency was chosen (transactional handlers still
    /// fail with this error: their writes need the record).
    Unprotected(KeyError),
    /// Go on with this claim.
    Proceed(Claim),
}

/// Derives the key and payload hash, then answers from the cache or the flight leader when
/// it can.
pub(crate) async fn prelude<St, K, C, T>(
    shared: &Shared<St, K, C>,
    event: &LambdaEvent<SqsMessage>,
) -> Prelude<T>
where
    K: KeyExtractor,
    C: Clock,
    T: DeserializeOwned,
{
    let config = &shared.config;
    let key = match shared.key.key_material(&event.payload) {
        Ok(material) => IdempotencyKey::derive(&key_prefix(config, &event.context), &material),
        Err(err) if err.is_absent() && config.missing_key == MissingKey::ProcessUnprotected => {
            return Prelude::Unprotected(err);
        }
        Err(err) => return Prelude::Done(Err(Error::Key(err))),
    };
    if key.as_str().len() > MAX_KEY_BYTES {
        return Prelude::Done(Err(Error::Key(KeyError::KeyTooLong {
            len_bytes: key.as_str().len(),
        })));
    }
    tracing::Span::current().record("idempotency_key", key.as_str());
    let validation = match config.validation.hash(&event.payload) {
        Ok(validation) => validation,
        Err(err) => return Prelude::Done(Err(Error::Key(err))),
    };

    let now = shared.clock.now();
    if let Some(record) = shared.state.cached(&key, now) {
        match decide(&record, now, validation.as_deref()) {
            Decision::Replay { data } => return Prelude::Done(replay(data.as_deref())),
            Decision::ReplayFailure { data } => {
                return Prelude::Done(Err(replay_failure(data.as_deref())))
            }
            Decision::PayloadMismatch => return Prelude::Done(Err(Error::PayloadMismatch { key })),
            Decision::InProgress | Decision::Retry => {}
        }
    }

    // Records of this process that share the key wait for the first one; once its handler
    // failed, the others of the same invocation do not run it again.
    let request_id = event.context.request_id.clone();
    if shared.state.in_flight.failed_earlier(&request_id, &key) {
        return Prelude::Done(Err(Error::SameKeyFailed { key }));
    }
    let flight = match shared.state.in_flight.join(&key) {
        Join::Leader(guard) => Some(guard),
        Join::Follower(slot) => match in_flight::wait(slot).await {
            FlightResult::Completed {
                data,
                validation: stored,
            } => {
                return Prelude::Done(match (stored, &validation) {
                    (Some(stored), Some(ours)) if &stored != ours => {
                        Err(Error::PayloadMismatch { key })
                    }
                    _ => replay(Some(&data)),
                });
            }
            FlightResult::HandlerFailed => return Prelude::Done(Err(Error::SameKeyFailed { key })),
            FlightResult::NotStarted => None,
        },
    };
    Prelude::Proceed(Claim {
        key,
        validation,
        request_id,
        deadline_ms: deadline_ms(event.context.deadline, now),
        flight,
    })
}

/// The end of the lease for an acquire or extension at `now`.
fn lease_end_ms(config: &Config, deadline_ms: u64, now: SystemTime) -> u64 {
    match config.max_lease {
        Some(max) => deadline_ms.min(epoch_ms(now + max)),
        None => deadline_ms,
    }
}

/// The record never expires before its lease ends.
fn expiration_for(config: &Config, now: SystemTime, lease_ms: u64) -> u64 {
    epoch_secs(now + config.expires_after).max(lease_ms.div_ceil(1000))
}

/// Takes the lease, or answers the record from what the store holds.
pub(crate) async fn acquire<St, K, C, T>(
    shared: &Shared<St, K, C>,
    claim: &mut Claim,
) -> Result<OwnerToken, Result<Processed<T>, Error>>
where
    St: Store,
    C: Clock,
    T: DeserializeOwned,
{
    let config = &shared.config;
    let owner = OwnerToken::generate();
    for _ in 0..config.acquire_attempts {
        let now = shared.clock.now();
        let lease_ms = lease_end_ms(config, claim.deadline_ms, now);
        if lease_ms <= epoch_ms(now) {
            return Err(Err(Error::DeadlineNear));
        }
        let request = AcquireRequest {
            key: claim.key.clone(),
            owner: owner.clone(),
            now,
            lease_expiration_ms: lease_ms,
            expiration_secs: expiration_for(config, now, lease_ms),
            validation: claim.validation.clone(),
        };
        let existing = match shared.store.acquire(&request).await {
            Ok(Acquire::Acquired) => return Ok(owner),
            Ok(Acquire::Existing(record)) => record,
            Ok(Acquire::Contended) => continue,
            Err(err) => return Err(Err(Error::Store(err))),
        };
        match answer_existing(shared, claim, existing, now) {
            Some(answer) => return Err(answer),
            None => continue,
        }
    }
    Err(Err(Error::Contended {
        key: claim.key.clone(),
    }))
}

/// The answer for a record that already exists, or `None` when it changed underneath and
/// the write should be tried again.
fn answer_existing<St, K, C, T: DeserializeOwned>(
    shared: &Shared<St, K, C>,
    claim: &mut Claim,
    existing: Record,
    now: SystemTime,
) -> Option<Result<Processed<T>, Error>> {
    let key = claim.key.clone();
    match decide(&existing, now, claim.validation.as_deref()) {
        Decision::Replay { data } => {
            let replayed = replay(data.as_deref());
            if replayed.is_ok() {
                claim.finish(
                    &shared.state,
                    FlightResult::Completed {
                        data: data.unwrap_or_else(|| "null".into()),
                        validation: existing.validation.clone(),
                    },
                );
                shared.state.remember(existing);
            }
            Some(replayed)
        }
        Decision::ReplayFailure { data } => {
            let failure = replay_failure(data.as_deref());
            shared.state.remember(existing);
            Some(Err(failure))
        }
        Decision::InProgress => Some(Err(Error::InProgress { key })),
        Decision::PayloadMismatch => Some(Err(Error::PayloadMismatch { key })),
        Decision::Retry => None,
    }
}

/// Runs the handler; with a heartbeat configured and a lease held, extends the lease while
/// it runs. The heartbeat stops when the handler ends.
async fn run_handler<St, K, C, F, R>(
    shared: &Shared<St, K, C>,
    claim: &Claim,
    owner: Option<&OwnerToken>,
    handler: F,
) -> Result<R, Error>
where
    St: Store,
    C: Clock,
    F: Future<Output = Result<R, Error>>,
{
    let (Some(every), Some(owner)) = (shared.config.heartbeat, owner) else {
        return handler.await;
    };
    let mut handler = std::pin::pin!(handler);
    loop {
        tokio::select! {
            result = &mut handler => return result,
            _ = tokio::time::sleep(every) => {
                let now = shared.clock.now();
                let lease_ms = lease_end_ms(&shared.config, claim.deadline_ms, now);
                let request = ExtendRequest {
                    key: claim.key.clone(),
                    owner: owner.clone(),
                    lease_expiration_ms: lease_ms,
                    expiration_secs: expiration_for(&shared.config, now, lease_ms),
                };
                match shared.store.extend(&request).await {
                    Ok(Fenced::Applied) => {
                        tracing::debug!(lease_expiration_ms = lease_ms, "lease extended");
                    }
                    Ok(Fenced::LeaseLost) => {
                        tracing::warn!("lease lost while the handler runs");
                    }
                    Err(err) => {
                        tracing::warn!(error = %error_chain(&err), "could not extend the lease");
                    }
                }
            }
        }
    }
}

/// Releases the lease after a failure so a retry can run at once. A failed release is only
/// logged: the lease then elapses at the deadline.
async fn release<St: Store>(store: &St, key: &IdempotencyKey, owner: &OwnerToken) {
    match store.release(key, owner).await {
        Ok(Fenced::Applied) => {}
        Ok(Fenced::LeaseLost) => {
            tracing::warn!(idempotency_key = %key, "lease was lost before it could be released");
        }
        Err(err) => {
            tracing::warn!(
                idempotency_key = %key,
                error = %error_chain(&err),
                "could not release the lease; it ends at the invocation deadline"
            );
        }
    }
}

/// The stored form of a permanent failure: its message as a JSON string.
fn failure_data(err: &Error) -> (String, String) {
    let message = match err {
        Error::Handler(inner) => error_chain(inner.as_ref()),
        other => error_chain(other),
    };
    let data = serde_json::to_string(&message).unwrap_or_else(|_| "\"permanent failure\"".into());
    (message, data)
}

/// After the handler failed under a lease: store a permanent failure, or release.
async fn settle_failure<St, K, C, T>(
    shared: &Shared<St, K, C>,
    claim: &mut Claim,
    owner: &OwnerToken,
    err: Error,
) -> Result<Processed<T>, Error>
where
    St: Store,
    C: Clock,
{
    if !is_permanent(&err) {
        release(&shared.store, &claim.key, owner).await;
        claim.finish(&shared.state, FlightResult::HandlerFailed);
        return Err(err);
    }
    let (message, data) = failure_data(&err);
    let request = CompleteRequest {
        key: claim.key.clone(),
        owner: owner.clone(),
        status: Status::Failed,
        data,
        expiration_secs: epoch_secs(shared.clock.now() + shared.config.expires_after),
    };
    match shared.store.complete(&request).await {
        Ok(Fenced::Applied) => Err(Error::Permanent {
            message,
            replayed: false,
        }),
        Ok(Fenced::LeaseLost) => Err(Error::LeaseLost {
            key: claim.key.clone(),
        }),
        Err(store) => Err(Error::Store(store)),
    }
}

/// The completed record as the cache keeps it.
fn completed_record(claim: &Claim, data: &str, expiration_secs: u64) -> Record {
    Record {
        key: claim.key.clone(),
        status: Status::Completed,
        expiration_secs,
        lease_expiration_ms: None,
        owner: None,
        data: Some(data.to_string()),
        validation: claim.validation.clone(),
    }
}

fn executed<St, K, C, T>(
    shared: &Shared<St, K, C>,
    claim: &mut Claim,
    value: T,
    data: String,
    expiration_secs: u64,
) -> Result<Processed<T>, Error> {
    shared
        .state
        .remember(completed_record(claim, &data, expiration_secs));
    let validation = claim.validation.clone();
    claim.finish(&shared.state, FlightResult::Completed { data, validation });
    Ok(Processed::Executed(value))
}

/// Plain handlers: lease, run, complete with `UpdateItem` (or release).
pub(crate) async fn run_plain<S, St, K, C, T>(
    shared: Arc<Shared<St, K, C>>,
    inner: S,
    event: LambdaEvent<SqsMessage>,
) -> Result<Processed<T>, Error>
where
    S: Service<LambdaEvent<SqsMessage>, Response = T>,
    S::Error: Into<BoxError>,
    T: Serialize + DeserializeOwned,
    St: Store,
    K: KeyExtractor,
    C: Clock,
{
    let mut claim = match prelude(&shared, &event).await {
        Prelude::Done(answer) => return answer,
        Prelude::Unprotected(err) => {
            tracing::warn!(error = %err, "no idempotency key: processing without idempotency");
            return call_inner(inner, event).await.map(Processed::Unprotected);
        }
        Prelude::Proceed(claim) => claim,
    };
    let owner = match acquire(&shared, &mut claim).await {
        Ok(owner) => owner,
        Err(answer) => return answer,
    };
    let value = match run_handler(&shared, &claim, Some(&owner), call_inner(inner, event)).await {
        Ok(value) => value,
        Err(err) => return settle_failure(&shared, &mut claim, &owner, err).await,
    };
    let data = match serde_json::to_string(&value) {
        Ok(data) => data,
        Err(err) => {
            return settle_failure(&shared, &mut claim, &owner, Error::Codec(err)).await;
        }
    };
    let expiration_secs = epoch_secs(shared.clock.now() + shared.config.expires_after);
    let request = CompleteRequest {
        key: claim.key.clone(),
        owner: owner.clone(),
        status: Status::Completed,
        data,
        expiration_secs,
    };
    match shared.store.complete(&request).await {
        Ok(Fenced::Applied) => executed(&shared, &mut claim, value, request.data, expiration_secs),
        Ok(Fenced::LeaseLost) => Err(Error::LeaseLost { key: claim.key }),
        Err(err @ StoreError::ItemTooLarge { .. }) => {
            settle_failure(&shared, &mut claim, &owner, Error::Store(err)).await
        }
        Err(err) => Err(Error::Store(err)),
    }
}

/// How a commit ended, before mapping to the record's answer.
async fn commit_with_retries<St: TransactionalStore>(
    store: &St,
    request: &CommitRequest,
    fresh: bool,
    attempts: u32,
) -> Result<Commit, StoreError> {
    let mut attempt = 1;
    loop {
        let result = if fresh {
            store.commit_fresh(request).await
        } else {
            store.commit(request).await
        };
        let retryable = matches!(
            result,
            Ok(Commit::Conflict) | Err(StoreError::Unavailable(_))
        );
        if !retryable || attempt >= attempts {
            return result;
        }
        tracing::debug!(attempt, "retrying the commit with the same request token");
        tokio::time::sleep(Duration::from_millis(20 * u64::from(attempt))).await;
        attempt += 1;
    }
}

/// Our own earlier attempt of this very commit is what refused it: its response was lost.
fn is_our_commit(record: Option<&Record>, request: &CommitRequest) -> bool {
    record.is_some_and(|r| r.owner.as_ref() == Some(&request.owner) && r.status == request.status)
}

/// Errors of a commit that are the handler's doing, not the store's.
fn commit_error(claim: &Claim, commit: Result<Commit, StoreError>) -> Error {
    match commit {
        Ok(Commit::ConditionFailed { write_index }) => Error::ConditionFailed {
            key: claim.key.clone(),
            write_index,
        },
        Ok(Commit::Conflict) => Error::Conflict {
            key: claim.key.clone(),
        },
        Ok(Commit::Applied | Commit::RecordRefused(_)) => {
            unreachable!("applied and refused commits are answered by the caller")
        }
        Err(err) => Error::Store(err),
    }
}

/// The handler's own fault (bad writes, too large): not a store outage.
fn is_request_fault(err: &Error) -> bool {
    matches!(
        err,
        Error::ConditionFailed { .. }
            | Error::Conflict { .. }
            | Error::Store(
                StoreError::ItemTooLarge { .. }
                    | StoreError::TransactionTooLarge { .. }
                    | StoreError::InvalidWrite { .. }
            )
    )
}

/// Transactional handlers, lease mode: lease, run, commit the writes with the record.
pub(crate) async fn run_transactional_lease<S, St, K, C, T>(
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
    let owner = match acquire(&shared, &mut claim).await {
        Ok(owner) => owner,
        Err(answer) => return answer,
    };
    let completion =
        match run_handler(&shared, &claim, Some(&owner), call_inner(inner, event)).await {
            Ok(completion) => completion,
            Err(err) => return settle_failure(&shared, &mut claim, &owner, err).await,
        };
    let Completion { result, writes } = completion;
    let data = match serde_json::to_string(&result) {
        Ok(data) => data,
        Err(err) => {
            return settle_failure(&shared, &mut claim, &owner, Error::Codec(err)).await;
        }
    };
    let now = shared.clock.now();
    let request = CommitRequest {
        key: claim.key.clone(),
        owner: owner.clone(),
        now,
        status: Status::Completed,
        data,
        expiration_secs: epoch_secs(now + shared.config.expires_after),
        validation: claim.validation.clone(),
        writes,
    };
    let commit = commit_with_retries(
        &shared.store,
        &request,
        false,
        shared.config.commit_attempts,
    )
    .await;
    match commit {
        Ok(Commit::Applied) => executed(
            &shared,
            &mut claim,
            result,
            request.data,
            request.expiration_secs,
        ),
        Ok(Commit::RecordRefused(record)) if is_our_commit(record.as_ref(), &request) => executed(
            &shared,
            &mut claim,
            result,
            request.data,
            request.expiration_secs,
        ),
        Ok(Commit::RecordRefused(_)) => Err(Error::LeaseLost { key: claim.key }),
        other => {
            let err = commit_error(&claim, other);
            if is_request_fault(&err) {
                release(&shared.store, &claim.key, &owner).await;
                claim.finish(&shared.state, FlightResult::HandlerFailed);
            }
            Err(err)
        }
    }
}

/// Transactional handlers, optimistic mode: no lease; run, then commit the writes with the
/// final record if no live record exists. A duplicate learns the stored result from the
/// refused commit.
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
    let handled = run_handler(&shared, &claim, None, call_inner(inner, event)).await;
    let (status, data, result, writes, failure) = match handled {
        Ok(Completion { result, writes }) => match serde_json::to_string(&result) {
            Ok(data) => (Status::Completed, data, Some(result), writes, None),
            Err(err) => {
                claim.finish(&shared.state, FlightResult::HandlerFailed);
                return Err(Error::Codec(err));
            }
        },
        Err(err) if is_permanent(&err) => {
            let (message, data) = failure_data(&err);
            (Status::Failed, data, None, Vec::new(), Some(message))
        }
        Err(err) => {
            claim.finish(&shared.state, FlightResult::HandlerFailed);
            return Err(err);
        }
    };
    let owner = OwnerToken::generate();
    let mut result = result;
    for _ in 0..shared.config.acquire_attempts {
        let now = shared.clock.now();
        let request = CommitRequest {
            key: claim.key.clone(),
            owner: owner.clone(),
            now,
            status,
            data: data.clone(),
            expiration_secs: epoch_secs(now + shared.config.expires_after),
            validation: claim.validation.clone(),
            writes: writes.clone(),
        };
        let commit =
            commit_with_retries(&shared.store, &request, true, shared.config.commit_attempts).await;
        let existing = match commit {
            Ok(Commit::Applied) => None,
            Ok(Commit::RecordRefused(record)) if is_our_commit(record.as_ref(), &request) => None,
            Ok(Commit::RecordRefused(Some(record))) => Some(record),
            Ok(Commit::RecordRefused(None)) => continue,
            other => {
                let err = commit_error(&claim, other);
                if is_request_fault(&err) {
                    claim.finish(&shared.state, FlightResult::HandlerFailed);
                }
                return Err(err);
            }
        };
        let Some(existing) = existing else {
            // Committed.
            return match (result.take(), failure) {
                (Some(value), _) => {
                    executed(&shared, &mut claim, value, data, request.expiration_secs)
                }
                (None, message) => Err(Error::Permanent {
                    message: message.unwrap_or_default(),
                    replayed: false,
                }),
            };
        };
        if let Some(answer) = answer_existing(&shared, &mut claim, existing, now) {
            return answer;
        }
    }
    Err(Error::Contended { key: claim.key })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_comes_from_config_then_function_name() {
        let mut context = lambda_runtime::Context::default();
        context.env_config = Arc::new(lambda_runtime::Config {
            function_name: "order-consumer-prod".into(),
            ..Default::default()
        });
        assert_eq!(key_prefix(&Config::new(), &context), "order-consumer-prod");
        assert_eq!(
            key_prefix(&Config::new().with_key_prefix("orders-v1"), &context),
            "orders-v1"
        );
    }

    #[test]
    fn replay_reads_the_stored_json() {
        let replayed: Processed<Vec<u32>> = replay(Some("[1,2]")).unwrap();
        assert_eq!(replayed, Processed::Replayed(vec![1, 2]));
        let unit: Processed<()> = replay(None).unwrap();
        assert_eq!(unit.outcome(), crate::Outcome::Replayed);
        assert!(matches!(
            replay::<u32>(Some("\"text\"")),
            Err(Error::Codec(_))
        ));
    }

    #[test]
    fn stored_failures_replay_their_message() {
        match replay_failure(Some("\"card declined\"")) {
            Error::Permanent { message, replayed } => {
                assert_eq!(message, "card declined");
                assert!(replayed);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn lease_ends_at_the_deadline_or_the_cap() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(100);
        let config = Config::new();
        assert_eq!(lease_end_ms(&config, 130_000, now), 130_000);
        let capped = Config::new().with_max_lease(Duration::from_secs(5));
        assert_eq!(lease_end_ms(&capped, 130_000, now), 105_000);
        assert_eq!(lease_end_ms(&capped, 101_000, now), 101_000);
        // A lease past the record window keeps the record alive until the lease ends.
        let short = Config::new().with_expires_after(Duration::from_secs(1));
        assert_eq!(expiration_for(&short, now, 130_500), 131);
    }
}
