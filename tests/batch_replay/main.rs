//! Replaying a batch's pre-checked duplicates together (`BatchProcessor::with_batch_replay`),
//! on the embedded store. Each delivery is checked: outcomes, values, handler runs, store
//! calls, `batchItemFailures`, and which records went through their own service call (a
//! `batch_record` span in the logs). A record the batch cannot replay must end exactly as it
//! ends without batch replay.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::batch::{
    BatchProcessor, BatchRecord, BatchReplay, BatchReplayer, BatchReport, Precheck, Scheduling,
};
use lambda_idempotency::clock::{epoch_ms, Clock, ManualClock};
use lambda_idempotency::hooks::ReplaySource;
use lambda_idempotency::key::PayloadValidation;
use lambda_idempotency::key::{IdempotencyKey, MessageId};
use lambda_idempotency::record::{OwnerToken, Record, Status};
use lambda_idempotency::store::InMemoryStore;
use lambda_idempotency::{Config, Error, IdempotencyLayer, Outcome, Processed};
use lambda_idempotency_test_support::faulty_store::FaultyStore;
use lambda_idempotency_test_support::{invocation, outcomes, reported};
use lambda_runtime::LambdaEvent;
use tower::Service;

mod alike;
mod edges;
mod together;
mod turns;

pub(crate) const REMAINING: Duration = Duration::from_secs(30);

/// FIFO, a failure stopping the rest of the batch.
const FIFO: Scheduling = Scheduling::Fifo {
    skip_failed_group_only: false,
};

/// Message `id` with `body`, received `receive_count` times so far, in group `g` of a FIFO
/// queue when `fifo`.
fn message(id: &str, body: &str, receive_count: u32, fifo: bool) -> SqsMessage {
    let mut message = SqsMessage::default();
    message.message_id = Some(id.into());
    message.body = Some(body.into());
    message
        .attributes
        .insert("ApproximateReceiveCount".into(), receive_count.to_string());
    if fifo {
        message.event_source_arn = Some("arn:aws:sqs:us-east-1:1:orders.fifo".into());
        message
            .attributes
            .insert("MessageGroupId".into(), "g".into());
    }
    message
}

fn batch(messages: Vec<SqsMessage>) -> SqsEvent {
    let mut event = SqsEvent::default();
    event.records = messages;
    event
}

/// Collects what the log subscriber writes.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// The lines saying how message `id` ended ("record processed", "record not processed"):
    /// whether each was written within the record's own `batch_record` span (its own call of
    /// the service).
    fn processed(&self, id: &str) -> Vec<bool> {
        let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
        let id = format!("item_identifier=\"{id}\"");
        text.lines()
            .filter(|l| {
                (l.contains("record processed") || l.contains("record not processed"))
                    && l.contains(&id)
            })
            .map(|l| l.contains("batch_record{"))
            .collect()
    }
}

struct Rig {
    store: FaultyStore<InMemoryStore>,
    clock: ManualClock,
    runs: Arc<AtomicUsize>,
    hooked: Arc<Mutex<Vec<ReplaySource>>>,
    logs: Logs,
}

impl Rig {
    fn new() -> Self {
        Self {
            store: FaultyStore::new(InMemoryStore::new()),
            clock: ManualClock::starting_now(),
            runs: Arc::default(),
            hooked: Arc::default(),
            logs: Logs::default(),
        }
    }

    /// A processor over a new layer (a new process: nothing known locally), replaying
    /// together when `together`. The handler answers the body's length, and fails for a
    /// body of "fail".
    fn processor(
        &self,
        together: bool,
        cache: usize,
        mode: Scheduling,
    ) -> Replaying<
        impl Service<BatchRecord<SqsMessage>, Response = Processed<usize>, Error = Error> + Clone,
    > {
        let hooked = self.hooked.clone();
        let layer = IdempotencyLayer::new(self.store.clone())
            .with_clock(self.clock.clone())
            .with_config(
                Config::new()
                    .with_key_prefix("replay")
                    .with_payload_validation(PayloadValidation::Body)
                    .with_local_cache(cache)
                    .with_response_hook(move |value, replay| {
                        hooked.lock().unwrap().push(replay.source);
                        // A hook with a bug, for the result of a body of 13 bytes.
                        assert_ne!(value, serde_json::json!(13), "the hook's bug");
                        value
                    }),
            );
        let runs = self.runs.clone();
        let handler = layer.handler(move |message: SqsMessage| {
            runs.fetch_add(1, Ordering::SeqCst);
            let body = message.body.unwrap_or_default();
            std::future::ready(match body.as_str() {
                "fail" => Err(std::io::Error::other("the handler failed")),
                _ => Ok(body.len()),
            })
        });
        let processor = BatchProcessor::new(handler)
            .with_clock(self.clock.clone())
            .with_precheck(Precheck::Redelivered)
            .with_scheduling(mode);
        replaying(processor, together)
    }

    /// The FIFO case that replays and skips both turn on, with a new processor (replaying
    /// together when `together`): m-2 and m-4 run, then m-2 (redelivered), m-3 (failing) and
    /// m-4 (redelivered) arrive in one batch. Both batches' reports.
    async fn fifo_failure_between_duplicates(
        &self,
        together: bool,
    ) -> (BatchReport<usize>, BatchReport<usize>) {
        let processor = self.processor(together, 0, FIFO);
        let first = vec![message("m-2", "{}", 1, true), message("m-4", "{}", 1, true)];
        let first = self.run(&processor, batch(first)).await;
        let again = vec![
            message("m-2", "{}", 2, true),
            message("m-3", "fail", 1, true),
            message("m-4", "{}", 2, true),
        ];
        (first, self.run(&processor, batch(again)).await)
    }

    /// Stores `id`'s record as held by another invocation's live lease (a minute left) and
    /// answers it.
    fn held_elsewhere(&self, id: &str) -> Record {
        let now_ms = epoch_ms(self.clock.now());
        let held = Record {
            key: IdempotencyKey::derive("replay", id.as_bytes()),
            status: Status::InProgress,
            expiration_secs: now_ms / 1000 + 3600,
            lease_expiration_ms: Some(now_ms + 60_000),
            owner: Some(OwnerToken::new("another-invocation")),
            data: None,
            validation: None,
        };
        self.store.inner.insert_record(held.clone());
        held
    }

    /// A layer over this rig's store and clock, keys prefixed "replay".
    fn layer(&self) -> IdempotencyLayer<FaultyStore<InMemoryStore>, MessageId, ManualClock> {
        IdempotencyLayer::new(self.store.clone())
            .with_clock(self.clock.clone())
            .with_config(Config::new().with_key_prefix("replay"))
    }

    /// A processor of `service` on this rig's clock, replaying together when `together`.
    fn over<S>(&self, service: S, together: bool) -> Replaying<S>
    where
        S: BatchReplay<SqsMessage, Value = usize>,
    {
        self.over_with(service, together, |processor| processor)
    }

    /// [`over`](Self::over), the processor set up by `configure` first.
    fn over_with<S>(
        &self,
        service: S,
        together: bool,
        configure: impl FnOnce(BatchProcessor<S, ManualClock>) -> BatchProcessor<S, ManualClock>,
    ) -> Replaying<S>
    where
        S: BatchReplay<SqsMessage, Value = usize>,
    {
        let processor = BatchProcessor::new(service).with_clock(self.clock.clone());
        replaying(configure(processor), together)
    }

    /// `event` through `processor`, its logs collected.
    async fn run<S>(&self, processor: &Replaying<S>, event: SqsEvent) -> BatchReport<usize>
    where
        S: Service<BatchRecord<SqsMessage>, Response = Processed<usize>, Error = Error> + Clone,
    {
        self.run_with(processor, event, REMAINING).await
    }

    /// `event` through `processor` with `remaining` before the deadline.
    async fn run_with<S>(
        &self,
        processor: &Replaying<S>,
        event: SqsEvent,
        remaining: Duration,
    ) -> BatchReport<usize>
    where
        S: Service<BatchRecord<SqsMessage>, Response = Processed<usize>, Error = Error> + Clone,
    {
        let logs = self.logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || logs.clone())
            .with_ansi(false)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        processor
            .process(invocation(event, self.clock.now(), remaining))
            .await
    }

    async fn deliver(&self, together: bool, messages: Vec<SqsMessage>) -> BatchReport<usize> {
        let processor = self.processor(together, 0, Scheduling::default());
        self.run(&processor, batch(messages)).await
    }

    /// The stored record of message `id`.
    fn stored(&self, id: &str) -> Record {
        let key = IdempotencyKey::derive("replay", id.as_bytes());
        let records = self.store.inner.records();
        records.into_iter().find(|r| r.key == key).expect("stored")
    }

    /// (`get_many`, `acquire`) calls so far.
    fn calls(&self) -> (usize, usize) {
        let calls = &self.store.calls;
        (
            calls.get_many.load(Ordering::SeqCst),
            calls.acquire.load(Ordering::SeqCst),
        )
    }

    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}

/// What `case` ends with, run without and then with batch replay (`together`): the same
/// both ways, asserted; answered once.
async fn both_ways<T, F, Fut>(mut case: F) -> T
where
    T: std::fmt::Debug + PartialEq,
    F: FnMut(bool) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let without = case(false).await;
    let with = case(true).await;
    assert_eq!(with, without, "[with, without]");
    without
}

/// A handler's answer: the message body's length.
fn body_len(m: SqsMessage) -> std::future::Ready<std::io::Result<usize>> {
    std::future::ready(Ok(m.body.unwrap_or_default().len()))
}

/// A processor on the rig's clock, replaying its batches' pre-checked records together or
/// not.
type Replaying<S> = BatchProcessor<S, ManualClock, SqsEvent, BatchReplayer<SqsMessage, usize>>;

/// `processor`, replaying its batches' pre-checked records together when `together`.
fn replaying<S>(processor: BatchProcessor<S, ManualClock>, together: bool) -> Replaying<S>
where
    S: BatchReplay<SqsMessage, Value = usize>,
{
    processor.with_batch_replay(together)
}

/// Whether a handler is ready, asked on each `poll_ready`.
type ReadyWhen =
    dyn Fn(&mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> + Send + Sync;

/// A handler answering the body's length, ready when its `ReadyWhen` says (a load shedder, a
/// limiter, a service with a bug).
#[derive(Clone)]
struct Readiness(Arc<ReadyWhen>);

impl Readiness {
    fn new(
        when: impl Fn(&mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>>
            + Send
            + Sync
            + 'static,
    ) -> Self {
        Self(Arc::new(when))
    }
}

impl Service<LambdaEvent<SqsMessage>> for Readiness {
    type Response = usize;
    type Error = std::io::Error;
    type Future = std::future::Ready<Result<usize, std::io::Error>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        (self.0)(cx)
    }

    fn call(&mut self, event: LambdaEvent<SqsMessage>) -> Self::Future {
        std::future::ready(Ok(event.payload.body.unwrap_or_default().len()))
    }
}

/// Moves `clock` 10 ms per real millisecond until dropped.
struct Ticking(Arc<AtomicBool>, Option<std::thread::JoinHandle<()>>);

impl Ticking {
    fn start(clock: &ManualClock) -> Self {
        let (clock, stop) = (clock.clone(), Arc::new(AtomicBool::new(false)));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
                clock.advance(Duration::from_millis(10));
            }
        });
        Self(stop, Some(thread))
    }
}

impl Drop for Ticking {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
        if let Some(thread) = self.1.take() {
            let _ = thread.join();
        }
    }
}

fn values(report: &BatchReport<usize>) -> Vec<Option<usize>> {
    report.records.iter().map(|r| r.value).collect()
}
