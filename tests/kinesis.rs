//! Kinesis batches: records of a shard run in order, processing stops at the first record
//! that does not succeed (the rest are reported without being started, by sequence number),
//! a redelivery replays what completed, and the handler's ledger write commits once with the
//! record. Driven by `events/kinesis.json` on the embedded store.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};
use lambda_idempotency::batch::{BatchProcessor, BatchReport};
use lambda_idempotency::clock::{Clock, ManualClock};
use lambda_idempotency::key::{JsonPointer, KeyExtractor, MessageAttribute};
use lambda_idempotency::store::{Attr, InMemoryStore, Write};
use lambda_idempotency::{Completion, Config, IdempotencyLayer, Outcome};
use lambda_idempotency_test_support::{context_at, load_event_json};
use lambda_runtime::LambdaEvent;

const REMAINING: Duration = Duration::from_secs(30);
const SEQUENCE: &str = "495903382714902566085596925383615710959215759891365888";

#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Order {
    account: String,
    amount: i64,
}

fn sample() -> KinesisEvent {
    serde_json::from_value(load_event_json("kinesis.json")).unwrap()
}

/// The sample's records `indexes`, as one batch.
fn records(indexes: &[usize]) -> KinesisEvent {
    let all = sample().records;
    let mut event = sample();
    event.records = indexes.iter().map(|&i| all[i].clone()).collect();
    event
}

type KinesisReport = BatchReport<i64, aws_lambda_events::event::streams::KinesisEventResponse>;

/// A ledger on the embedded store, credited by a handler with writes, counting its runs.
struct Rig {
    store: InMemoryStore,
    clock: ManualClock,
    runs: Arc<AtomicUsize>,
}

impl Rig {
    fn new() -> Self {
        let store = InMemoryStore::new();
        store.define_table("ledger", &["account"]);
        Self {
            store,
            clock: ManualClock::starting_now(),
            runs: Arc::default(),
        }
    }

    fn balance(&self, account: &str) -> Option<Attr> {
        let key = [("account".to_string(), Attr::s(account))].into();
        self.store.item("ledger", &key)?.get("balance").cloned()
    }

    async fn deliver<K>(&self, key: K, event: KinesisEvent) -> KinesisReport
    where
        K: KeyExtractor<KinesisEventRecord> + Clone,
    {
        let layer = IdempotencyLayer::new(self.store.clone())
            .with_key(key)
            .with_clock(self.clock.clone())
            .with_config(Config::new().with_key_prefix("kinesis"))
            .with_writes();
        let runs = self.runs.clone();
        let handler = layer.handler(move |record: KinesisEventRecord| {
            runs.fetch_add(1, Ordering::SeqCst);
            async move {
                let order: Order = serde_json::from_slice(&record.kinesis.data.0)?;
                let credit = Write::update(
                    "ledger",
                    [("account", Attr::s(&order.account))],
                    "ADD #balance :amount",
                )
                .name("#balance", "balance")
                .value(":amount", Attr::n(order.amount));
                Ok::<_, lambda_runtime::Error>(Completion::new(order.amount).with_write(credit))
            }
        });
        let context = context_at(self.clock.now(), REMAINING);
        BatchProcessor::kinesis(handler)
            .with_clock(self.clock.clone())
            .process(LambdaEvent::new(event, context))
            .await
    }
}

fn outcomes(report: &KinesisReport) -> Vec<Outcome> {
    report.records.iter().map(|r| r.outcome).collect()
}

fn reported(report: &KinesisReport) -> Vec<String> {
    let failures = &report.response.batch_item_failures;
    failures
        .iter()
        .filter_map(|f| f.item_identifier.clone())
        .collect()
}

fn sequence(n: u8) -> String {
    format!("{SEQUENCE}{n:02}")
}

#[tokio::test]
async fn a_shard_runs_in_order_and_stops_at_the_first_failure() {
    let rig = Rig::new();
    // A good record, one whose data is not an order, then a good one behind it.
    let report = rig
        .deliver(lambda_idempotency::key::MessageId, sample())
        .await;
    assert_eq!(
        outcomes(&report),
        [Outcome::Executed, Outcome::Failed, Outcome::FifoSkipped]
    );
    assert_eq!(reported(&report), [sequence(2), sequence(3)]);
    assert_eq!(
        rig.runs.load(Ordering::SeqCst),
        2,
        "the third record never started"
    );
    assert_eq!(rig.balance("acct-alice"), Some(Attr::n(10)));
    assert_eq!(rig.balance("acct-bob"), None);
    // Lambda sends the batch again from the checkpoint (the lowest reported record): the
    // failed record runs again, the skipped one is still not started.
    let again = rig
        .deliver(lambda_idempotency::key::MessageId, records(&[1, 2]))
        .await;
    assert_eq!(outcomes(&again), [Outcome::Failed, Outcome::FifoSkipped]);
    assert_eq!(reported(&again), [sequence(2), sequence(3)]);
    assert_eq!(rig.runs.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_redelivered_batch_replays_and_credits_once() {
    let rig = Rig::new();
    let first = rig
        .deliver(lambda_idempotency::key::MessageId, records(&[0, 2]))
        .await;
    assert_eq!(outcomes(&first), [Outcome::Executed, Outcome::Executed]);
    assert!(reported(&first).is_empty());
    rig.clock.advance(Duration::from_secs(60));
    // The whole batch again (the invocation's answer was lost, say).
    let again = rig
        .deliver(lambda_idempotency::key::MessageId, records(&[0, 2]))
        .await;
    assert_eq!(outcomes(&again), [Outcome::Replayed, Outcome::Replayed]);
    assert!(reported(&again).is_empty());
    let replayed: Vec<Option<i64>> = again.records.iter().map(|r| r.value).collect();
    assert_eq!(replayed, [Some(10), Some(5)]);
    assert_eq!(rig.runs.load(Ordering::SeqCst), 2);
    assert_eq!(rig.balance("acct-alice"), Some(Attr::n(10)));
    assert_eq!(rig.balance("acct-bob"), Some(Attr::n(5)));
}

#[tokio::test]
async fn a_key_from_the_data_catches_a_producer_that_put_twice() {
    let rig = Rig::new();
    // The same order put twice: two records, two sequence numbers, one eventId.
    let mut event = records(&[0, 0]);
    event.records[1].kinesis.sequence_number = sequence(9);
    event.records[1].event_id = Some(format!("shardId-000000000000:{}", sequence(9)));
    let report = rig.deliver(JsonPointer::new("/eventId"), event).await;
    assert_eq!(outcomes(&report), [Outcome::Executed, Outcome::Replayed]);
    assert_eq!(rig.runs.load(Ordering::SeqCst), 1);
    assert_eq!(rig.balance("acct-alice"), Some(Attr::n(10)));
}

#[test]
fn a_record_reads_as_its_event_id_data_and_partition_key() {
    let record = &sample().records[0];
    assert_eq!(
        lambda_idempotency::key::MessageId
            .key_material(record)
            .unwrap(),
        format!("shardId-000000000000:{}", sequence(1)).into_bytes()
    );
    assert_eq!(
        JsonPointer::new("/account").key_material(record).unwrap(),
        b"acct-alice"
    );
    assert_eq!(
        MessageAttribute::new("partitionKey")
            .key_material(record)
            .unwrap(),
        b"acct-alice"
    );
    assert!(MessageAttribute::new("other").key_material(record).is_err());
}
