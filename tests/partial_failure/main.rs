//! Per-delivery behaviour under partial failure, on the embedded store: how many times the
//! handler ran, each record's outcome, the stored record, what `batchItemFailures` held.
//! Each test pins one defect of the record protocol that an earlier version had.

mod config_edges;
mod fifo;
mod heartbeats;
mod keys;
mod results;
mod store_faults;
mod transactional;

use lambda_idempotency_test_support as support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::batch::{BatchProcessor, BatchReport};
use lambda_idempotency::clock::{Clock, ManualClock};
use lambda_idempotency::key::IdempotencyKey;
use lambda_idempotency::store::{InMemoryStore, Store};
use lambda_idempotency::{Config, Error, IdempotencyLayer};
use support::faulty_store::FaultyStore;
use support::invocation;

const REMAINING: Duration = Duration::from_secs(30);

fn message(id: &str, body: &str) -> SqsMessage {
    let mut m = SqsMessage::default();
    m.message_id = Some(id.into());
    m.body = Some(body.into());
    m.event_source_arn = Some("arn:aws:sqs:eu-west-1:123456789012:orders".into());
    m
}

fn batch(messages: impl IntoIterator<Item = SqsMessage>) -> SqsEvent {
    let mut event = SqsEvent::default();
    event.records.extend(messages);
    event
}

/// The stored record of a message keyed on its `messageId` under the prefix `t`.
async fn stored<S: Store>(
    store: &S,
    message_id: &str,
) -> Option<lambda_idempotency::record::Record> {
    store
        .get(&IdempotencyKey::derive("t", message_id.as_bytes()))
        .await
        .unwrap()
}

fn config() -> Config {
    Config::new().with_key_prefix("t")
}

/// A plain handler over `store` that counts its runs and, while `fail` is set, fails.
fn counting<S: Store + Clone>(
    store: S,
    clock: &ManualClock,
    config: Config,
    runs: Arc<AtomicUsize>,
    fail: Arc<AtomicBool>,
) -> BatchProcessor<
    impl tower::Service<
            lambda_idempotency::batch::BatchRecord<SqsMessage>,
            Response = lambda_idempotency::Processed<String>,
            Error = Error,
        > + Clone,
    ManualClock,
> {
    let layer = IdempotencyLayer::new(store)
        .with_clock(clock.clone())
        .with_config(config);
    BatchProcessor::new(layer.handler(move |m: SqsMessage| {
        let (runs, fail) = (runs.clone(), fail.clone());
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            if fail.load(Ordering::SeqCst) {
                return Err(std::io::Error::other("declined"));
            }
            Ok(m.message_id.unwrap_or_default())
        }
    }))
    .with_clock(clock.clone())
}

struct Rig {
    store: FaultyStore<InMemoryStore>,
    clock: ManualClock,
    runs: Arc<AtomicUsize>,
    fail: Arc<AtomicBool>,
}

impl Rig {
    fn new() -> Self {
        Self {
            store: FaultyStore::new(InMemoryStore::new()),
            clock: ManualClock::starting_now(),
            runs: Arc::default(),
            fail: Arc::default(),
        }
    }

    async fn deliver(&self, config: Config, event: SqsEvent) -> BatchReport<String> {
        counting(
            self.store.clone(),
            &self.clock,
            config,
            self.runs.clone(),
            self.fail.clone(),
        )
        .process(invocation(event, self.clock.now(), REMAINING))
        .await
    }

    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}
