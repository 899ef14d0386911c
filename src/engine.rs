//! The per-record protocol behind [`Idempotent`](crate::Idempotent) and
//! [`Transactional`](crate::Transactional): key, cache, single flight, lease, handler,
//! completion. The decisions themselves are [`decide`]'s; this module does the I/O, with
//! the lease in [`crate::lease`] and the final writes in [`crate::finish`].

use std::any::Any;
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
use crate::clock::{deadline_ms, epoch_ms, later_secs, Clock};
use crate::config::{Config, MissingKey};
use crate::error::{BoxError, Error, Permanent};
use crate::finish::{self, commit_error, is_our_commit, store_fitting};
use crate::in_flight::{self, FlightGuard, FlightResult, InFlight, Join};
use crate::key::{IdempotencyKey, KeyError, KeyExtractor, MAX_KEY_BYTES};
use crate::lease::{self, expiration_for, lease_end_ms, Lease};
use crate::processed::Processed;
use crate::record::{decide, Decision, OwnerToken, Record, Status};
use crate::store::{
    Acquire, AcquireRequest, Commit, CommitRequest, CompleteRequest, Fenced, Store,
    TransactionalStore,
};
use crate::stored_result;
use crate::validation::PayloadHash;
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

impl<St, K, C> Shared<St, K, C> {
    /// The lease `claim` holds under `owner` after its acquire, until `held_until_ms`.
    fn lease<'a>(
        &'a self,
        claim: &'a Claim,
        owner: &'a OwnerToken,
        held_until_ms: u64,
    ) -> Lease<'a, St, C> {
        Lease {
            store: &self.store,
            clock: &self.clock,
            config: &self.config,
            key: &claim.key,
            owner,
            deadline_ms: claim.deadline_ms,
            held_until_ms,
        }
    }
}

/// Reads a stored result back. A result that no longer decodes (the result type changed
/// across a deploy) still belongs to a completed record: the message is a duplicate and is
/// acknowledged without the result rather than sent to the dead-letter queue.
pub(crate) fn replay<T: DeserializeOwned>(data: Option<&str>) -> Processed<T> {
    stored_result::decode(data).unwrap_or_else(|err| {
        tracing::warn!(error = %err, "acknowledging a duplicate whose stored result cannot be read");
        Processed::ReplayedWithoutResult
    })
}

pub(crate) fn replay_failure(data: Option<&str>) -> Error {
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
pub(crate) fn is_permanent(err: &Error) -> bool {
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

/// Whether a stored payload hash belongs to another payload than ours.
fn mismatched(stored: Option<&str>, ours: Option<&PayloadHash>) -> bool {
    matches!((stored, ours), (Some(stored), Some(ours)) if !ours.matches(stored))
}

/// A record that passed the prelude: its key is derived and this call leads its flight.
pub(crate) struct Claim {
    pub(crate) key: IdempotencyKey,
    pub(crate) validation: Option<PayloadHash>,
    pub(crate) deadline_ms: u64,
    flight: Option<FlightGuard>,
}

impl Claim {
    /// The payload hash as it is stored.
    pub(crate) fn stored_validation(&self) -> Option<String> {
        self.validation.as_ref().map(|v| v.as_str().to_string())
    }

    /// Tells the records waiting on this one how it ended.
    pub(crate) fn finish(&mut self, result: FlightResult) {
        if let FlightResult::HandlerFailed { validation } = &result {
            in_flight::record_failure(&self.key, validation.clone());
        }
        if let Some(guard) = self.flight.take() {
            guard.finish(result);
        }
    }

    /// The handler failed (retryably) for this record.
    pub(crate) fn handler_failed(&mut self) {
        let validation = self.stored_validation();
        self.finish(FlightResult::HandlerFailed { validation });
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

/// Derives the key and payload hash, then answers from the cache, the batch's failures or
/// the flight leader when it can.
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
        match decide(&record, now, validation.as_ref()) {
            Decision::Replay { data } => return Prelude::Done(Ok(replay(data.as_deref()))),
            Decision::ReplayFailure { data } => {
                return Prelude::Done(Err(replay_failure(data.as_deref())))
            }
            Decision::PayloadMismatch => return Prelude::Done(Err(Error::PayloadMismatch { key })),
            Decision::InProgress | Decision::Retry => {}
        }
    }

    // Once the handler failed for a key in this batch, later records with that key do not
    // run it again; another payload under the key is rejected as such.
    if let Some(stored) = in_flight::failed_earlier(&key) {
        return Prelude::Done(Err(if mismatched(stored.as_deref(), validation.as_ref()) {
            Error::PayloadMismatch { key }
        } else {
            Error::SameKeyFailed { key }
        }));
    }
    let deadline_ms = deadline_ms(event.context.deadline, now);
    // Records of this process that share the key wait for the first one, until their own
    // deadline at most.
    let flight = match shared.state.in_flight.join(&key) {
        Join::Leader(guard) => Some(guard),
        Join::Follower(slot) => {
            let deadline = SystemTime::UNIX_EPOCH + Duration::from_millis(deadline_ms);
            let result = tokio::select! {
                result = in_flight::wait(slot) => result,
                () = shared.clock.sleep_until(deadline) => {
                    return Prelude::Done(Err(Error::InProgress { key }));
                }
            };
            let answer = match result {
                FlightResult::NotStarted => None,
                FlightResult::Completed { validation: s, .. }
                | FlightResult::FailedPermanently { validation: s, .. }
                | FlightResult::HandlerFailed { validation: s }
                    if mismatched(s.as_deref(), validation.as_ref()) =>
                {
                    Some(Err(Error::PayloadMismatch { key: key.clone() }))
                }
                FlightResult::Completed { data, .. } => Some(Ok(replay(Some(&data)))),
                FlightResult::FailedPermanently { data, .. } => {
                    Some(Err(replay_failure(Some(&data))))
                }
                FlightResult::HandlerFailed { .. } => {
                    Some(Err(Error::SameKeyFailed { key: key.clone() }))
                }
            };
            if let Some(answer) = answer {
                return Prelude::Done(answer);
            }
            None
        }
    };
    Prelude::Proceed(Claim {
        key,
        validation,
        deadline_ms,
        flight,
    })
}

/// Takes the lease, or answers the record from what the store holds.
/// Answers the owner token and when the lease ends (epoch milliseconds).
pub(crate) async fn acquire<St, K, C, T>(
    shared: &Shared<St, K, C>,
    claim: &mut Claim,
) -> Result<(OwnerToken, u64), Result<Processed<T>, Error>>
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
            validation: claim.stored_validation(),
        };
        let existing = match shared.store.acquire(&request).await {
            Ok(Acquire::Acquired) => return Ok((owner, lease_ms)),
            Ok(Acquire::Existing(record)) => record,
            Ok(Acquire::Contended) => continue,
            Err(err) => {
                if err.is_transient() {
                    // The write may have been applied with its answer lost: release it
                    // under our token rather than leave it held by nobody until the deadline
                    // (once: the store has just failed, so do not wait on it long).
                    lease::release(
                        &shared.store,
                        &shared.clock,
                        1,
                        &claim.key,
                        &owner,
                        claim.deadline_ms,
                    )
                    .await;
                }
                return Err(Err(Error::Store(err)));
            }
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
pub(crate) fn answer_existing<St, K, C, T: DeserializeOwned>(
    shared: &Shared<St, K, C>,
    claim: &mut Claim,
    existing: Record,
    now: SystemTime,
) -> Option<Result<Processed<T>, Error>> {
    let key = claim.key.clone();
    match decide(&existing, now, claim.validation.as_ref()) {
        Decision::Replay { data } => {
            let replayed = replay(data.as_deref());
            claim.finish(FlightResult::Completed {
                data: data.unwrap_or_else(|| "null".into()),
                validation: existing.validation.clone(),
            });
            shared.state.remember(existing);
            Some(Ok(replayed))
        }
        Decision::ReplayFailure { data } => {
            let failure = replay_failure(data.as_deref());
            claim.finish(FlightResult::FailedPermanently {
                data: data.unwrap_or_else(|| "null".into()),
                validation: existing.validation.clone(),
            });
            shared.state.remember(existing);
            Some(Err(failure))
        }
        Decision::InProgress => Some(Err(Error::InProgress { key })),
        Decision::PayloadMismatch => Some(Err(Error::PayloadMismatch { key })),
        Decision::Retry => None,
    }
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
    if matches!(err, Error::LeaseLost { .. }) {
        // Cancelled by the heartbeat: the lease is someone else's now.
        return Err(err);
    }
    let (store, clock, config) = (&shared.store, &shared.clock, &shared.config);
    if !is_permanent(&err) {
        lease::release(
            store,
            clock,
            config.commit_attempts,
            &claim.key,
            owner,
            claim.deadline_ms,
        )
        .await;
        claim.handler_failed();
        return Err(err);
    }
    let answer = finish::store_failure(
        store,
        clock,
        config,
        &claim.key,
        owner,
        claim.deadline_ms,
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

/// The handler ran and its result (in the stored form `data`) is stored.
pub(crate) fn executed<St, K, C, T>(
    shared: &Shared<St, K, C>,
    claim: &mut Claim,
    value: T,
    data: String,
    expiration_secs: u64,
) -> Result<Processed<T>, Error> {
    shared.state.remember(Record {
        key: claim.key.clone(),
        status: Status::Completed,
        expiration_secs,
        lease_expiration_ms: None,
        owner: None,
        data: Some(data.clone()),
        validation: claim.stored_validation(),
    });
    let validation = claim.stored_validation();
    claim.finish(FlightResult::Completed { data, validation });
    Ok(Processed::Executed(value))
}

/// Plain handlers: lease, run, store the result with an owner-fenced `complete` (or release).
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
        Prelude::Unprotected(_) => {
            tracing::warn!(
                error_type = "Idempotency.KeyError",
                "no idempotency key: processing without idempotency"
            );
            return call_inner(inner, event).await.map(Processed::Unprotected);
        }
        Prelude::Proceed(claim) => claim,
    };
    let (owner, held_until_ms) = match acquire(&shared, &mut claim).await {
        Ok(held) => held,
        Err(answer) => return answer,
    };
    let (store, clock, config) = (&shared.store, &shared.clock, &shared.config);
    let (key, deadline_ms) = (&claim.key, claim.deadline_ms);
    let lease = shared.lease(&claim, &owner, held_until_ms);
    // The heartbeat covers the handler and the storing of its result.
    let work = async {
        let value = match call_inner(inner, event).await {
            Ok(value) => value,
            Err(err) => return Ok(Err(err)),
        };
        let expiration_secs = later_secs(clock.now(), config.expires_after);
        let stored = store_fitting(stored_result::to_json(&value), |data| {
            let request = CompleteRequest {
                key: key.clone(),
                owner: owner.clone(),
                status: Status::Completed,
                data,
                expiration_secs,
            };
            async move { finish::complete(store, clock, config, &request, deadline_ms).await }
        })
        .await;
        Ok(Ok((value, expiration_secs, stored)))
    };
    let (value, expiration_secs, stored) = match lease.run(work).await {
        Ok(Ok(done)) => done,
        Ok(Err(err)) => return settle_failure(&shared, &mut claim, &owner, err).await,
        Err(lost) => return Err(lost),
    };
    match stored {
        Ok((Fenced::Applied, data)) => executed(&shared, &mut claim, value, data, expiration_secs),
        Ok((Fenced::LeaseLost, _)) => Err(Error::LeaseLost { key: claim.key }),
        // The store stayed down: the record keeps its lease until the deadline.
        Err(err) => Err(Error::Store(err)),
    }
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
    let (owner, held_until_ms) = match acquire(&shared, &mut claim).await {
        Ok(held) => held,
        Err(answer) => return answer,
    };
    let (store, clock, config) = (&shared.store, &shared.clock, &shared.config);
    let (key, deadline_ms, validation) = (&claim.key, claim.deadline_ms, claim.stored_validation());
    let lease = shared.lease(&claim, &owner, held_until_ms);
    // The heartbeat covers the handler and the commit.
    let work = async {
        let Completion { result, writes } = match call_inner(inner, event).await {
            Ok(completion) => completion,
            Err(err) => return Ok(Err(err)),
        };
        let now = clock.now();
        let expiration_secs = later_secs(now, config.expires_after);
        let committed = store_fitting(stored_result::to_json(&result), |data| {
            let request = CommitRequest {
                key: key.clone(),
                owner: owner.clone(),
                now,
                status: Status::Completed,
                data,
                expiration_secs,
                validation: validation.clone(),
                writes: writes.clone(),
            };
            async move {
                match finish::commit(store, clock, config, &request, false, deadline_ms).await {
                    Ok(Commit::RecordRefused(record))
                        if is_our_commit(record.as_ref(), &request) =>
                    {
                        Ok(Commit::Applied)
                    }
                    other => other,
                }
            }
        })
        .await;
        Ok(Ok((result, expiration_secs, committed)))
    };
    let (result, expiration_secs, committed) = match lease.run(work).await {
        Ok(Ok(done)) => done,
        Ok(Err(err)) => return settle_failure(&shared, &mut claim, &owner, err).await,
        Err(lost) => return Err(lost),
    };
    let commit = match committed {
        Ok((Commit::Applied, data)) => {
            return executed(&shared, &mut claim, result, data, expiration_secs)
        }
        Ok((Commit::RecordRefused(_), _)) => return Err(Error::LeaseLost { key: claim.key }),
        Ok((other, _)) => Ok(other),
        Err(err) => Err(err),
    };
    let err = commit_error(&claim.key, commit);
    if err.is_request_fault() || matches!(err, Error::Conflict { .. }) {
        // Nothing was applied and sending it again will not help now: free the key.
        lease::release(
            store,
            clock,
            config.commit_attempts,
            &claim.key,
            &owner,
            claim.deadline_ms,
        )
        .await;
        claim.handler_failed();
    }
    Err(err)
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
    fn replay_reads_the_stored_json_and_acknowledges_what_no_longer_decodes() {
        let replayed: Processed<Vec<u32>> = replay(Some("[1,2]"));
        assert_eq!(replayed, Processed::Replayed(vec![1, 2]));
        let unit: Processed<()> = replay(None);
        assert_eq!(unit.outcome(), crate::Outcome::Replayed);
        assert_eq!(
            replay::<u32>(Some("\"text\"")),
            Processed::ReplayedWithoutResult
        );
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
}
