//! [`IdempotencyLayer`] and the [`Idempotent`] service it builds around a per-record
//! handler.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::SystemTime;

use aws_lambda_events::sqs::SqsMessage;
use futures_util::FutureExt;
use lambda_runtime::LambdaEvent;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tower::{Layer, Service};

use crate::cache::CompletedCache;
use crate::clock::{epoch_ms, epoch_secs, Clock, SystemClock};
use crate::config::{Config, MissingKey};
use crate::error::{BoxError, Error};
use crate::in_flight::{self, FlightResult, InFlight, Join};
use crate::key::{IdempotencyKey, KeyError, KeyExtractor, MessageId, MAX_KEY_BYTES};
use crate::processed::Processed;
use crate::record::{decide, Decision, OwnerToken, Record, Status};
use crate::record_fn::{record_fn, RecordFn};
use crate::store::{Acquire, AcquireRequest, CompleteRequest, Fenced, Store};

/// The prefix used when neither the configuration nor the Lambda environment names one.
pub const FALLBACK_KEY_PREFIX: &str = "lambda-idempotency";

/// Builds [`Idempotent`] services: the per-record idempotency protocol around a handler.
///
/// Clones (and every service built from one layer) share the local cache and the in-process
/// single-flight table.
#[derive(Debug, Clone)]
pub struct IdempotencyLayer<St, K = MessageId, C = SystemClock> {
    store: St,
    key: K,
    clock: C,
    config: Config,
    state: Arc<State>,
}

#[derive(Debug)]
struct State {
    cache: Option<Mutex<CompletedCache>>,
    in_flight: Arc<InFlight>,
}

impl State {
    fn new(config: &Config) -> Arc<Self> {
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

impl<St: Store> IdempotencyLayer<St> {
    /// A layer on `store`, keyed by `messageId`, with the default [`Config`].
    pub fn new(store: St) -> Self {
        let config = Config::default();
        Self {
            store,
            key: MessageId,
            clock: SystemClock,
            state: State::new(&config),
            config,
        }
    }
}

impl<St, K, C> IdempotencyLayer<St, K, C> {
    /// Derives keys with `key` instead.
    pub fn with_key<K2: KeyExtractor>(self, key: K2) -> IdempotencyLayer<St, K2, C> {
        IdempotencyLayer {
            store: self.store,
            key,
            clock: self.clock,
            config: self.config,
            state: self.state,
        }
    }

    /// Reads time from `clock` instead of the system clock.
    pub fn with_clock<C2: Clock>(self, clock: C2) -> IdempotencyLayer<St, K, C2> {
        IdempotencyLayer {
            store: self.store,
            key: self.key,
            clock,
            config: self.config,
            state: self.state,
        }
    }

    /// Uses `config` (this starts a fresh local cache).
    pub fn with_config(mut self, config: Config) -> Self {
        self.state = State::new(&config);
        self.config = config;
        self
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The store.
    pub fn store(&self) -> &St {
        &self.store
    }

    /// Wraps a plain `async fn(SqsMessage) -> Result<T, E>` handler.
    pub fn handler<F>(&self, f: F) -> Idempotent<RecordFn<F>, St, K, C>
    where
        St: Clone,
        K: Clone,
        C: Clone,
    {
        self.layer(record_fn(f))
    }
}

impl<S, St: Clone, K: Clone, C: Clone> Layer<S> for IdempotencyLayer<St, K, C> {
    type Service = Idempotent<S, St, K, C>;

    fn layer(&self, inner: S) -> Self::Service {
        Idempotent {
            inner,
            shared: Arc::new(Shared {
                store: self.store.clone(),
                key: self.key.clone(),
                clock: self.clock.clone(),
                config: self.config.clone(),
                state: Arc::clone(&self.state),
            }),
        }
    }
}

#[derive(Debug)]
struct Shared<St, K, C> {
    store: St,
    key: K,
    clock: C,
    config: Config,
    state: Arc<State>,
}

/// A per-record service made idempotent: the inner handler runs at most once per key while
/// the record counts, under a lease that ends at the invocation deadline.
///
/// Request: `LambdaEvent<SqsMessage>` (the `Context` carries the deadline). Response:
/// [`Processed<T>`]. Error: [`Error`], each mapping to an [`Outcome`](crate::Outcome).
///
/// # Clone
/// The inner service is cloned for every call: the ready one is taken for the call and a
/// clone is left in its place, because the call awaits the store before using it.
#[derive(Debug)]
pub struct Idempotent<S, St, K = MessageId, C = SystemClock> {
    inner: S,
    shared: Arc<Shared<St, K, C>>,
}

impl<S: Clone, St, K, C> Clone for Idempotent<S, St, K, C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<S, St, K, C> Idempotent<S, St, K, C> {
    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, consuming the wrapper.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

/// The future an [`Idempotent`] service returns.
pub type ResponseFuture<T> = Pin<Box<dyn Future<Output = Result<Processed<T>, Error>> + Send>>;

impl<S, St, K, C, T> Service<LambdaEvent<SqsMessage>> for Idempotent<S, St, K, C>
where
    S: Service<LambdaEvent<SqsMessage>, Response = T> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    T: Serialize + DeserializeOwned + Send + 'static,
    St: Store,
    K: KeyExtractor,
    C: Clock,
{
    type Response = Processed<T>;
    type Error = Error;
    type Future = ResponseFuture<T>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.inner
            .poll_ready(cx)
            .map_err(|e| Error::Handler(e.into()))
    }

    fn call(&mut self, event: LambdaEvent<SqsMessage>) -> Self::Future {
        let clone = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, clone);
        Box::pin(run(Arc::clone(&self.shared), ready, event))
    }
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

fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// Runs the inner handler, turning its error or panic into [`Error`].
async fn call_inner<S, T>(inner: S, event: LambdaEvent<SqsMessage>) -> Result<T, Error>
where
    S: Service<LambdaEvent<SqsMessage>, Response = T>,
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

async fn run<S, St, K, C, T>(
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
    let config = &shared.config;
    let key = match shared.key.key_material(&event.payload) {
        Ok(material) => IdempotencyKey::derive(&key_prefix(config, &event.context), &material),
        Err(err) if err.is_absent() && config.missing_key == MissingKey::ProcessUnprotected => {
            tracing::warn!(error = %err, "no idempotency key: processing without idempotency");
            return call_inner(inner, event).await.map(Processed::Unprotected);
        }
        Err(err) => return Err(Error::Key(err)),
    };
    if key.as_str().len() > MAX_KEY_BYTES {
        return Err(Error::Key(KeyError::KeyTooLong {
            len_bytes: key.as_str().len(),
        }));
    }
    tracing::Span::current().record("idempotency_key", key.as_str());
    let validation = config.validation.hash(&event.payload)?;

    let now = shared.clock.now();
    if let Some(record) = shared.state.cached(&key, now) {
        match decide(&record, now, validation.as_deref()) {
            Decision::Replay { data } => return replay(data.as_deref()),
            Decision::PayloadMismatch => return Err(Error::PayloadMismatch { key }),
            Decision::InProgress | Decision::Retry => {}
        }
    }

    // Records of this process that share the key wait for the first one; once its handler
    // failed, the others of the same invocation do not run it again.
    let request_id = event.context.request_id.clone();
    if shared.state.in_flight.failed_earlier(&request_id, &key) {
        return Err(Error::SameKeyFailed { key });
    }
    let flight = match shared.state.in_flight.join(&key) {
        Join::Leader(guard) => Some(guard),
        Join::Follower(slot) => match in_flight::wait(slot).await {
            FlightResult::Completed {
                data,
                validation: stored,
            } => {
                return match (stored, &validation) {
                    (Some(stored), Some(ours)) if &stored != ours => {
                        Err(Error::PayloadMismatch { key })
                    }
                    _ => replay(Some(&data)),
                };
            }
            FlightResult::HandlerFailed => return Err(Error::SameKeyFailed { key }),
            FlightResult::NotStarted => None,
        },
    };
    let finish = |result: FlightResult| {
        if result == FlightResult::HandlerFailed {
            shared.state.in_flight.record_failure(&request_id, &key);
        }
        if let Some(guard) = flight {
            guard.finish(result);
        }
    };

    let deadline_ms = event.context.deadline;
    let owner = OwnerToken::generate();
    let mut acquired = false;
    for _ in 0..config.acquire_attempts {
        let now = shared.clock.now();
        let now_ms = epoch_ms(now);
        let lease_expiration_ms = match config.max_lease {
            Some(max) => deadline_ms.min(epoch_ms(now + max)),
            None => deadline_ms,
        };
        if lease_expiration_ms <= now_ms {
            return Err(Error::DeadlineNear);
        }
        let request = AcquireRequest {
            key: key.clone(),
            owner: owner.clone(),
            now,
            lease_expiration_ms,
            // Never let the record expire before its lease ends.
            expiration_secs: epoch_secs(now + config.expires_after)
                .max(lease_expiration_ms.div_ceil(1000)),
            validation: validation.clone(),
        };
        match shared.store.acquire(&request).await? {
            Acquire::Acquired => {
                acquired = true;
                break;
            }
            Acquire::Existing(record) => match decide(&record, now, validation.as_deref()) {
                Decision::Replay { data } => {
                    let replayed = replay(data.as_deref());
                    if replayed.is_ok() {
                        finish(FlightResult::Completed {
                            data: data.unwrap_or_else(|| "null".into()),
                            validation: record.validation.clone(),
                        });
                        shared.state.remember(record);
                    }
                    return replayed;
                }
                Decision::InProgress => return Err(Error::InProgress { key }),
                Decision::PayloadMismatch => return Err(Error::PayloadMismatch { key }),
                Decision::Retry => continue,
            },
            Acquire::Contended => continue,
        }
    }
    if !acquired {
        return Err(Error::Contended { key });
    }

    let value = match call_inner(inner, event).await {
        Ok(value) => value,
        Err(err) => {
            release(&shared.store, &key, &owner).await;
            finish(FlightResult::HandlerFailed);
            return Err(err);
        }
    };
    let data = match serde_json::to_string(&value) {
        Ok(data) => data,
        Err(err) => {
            release(&shared.store, &key, &owner).await;
            finish(FlightResult::HandlerFailed);
            return Err(Error::Codec(err));
        }
    };
    let expiration_secs = epoch_secs(shared.clock.now() + config.expires_after);
    let request = CompleteRequest {
        key: key.clone(),
        owner,
        data,
        expiration_secs,
    };
    match shared.store.complete(&request).await {
        Ok(Fenced::Applied) => {
            shared.state.remember(Record {
                key: key.clone(),
                status: Status::Completed,
                expiration_secs,
                lease_expiration_ms: None,
                owner: None,
                data: Some(request.data.clone()),
                validation: validation.clone(),
            });
            finish(FlightResult::Completed {
                data: request.data,
                validation,
            });
            Ok(Processed::Executed(value))
        }
        Ok(Fenced::LeaseLost) => Err(Error::LeaseLost { key }),
        Err(err @ crate::StoreError::ItemTooLarge { .. }) => {
            release(&shared.store, &key, &request.owner).await;
            finish(FlightResult::HandlerFailed);
            Err(Error::Store(err))
        }
        Err(err) => Err(Error::Store(err)),
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
                error = %crate::error::error_chain(&err),
                "could not release the lease; it ends at the invocation deadline"
            );
        }
    }
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
}
