//! Store faults: a fault-injecting proxy between the toolkit and DynamoDB Local answers with
//! throttling and 5xx errors, answers past the SDK's timeouts, drops connections before and
//! after forwarding, and DynamoDB Local itself is stopped and restarted. The toolkit must fail
//! closed (no handler runs without its lease), apply nothing twice, lose nothing, and recover
//! once the store answers again.
use lambda_idempotency_test_support as support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use lambda_idempotency::batch::{BatchProcessor, BatchReport};
use lambda_idempotency::key::IdempotencyKey;
use lambda_idempotency::store::DynamoDbStore;
use lambda_idempotency::{Completion, Config, IdempotencyLayer, IdempotencyMode, Outcome};
use order_consumer::{ledger_credit, order_key, Order, Tables, KEY_PREFIX};
use support::dynamodb::{balance, client_for, create_table, create_table_keyed};
use support::harness::fault_proxy::{FaultProxy, FaultRates, Scripted};
use support::{invocation, load_event};

const MODES: [IdempotencyMode; 2] = [IdempotencyMode::Lease, IdempotencyMode::Optimistic];

/// Thirty orders over five accounts, in the shape of `events/batch.json`.
fn orders(count: usize) -> (SqsEvent, BTreeMap<String, i64>) {
    let template = load_event("batch.json").records.remove(0);
    let mut event = SqsEvent::default();
    let mut expected = BTreeMap::new();
    for i in 0..count {
        let account = format!("acct-{}", i % 5);
        let amount = (i as i64 * 7) % 31 - 9;
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
    mode: IdempotencyMode,
    witness: Arc<Witness>,
) -> BatchProcessor<
    impl tower::Service<
            lambda_runtime::LambdaEvent<SqsMessage>,
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
        .with_config(Config::new().with_key_prefix(KEY_PREFIX).with_mode(mode));
    BatchProcessor::new(
        layer
            .clone()
            .with_writes()
            .handler(move |message: SqsMessage| {
                let (ledger, idempotency, direct, witness) = (
                    ledger.clone(),
                    idempotency.clone(),
                    direct.clone(),
                    witness.clone(),
                );
                async move {
                    let order: Order = serde_json::from_str(message.body.as_deref().unwrap_or(""))?;
                    witness.runs.fetch_add(1, Ordering::SeqCst);
                    if mode == IdempotencyMode::Lease {
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
            }),
    )
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
            lambda_runtime::LambdaEvent<SqsMessage>,
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
        let report: BatchReport<i64> = processor
            .process(invocation(
                pending.clone(),
                SystemTime::now(),
                Duration::from_secs(4),
            ))
            .await;
        for record in &report.records {
            seen.push((record.item_identifier.clone().unwrap(), record.outcome));
        }
        let retry: Vec<String> = report
            .response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.clone())
            .collect();
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
        if mode == IdempotencyMode::Lease {
            assert!(
                failed > 0,
                "{mode:?}: the faults never reached a record: {seen:?}"
            );
        }
        // A redelivery after recovery replays everything and applies nothing.
        proxy.set_rates(FaultRates::default());
        let again = processor
            .process(invocation(event, SystemTime::now(), Duration::from_secs(4)))
            .await;
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

/// A DynamoDB Local of the test's own, on disk, so that it can be stopped and restarted.
struct OwnDynamoDbLocal {
    child: tokio::process::Child,
    endpoint: String,
}

impl OwnDynamoDbLocal {
    async fn start(db_path: &std::path::Path) -> Option<Self> {
        let (Ok(classpath), Ok(library)) = (
            std::env::var("LAMBDA_IDEMPOTENCY_DDB_CLASSPATH"),
            std::env::var("LAMBDA_IDEMPOTENCY_DDB_LIBRARY_PATH"),
        ) else {
            assert!(
                std::env::var("LAMBDA_IDEMPOTENCY_REQUIRE_DYNAMODB").is_err(),
                "scripts/dynamodb-local.sh sets LAMBDA_IDEMPOTENCY_DDB_CLASSPATH"
            );
            eprintln!("SKIPPED: no DynamoDB Local installation given");
            return None;
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = tokio::process::Command::new("java")
            .arg(format!("-Djava.library.path={library}"))
            .args([
                "-cp",
                &classpath,
                "DynamoDbLocalLauncher",
                "-sharedDb",
                "-disableTelemetry",
            ])
            .arg("-dbPath")
            .arg(db_path)
            .args(["-port", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start DynamoDB Local");
        let endpoint = format!("http://127.0.0.1:{port}");
        let started = Instant::now();
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "DynamoDB Local did not start"
            );
            assert!(
                matches!(child.try_wait(), Ok(None)),
                "DynamoDB Local exited while starting (port {port} taken?)"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Some(Self { child, endpoint })
    }

    /// Stops it the way an operator would (SIGTERM), and waits.
    async fn stop(mut self) {
        // The port was free when picked, not necessarily when Java bound it: had this
        // DynamoDB Local failed to bind, what answered the test was another listener.
        assert!(
            matches!(self.child.try_wait(), Ok(None)),
            "DynamoDB Local at {} had exited before it was stopped",
            self.endpoint
        );
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
        let _ = self.child.kill().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb_local_stopped_and_restarted_mid_run() {
    if support::dynamodb::client().await.is_none() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("ddb-restart-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let Some(first) = OwnDynamoDbLocal::start(&dir).await else {
        return;
    };
    let proxy = FaultProxy::start(&first.endpoint, 3).await;
    let direct = client_for(&first.endpoint, Duration::from_secs(2)).await;
    let tables = Tables {
        idempotency: create_table(&direct).await,
        ledger: create_table_keyed(&direct, "ledger", "account").await,
    };
    let store_client = client_for(&proxy.endpoint(), Duration::from_millis(400)).await;
    let witness = Arc::new(Witness::default());
    let (event, expected) = orders(20);
    let (first_half, second_half) = {
        let mut a = event.clone();
        let b_records = a.records.split_off(10);
        let mut b = SqsEvent::default();
        b.records = b_records;
        (a, b)
    };
    let processor = container(
        store_client,
        direct.clone(),
        &tables,
        IdempotencyMode::Optimistic,
        witness.clone(),
    );
    let report = processor
        .process(invocation(
            first_half.clone(),
            SystemTime::now(),
            Duration::from_secs(4),
        ))
        .await;
    assert!(report
        .records
        .iter()
        .all(|r| r.outcome == Outcome::Executed));

    // The store goes away: every record fails closed and is reported; nothing is applied.
    first.stop().await;
    let runs = witness.runs.load(Ordering::SeqCst);
    let report = processor
        .process(invocation(
            second_half.clone(),
            SystemTime::now(),
            Duration::from_secs(4),
        ))
        .await;
    // Each record fails closed: the store's error, or (when the commit's retries outlast the
    // invocation) stopped at the deadline; either way reported, nothing committed.
    assert!(
        report
            .records
            .iter()
            .all(|r| matches!(r.outcome, Outcome::StoreUnavailable | Outcome::DeadlineNear)),
        "{:?}",
        report.records.iter().map(|r| r.outcome).collect::<Vec<_>>()
    );
    assert_eq!(report.response.batch_item_failures.len(), 10);
    // Optimistic mode runs the handler first; with the store down its commit cannot land.
    assert_eq!(
        witness.runs.load(Ordering::SeqCst) - runs,
        10,
        "each record's handler ran once, and nothing was committed"
    );

    // It comes back (same data, new port): the redelivered batches complete exactly once.
    let second = OwnDynamoDbLocal::start(&dir).await.unwrap();
    proxy.set_upstream(Some(&second.endpoint));
    let direct = client_for(&second.endpoint, Duration::from_secs(2)).await;
    let started = Instant::now();
    while direct.list_tables().send().await.is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "DynamoDB Local did not come back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A restarted instance is slow at first: the first commits it applies may have their
    // answers lost (the client gives up), as under load. Scripted, so that every run meets it.
    for _ in 0..4 {
        proxy.script("TransactWriteItems", Scripted::LoseAnswer);
    }
    // SQS redelivers everything not acknowledged, until it is.
    let first_ids: Vec<String> = first_half
        .records
        .iter()
        .map(|r| r.message_id.clone().unwrap())
        .collect();
    let outage: Vec<Outcome> = report.records.iter().map(|r| r.outcome).collect();
    let delivered = deliver_until_done(&processor, event, &proxy, 0).await;
    // Every delivery's outcome, shown by the assertions below when one fails.
    let deliveries = format!("during the outage: {outage:?}; after the restart: {delivered:?}");
    let mut history: BTreeMap<String, Vec<Outcome>> = BTreeMap::new();
    for (id, outcome) in delivered {
        history.entry(id).or_default().push(outcome);
    }
    let executed = |id: &str| {
        history[id]
            .iter()
            .filter(|o| **o == Outcome::Executed)
            .count()
    };
    // The first half completed before the outage: replayed, never executed again.
    for id in &first_ids {
        assert_eq!(
            executed(id),
            0,
            "{id} ran again after the restart; {deliveries}"
        );
    }
    // The second half's effects apply exactly once (the ledger, below), each record either
    // executed once, or applied by a delivery whose answer was lost (reported, so
    // redelivered) and then replayed: never acknowledged as a duplicate unless a commit of
    // its own landed.
    for record in &second_half.records {
        let id = record.message_id.as_deref().unwrap();
        let outcomes = &history[id];
        let last = outcomes.last().copied();
        let lost_before = outcomes
            .iter()
            .any(|o| matches!(o, Outcome::StoreUnavailable | Outcome::DeadlineNear));
        match executed(id) {
            1 => assert_eq!(last, Some(Outcome::Executed), "{id}: {deliveries}"),
            0 => assert!(
                last == Some(Outcome::Replayed) && lost_before,
                "{id} acknowledged without running or a lost answer; {deliveries}"
            ),
            n => panic!("{id} executed {n} times; {deliveries}"),
        }
    }
    assert!(proxy.unused_script().is_empty(), "{deliveries}");
    for (account, amount) in &expected {
        assert_eq!(
            balance(&direct, &tables.ledger, account).await,
            *amount,
            "{account}"
        );
    }
    second.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
