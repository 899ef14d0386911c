//! Store faults: a fault-injecting proxy between the toolkit and DynamoDB Local answers with
//! throttling and 5xx errors, answers past the SDK's timeouts, drops connections before and
//! after forwarding, and DynamoDB Local itself is stopped and restarted. The toolkit must fail
//! closed (no handler runs without its lease), apply nothing twice, lose nothing, and recover
//! once the store answers again.
use lambda_idempotency_test_support as support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use lambda_idempotency::batch::{BatchProcessor, BatchReport};
use lambda_idempotency::key::IdempotencyKey;
use lambda_idempotency::store::DynamoDbStore;
use lambda_idempotency::{CommitStrategy, Completion, Config, IdempotencyLayer, Outcome};
use lambda_runtime::LambdaEvent;
use order_consumer::{ledger_credit, order_key, Order, Tables, KEY_PREFIX};
use support::dynamodb::{balance, client_for, create_table, create_table_keyed};
use support::harness::fault_proxy::{FaultProxy, FaultRates};
use support::{invocation, load_event, reported};

mod restart;

const MODES: [CommitStrategy; 2] = [CommitStrategy::Lease, CommitStrategy::Optimistic];

/// One delivery of `event`, invoked now with 4 s to run (short, so that a store that does not
/// answer is met within the test's time).
fn delivery(event: SqsEvent) -> LambdaEvent<SqsEvent> {
    invocation(event, SystemTime::now(), Duration::from_secs(4))
}

/// Thirty orders over five accounts, in the shape of `events/batch.json`.
fn orders(count: usize) -> (SqsEvent, BTreeMap<String, i64>) {
    let template = load_event("batch.json").records.remove(0);
    let mut event = SqsEvent::default();
    let mut expected = BTreeMap::new();
    for i in 0..count {
        let account = format!("acct-{}", i % 5);
        // Never 0: a record lost or applied twice shows in its account's balance.
        let amount = match (i as i64 * 7) % 31 - 9 {
            0 => 22,
            amount => amount,
        };
        *expected.entry(account.clone()).or_default() += amount;
        let mut record = template.clone();
        record.message_id = Some(format!("5f0a0000-0000-4000-8000-{i:012}"));
        record.body = Some(
            serde_json::json!({"eventId": format!("evt-f-{i}"), "account": account, "amount": amount})
                .to_string(),
        );
        event.records.push(record);
    }
    (event, expected)
}

/// Handler runs that found no lease of theirs in the table (must stay 0 in lease mode).
#[derive(Default)]
struct Witness {
    runs: AtomicU64,
    unleased: AtomicU64,
}

/// A container whose store goes through `endpoint`; `direct` reads the table past the proxy
/// to witness, in lease mode, that the handler runs only under an in-progress record.
fn container(
    store_client: Client,
    direct: Client,
    tables: &Tables,
    mode: CommitStrategy,
    witness: Arc<Witness>,
) -> BatchProcessor<
    impl tower::Service<
            lambda_idempotency::batch::BatchRecord<SqsMessage>,
            Response = lambda_idempotency::Processed<i64>,
            Error = lambda_idempotency::Error,
        > + Clone
        + Send
        + Sync
        + 'static,
> {
    let (ledger, idempotency) = (tables.ledger.clone(), tables.idempotency.clone());
    let layer = IdempotencyLayer::new(DynamoDbStore::new(store_client, &tables.idempotency))
        .with_key(order_key())
        .with_config(Config::new().with_key_prefix(KEY_PREFIX));
    BatchProcessor::new(layer.clone().with_writes().with_commit(mode).handler(
        move |message: SqsMessage| {
            let (ledger, idempotency, direct, witness) = (
                ledger.clone(),
                idempotency.clone(),
                direct.clone(),
                witness.clone(),
            );
            async move {
                let order: Order = serde_json::from_str(message.body.as_deref().unwrap_or(""))?;
                witness.runs.fetch_add(1, Ordering::SeqCst);
                if mode == CommitStrategy::Lease {
                    let key = IdempotencyKey::derive(KEY_PREFIX, order.event_id.as_bytes());
                    let item = direct
                        .get_item()
                        .table_name(idempotency)
                        .key("id", AttributeValue::S(key.as_str().into()))
                        .consistent_read(true)
                        .send()
                        .await?
                        .item;
                    let leased = item
                        .and_then(|i| i.get("status").and_then(|s| s.as_s().ok().cloned()))
                        .is_some_and(|s| s == "INPROGRESS");
                    if !leased {
                        witness.unleased.fetch_add(1, Ordering::SeqCst);
                    }
                }
                let credit = ledger_credit(ledger, &order);
                Ok::<_, lambda_idempotency::BoxError>(
                    Completion::new(order.amount).with_write(credit),
                )
            }
        },
    ))
}

/// Delivers `event` until every record is acknowledged (at least once, as SQS does),
/// turning the faults off after `fault_rounds`. Returns every record's outcome, delivery by
/// delivery, with its message id.
async fn deliver_until_done<S>(
    processor: &BatchProcessor<S>,
    event: SqsEvent,
    proxy: &FaultProxy,
    fault_rounds: usize,
) -> Vec<(String, Outcome)>
where
    S: tower::Service<
            lambda_idempotency::batch::BatchRecord<SqsMessage>,
            Response = lambda_idempotency::Processed<i64>,
            Error = lambda_idempotency::Error,
        > + Clone,
{
    let mut pending = event;
    let mut seen = Vec::new();
    for round in 0..200 {
        if round == fault_rounds {
            proxy.set_rates(FaultRates::default());
        }
        let report: BatchReport<i64> = processor.process(delivery(pending.clone())).await;
        for record in &report.records {
            seen.push((record.item_identifier.clone().unwrap(), record.outcome));
        }
        let retry = reported(&report);
        if retry.is_empty() {
            return seen;
        }
        pending
            .records
            .retain(|r| retry.contains(r.message_id.as_ref().unwrap()));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    panic!("records still failing after 200 deliveries: {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_store_faults_nothing_is_lost_applied_twice_or_run_unleased() {
    let Some(direct) = support::dynamodb::client().await else {
        return;
    };
    let endpoint = std::env::var("AWS_ENDPOINT_URL_DYNAMODB").unwrap();
    for (seed, mode) in MODES.into_iter().enumerate() {
        let tables = Tables {
            idempotency: create_table(&direct).await,
            ledger: create_table_keyed(&direct, "ledger", "account").await,
        };
        let proxy = FaultProxy::start(&endpoint, seed as u64 + 11).await;
        proxy.set_slow_by(Duration::from_millis(900));
        proxy.set_rates(FaultRates {
            throttle: 0.12,
            server_error: 0.12,
            slow: 0.08,
            drop_before: 0.08,
            drop_after: 0.08,
        });
        let store_client = client_for(&proxy.endpoint(), Duration::from_millis(400)).await;
        let witness = Arc::new(Witness::default());
        let processor = container(store_client, direct.clone(), &tables, mode, witness.clone());
        let (event, expected) = orders(30);
        let mut seen = BTreeMap::<Outcome, usize>::new();
        for (_, outcome) in deliver_until_done(&processor, event.clone(), &proxy, 6).await {
            *seen.entry(outcome).or_default() += 1;
        }

        for (account, amount) in &expected {
            assert_eq!(
                balance(&direct, &tables.ledger, account).await,
                *amount,
                "{mode:?}: {account} applied exactly once"
            );
        }
        assert_eq!(
            witness.unleased.load(Ordering::SeqCst),
            0,
            "{mode:?}: a handler ran unleased"
        );
        assert!(
            proxy.counts.injected() > 10,
            "{mode:?}: {}",
            proxy.counts.summary()
        );
        let failed: usize = seen
            .iter()
            .filter(|(o, _)| !o.is_acknowledged())
            .map(|(_, n)| n)
            .sum();
        // In lease mode the faults reach records (two calls each, and a lost complete keeps
        // the lease until its deadline); optimistic mode's single, retried commit may absorb
        // them all.
        if mode == CommitStrategy::Lease {
            assert!(
                failed > 0,
                "{mode:?}: the faults never reached a record: {seen:?}"
            );
        }
        // A redelivery after recovery replays everything and applies nothing.
        proxy.set_rates(FaultRates::default());
        let again = processor.process(delivery(event)).await;
        let again: Vec<_> = again
            .records
            .iter()
            .map(|r| (r.outcome, r.error.as_ref().map(ToString::to_string)))
            .collect();
        assert!(
            again.iter().all(|(o, _)| *o == Outcome::Replayed),
            "{mode:?}: {again:?}"
        );
        eprintln!(
            "store faults ({mode:?}): {}; outcomes {seen:?}; {} handler runs for 30 records; ledger exact",
            proxy.counts.summary(),
            witness.runs.load(Ordering::SeqCst)
        );
    }
}
