//! Stream batches (Kinesis, DynamoDB Streams): a shard's records run in order, processing
//! stops at the first record that does not succeed (the rest are reported without being
//! started, by sequence number), a redelivery replays what completed, and the handler's
//! ledger write commits once with the record. Driven by `events/kinesis.json` and
//! `events/dynamodb_stream.json` on the embedded store.

mod dynamodb_local;
mod dynamodb_streams;
mod kinesis;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lambda_idempotency::batch::{BatchEvent, BatchProcessor, BatchReport, Scheduling};
use lambda_idempotency::clock::{Clock, ManualClock, SystemClock};
use lambda_idempotency::key::KeyExtractor;
use lambda_idempotency::key::PayloadValidation;
use lambda_idempotency::store::{Attr, InMemoryStore, Write};
use lambda_idempotency::{CommitStrategy, Completion, Config, IdempotencyLayer, Outcome};
use lambda_idempotency_test_support::transactional_contract::Ledger;
use lambda_idempotency_test_support::{context_at, load_event_json};
use lambda_runtime::LambdaEvent;

const REMAINING: Duration = Duration::from_secs(30);

/// The order a stream record carries.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Order {
    account: String,
    amount: i64,
}

/// A stream event type: its sample, its processor, and how its records carry an order.
trait Stream: BatchEvent<Record: lambda_idempotency::input::Identified> + Sized {
    /// The sample event's file in `events/`.
    const SAMPLE: &'static str;
    /// This event with `records` instead of its own.
    fn with_records(self, records: Vec<Self::Record>) -> Self;
    fn processor<S>(service: S) -> BatchProcessor<S, SystemClock, Self>;
    /// The order a record carries, or `None` for a record that credits nothing.
    fn order(record: &Self::Record) -> Result<Option<Order>, lambda_runtime::Error>;
}

type Report<E> = BatchReport<i64, <E as BatchEvent>::Response>;

/// A ledger table on a store, credited by a handler with writes (in `mode`), counting its
/// runs.
struct Rig<St = InMemoryStore> {
    store: St,
    ledger: String,
    mode: CommitStrategy,
    validation: PayloadValidation,
    batch_mode: Option<Scheduling>,
    clock: ManualClock,
    runs: Arc<AtomicUsize>,
}

impl Rig {
    async fn new() -> Self {
        Rig::on(InMemoryStore::new(), CommitStrategy::Lease).await
    }
}

impl<St: Ledger + Clone> Rig<St> {
    async fn on(store: St, mode: CommitStrategy) -> Self {
        let ledger = store.ledger().await;
        Self {
            store,
            ledger,
            mode,
            validation: PayloadValidation::Off,
            batch_mode: None,
            clock: ManualClock::starting_now(),
            runs: Arc::default(),
        }
    }

    /// Validates payloads with `validation`.
    fn with_validation(mut self, validation: PayloadValidation) -> Self {
        self.validation = validation;
        self
    }

    /// Schedules the batch with `mode` instead of the default.
    fn with_batch_mode(mut self, mode: Scheduling) -> Self {
        self.batch_mode = Some(mode);
        self
    }

    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    async fn balance(&self, account: &str) -> i64 {
        self.store.balance(&self.ledger, account).await
    }

    async fn deliver<E, K>(&self, key: K, event: E) -> Report<E>
    where
        E: Stream,
        K: KeyExtractor<E::Record> + Clone,
    {
        let layer = IdempotencyLayer::new(self.store.clone())
            .with_key(key)
            .with_clock(self.clock.clone())
            .with_config(Config::new().with_key_prefix("streams"))
            .with_writes()
            .with_commit(self.mode);
        let (runs, ledger) = (self.runs.clone(), self.ledger.clone());
        let handler = layer.handler(move |record: E::Record| {
            runs.fetch_add(1, Ordering::SeqCst);
            let order = E::order(&record);
            let ledger = ledger.clone();
            async move {
                let Some(order) = order? else {
                    return Ok(Completion::new(0));
                };
                let credit = Write::update(
                    ledger,
                    [("account", Attr::s(&order.account))],
                    "ADD #balance :amount",
                )
                .name("#balance", "balance")
                .value(":amount", Attr::n(order.amount));
                Ok::<_, lambda_runtime::Error>(Completion::new(order.amount).with_write(credit))
            }
        });
        let context = context_at(self.clock.now(), REMAINING);
        let mut processor = E::processor(handler).with_clock(self.clock.clone());
        if let Some(mode) = self.batch_mode {
            processor = processor.with_scheduling(mode);
        }
        processor.process(LambdaEvent::new(event, context)).await
    }
}

/// The sample event of `E`.
fn sample<E: Stream + serde::de::DeserializeOwned>() -> E {
    serde_json::from_value(load_event_json(E::SAMPLE)).unwrap()
}

/// The sample's records `indexes`, as one batch.
fn records<E>(indexes: &[usize]) -> E
where
    E: Stream + serde::de::DeserializeOwned,
    E::Record: Clone,
{
    let all = sample::<E>().into_records();
    sample::<E>().with_records(indexes.iter().map(|&i| all[i].clone()).collect())
}

/// The item identifiers a partial batch response reports, whatever the stream.
fn reported<R: serde::Serialize>(response: &R) -> Vec<String> {
    let response = serde_json::to_value(response).unwrap();
    let failures = response["batchItemFailures"].as_array().unwrap();
    failures
        .iter()
        .map(|f| f["itemIdentifier"].as_str().unwrap().to_string())
        .collect()
}

fn outcomes<R>(report: &BatchReport<i64, R>) -> Vec<Outcome> {
    report.records.iter().map(|r| r.outcome).collect()
}

fn values<R>(report: &BatchReport<i64, R>) -> Vec<Option<i64>> {
    report.records.iter().map(|r| r.value).collect()
}

/// Outcomes of the sample batch, each stream's: a good record, one that is not an order,
/// and a good one behind it.
const STOPPED: [Outcome; 3] = [Outcome::Executed, Outcome::Failed, Outcome::FifoSkipped];
