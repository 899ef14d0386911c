//! Transactional completion against DynamoDB Local, in both modes: the ledger write and the
//! idempotency record commit together, so the effect happens exactly once even when the
//! process dies at any step, a commit's response is lost, or the lease is lost.

mod commit_faults;
mod handler_failures;
mod redelivery;

use lambda_idempotency_test_support as support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use aws_sdk_dynamodb::Client;
use lambda_idempotency::batch::{BatchProcessor, BatchReport};
use lambda_idempotency::clock::{Clock, ManualClock};
use lambda_idempotency::key::IdempotencyKey;
use lambda_idempotency::key::PayloadValidation;
use lambda_idempotency::record::Record;
use lambda_idempotency::store::{DynamoDbStore, Store};
use lambda_idempotency::{CommitStrategy, Completion, Config, Error, IdempotencyLayer, Permanent};
use order_consumer::{ledger_credit, order_key, Order, KEY_PREFIX};
use support::dynamodb::{balance, counted_client, create_table, create_table_keyed, CallCounter};
use support::faulty_store::FaultyStore;
use support::{invocation, load_event};

const MODES: [CommitStrategy; 2] = [CommitStrategy::Lease, CommitStrategy::Optimistic];
/// The lease cap of the test containers: shorter than an invocation, so a handler can
/// outlive its lease without outliving its invocation.
const LEASE_CAP: Duration = Duration::from_secs(10);
const REMAINING: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Applied {
    account: String,
    amount: i64,
}

/// What the handler does besides building its ledger write.
type Hook = Arc<dyn Fn(&Order) -> Result<(), Permanent> + Send + Sync>;

struct Ledger {
    client: Client,
    counter: CallCounter,
    store: FaultyStore<DynamoDbStore>,
    ledger_table: String,
    clock: ManualClock,
    handler_runs: Arc<Mutex<usize>>,
}

impl Ledger {
    async fn new() -> Option<Self> {
        let counter = CallCounter::default();
        let client = counted_client(&counter).await?;
        let idempotency_table = create_table(&client).await;
        let ledger_table = create_table_keyed(&client, "ledger", "account").await;
        Some(Self {
            store: FaultyStore::new(DynamoDbStore::new(client.clone(), idempotency_table)),
            client,
            counter,
            ledger_table,
            clock: ManualClock::starting_now(),
            handler_runs: Arc::default(),
        })
    }

    /// How many times the handler ran, over every delivery.
    fn runs(&self) -> usize {
        *self.handler_runs.lock().unwrap()
    }

    /// The commits attempted (`commit` and `commit_fresh` calls, one a fault cut short
    /// included), over every delivery.
    fn commits(&self) -> usize {
        self.store
            .calls
            .commit
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The leases asked for (`acquire` calls), over every delivery.
    fn acquires(&self) -> usize {
        self.store
            .calls
            .acquire
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The idempotency record of the order `event_id`, as stored.
    async fn record(&self, event_id: &str) -> Option<Record> {
        let key = IdempotencyKey::derive(KEY_PREFIX, event_id.as_bytes());
        self.store.inner.get(&key).await.unwrap()
    }

    /// A fresh container: its own layer, no cache.
    fn container(
        &self,
        mode: CommitStrategy,
        hook: Hook,
    ) -> BatchProcessor<
        impl tower::Service<
                lambda_idempotency::batch::BatchRecord<SqsMessage>,
                Response = lambda_idempotency::Processed<Applied>,
                Error = Error,
            > + Clone
            + Send
            + Sync
            + 'static,
        ManualClock,
    > {
        let ledger_table = self.ledger_table.clone();
        let runs = self.handler_runs.clone();
        let layer = IdempotencyLayer::new(self.store.clone())
            .with_key(order_key())
            .with_clock(self.clock.clone())
            .with_config(
                Config::new()
                    .with_key_prefix(KEY_PREFIX)
                    .with_max_lease(LEASE_CAP)
                    .with_payload_validation(PayloadValidation::Body),
            );
        let handler =
            layer
                .clone()
                .with_writes()
                .with_commit(mode)
                .handler(move |message: SqsMessage| {
                    let ledger_table = ledger_table.clone();
                    let runs = runs.clone();
                    let hook = hook.clone();
                    async move {
                        *runs.lock().unwrap() += 1;
                        let order: Order =
                            serde_json::from_str(message.body.as_deref().unwrap_or(""))
                                .map_err(lambda_idempotency::BoxError::from)?;
                        hook(&order)?;
                        let credit = ledger_credit(ledger_table, &order);
                        Ok::<_, lambda_idempotency::BoxError>(
                            Completion::new(Applied {
                                account: order.account,
                                amount: order.amount,
                            })
                            .with_write(credit),
                        )
                    }
                });
        BatchProcessor::new(handler).with_clock(self.clock.clone())
    }

    async fn deliver(&self, mode: CommitStrategy, event: SqsEvent) -> BatchReport<Applied> {
        self.container(mode, Arc::new(|_| Ok(())))
            .process(invocation(event, self.clock.now(), REMAINING))
            .await
    }

    /// Delivers `event`, but the container dies (its future is dropped) if it has not
    /// answered within a second: nothing after that point runs, as under `kill -9`.
    async fn deliver_and_die(&self, mode: CommitStrategy, event: SqsEvent) {
        let processor = self.container(mode, Arc::new(|_| Ok(())));
        let run = processor.process(invocation(event, self.clock.now(), REMAINING));
        assert!(
            tokio::time::timeout(Duration::from_secs(1), run)
                .await
                .is_err(),
            "the container was meant to die"
        );
    }

    async fn balance(&self, account: &str) -> i64 {
        balance(&self.client, &self.ledger_table, account).await
    }
}

fn one_record(name: &str, index: usize) -> SqsEvent {
    let mut event = load_event(name);
    let record = event.records.remove(index);
    event.records = vec![record];
    event
}
