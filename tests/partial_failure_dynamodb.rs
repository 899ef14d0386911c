//! Per-delivery behaviour under partial failure on DynamoDB Local: a fault proxy loses the
//! answer of one chosen request (the SDK sends it again, or gives up), fails it once, or
//! answers a transaction conflict; handlers return invalid writes, results over the item
//! limit, and fail on redelivered duplicates. Every test checks how many times the handler
//! ran, each record's outcome, what was reported and the stored record.
use lambda_idempotency_test_support as support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use aws_sdk_dynamodb::Client;
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::key::IdempotencyKey;
use lambda_idempotency::record::Status;
use lambda_idempotency::store::{Attr, DynamoDbStore, Store, StoreError, Write};
use lambda_idempotency::{
    CommitStrategy, Completion, Config, Error, IdempotencyLayer, Outcome, Permanent,
};
use support::dynamodb::{
    balance, client, client_for_attempts, counted_client, create_table, create_table_keyed,
    CallCounter,
};
use support::harness::fault_proxy::{FaultProxy, Scripted};
use support::{invocation, outcomes, reported};

const REMAINING: Duration = Duration::from_secs(30);
const MODES: [CommitStrategy; 2] = [CommitStrategy::Lease, CommitStrategy::Optimistic];

fn one(id: &str) -> SqsEvent {
    let mut m = SqsMessage::default();
    m.message_id = Some(id.into());
    m.body = Some(r#"{"account":"acct-1","amount":5}"#.into());
    let mut event = SqsEvent::default();
    event.records.push(m);
    event
}

fn config() -> Config {
    Config::new().with_key_prefix("t")
}

async fn stored(store: &DynamoDbStore, id: &str) -> Option<lambda_idempotency::record::Record> {
    store
        .get(&IdempotencyKey::derive("t", id.as_bytes()))
        .await
        .unwrap()
}

/// A store whose requests go through a fault proxy (the SDK sends each request up to
/// `attempts` times), and a store on the same table reached directly.
struct Proxied {
    proxy: FaultProxy,
    store: DynamoDbStore,
    direct: DynamoDbStore,
    client: Client,
}

async fn proxied(attempts: u32) -> Option<Proxied> {
    let direct_client = client().await?;
    let table = create_table(&direct_client).await;
    let endpoint = std::env::var("AWS_ENDPOINT_URL_DYNAMODB").unwrap();
    let proxy = FaultProxy::start(&endpoint, 11).await;
    let client = client_for_attempts(&proxy.endpoint(), Duration::from_secs(2), attempts).await;
    Some(Proxied {
        store: DynamoDbStore::new(client.clone(), &table),
        direct: DynamoDbStore::new(direct_client.clone(), &table),
        proxy,
        client: direct_client,
    })
}

/// Delivers `id` once to a plain handler over `store` that counts its runs.
async fn deliver_plain(store: &DynamoDbStore, runs: &Arc<AtomicUsize>, id: &str) -> Vec<Outcome> {
    let layer = IdempotencyLayer::new(store.clone()).with_config(config());
    let counter = runs.clone();
    let processor = BatchProcessor::new(layer.handler(move |_m: SqsMessage| {
        let runs = counter.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::io::Error>(7u32)
        }
    }));
    let report = processor
        .process(invocation(one(id), SystemTime::now(), REMAINING))
        .await;
    outcomes(&report)
}

#[tokio::test]
async fn a_lost_acquire_answer_resent_by_the_sdk_is_our_lease() {
    let Some(rig) = proxied(3).await else { return };
    rig.proxy.script("PutItem", Scripted::LoseAnswer);
    let runs = Arc::new(AtomicUsize::new(0));
    assert_eq!(
        deliver_plain(&rig.store, &runs, "m-1").await,
        [Outcome::Executed]
    );
    assert!(rig.proxy.unused_script().is_empty());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let record = stored(&rig.direct, "m-1").await.expect("record");
    assert_eq!(record.status, Status::Completed);
    assert_eq!(
        deliver_plain(&rig.store, &runs, "m-1").await,
        [Outcome::Replayed]
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_lost_completion_answer_resent_by_the_sdk_is_recognised() {
    let Some(rig) = proxied(3).await else { return };
    rig.proxy.script("UpdateItem", Scripted::LoseAnswer);
    let runs = Arc::new(AtomicUsize::new(0));
    assert_eq!(
        deliver_plain(&rig.store, &runs, "m-1").await,
        [Outcome::Executed]
    );
    assert!(rig.proxy.unused_script().is_empty());
    let record = stored(&rig.direct, "m-1").await.expect("record");
    assert_eq!(record.status, Status::Completed);
    assert_eq!(record.data.as_deref(), Some("7"));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_completion_failing_once_is_retried_by_the_toolkit() {
    // The SDK does not retry here: the toolkit's own retry must.
    let Some(rig) = proxied(1).await else { return };
    rig.proxy.script("UpdateItem", Scripted::ServerError);
    let runs = Arc::new(AtomicUsize::new(0));
    assert_eq!(
        deliver_plain(&rig.store, &runs, "m-1").await,
        [Outcome::Executed]
    );
    assert!(rig.proxy.unused_script().is_empty());
    assert_eq!(
        stored(&rig.direct, "m-1").await.unwrap().status,
        Status::Completed
    );
    assert_eq!(
        deliver_plain(&rig.store, &runs, "m-1").await,
        [Outcome::Replayed]
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_acquire_applied_but_unanswered_is_released_for_the_next_delivery() {
    let Some(rig) = proxied(1).await else { return };
    rig.proxy.script("PutItem", Scripted::LoseAnswer);
    let runs = Arc::new(AtomicUsize::new(0));
    assert_eq!(
        deliver_plain(&rig.store, &runs, "m-1").await,
        [Outcome::StoreUnavailable]
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert!(
        stored(&rig.direct, "m-1").await.is_none(),
        "the applied acquire was released"
    );
    assert_eq!(
        deliver_plain(&rig.store, &runs, "m-1").await,
        [Outcome::Executed],
        "not locked until the deadline"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// What a transactional test handler returns.
type CreditFuture = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<Completion<u32>, std::io::Error>> + Send>,
>;

/// A transactional handler crediting `acct-1` with 5 in `ledger`, counting its runs.
fn credit(
    ledger: String,
    runs: Arc<AtomicUsize>,
) -> impl Fn(SqsMessage) -> CreditFuture + Clone + Send + Sync + 'static {
    move |_m: SqsMessage| {
        let (ledger, runs) = (ledger.clone(), runs.clone());
        Box::pin(async move {
            runs.fetch_add(1, Ordering::SeqCst);
            let write = Write::update(ledger, [("account", Attr::s("acct-1"))], "ADD #b :a")
                .name("#b", "balance")
                .value(":a", Attr::n(5));
            Ok(Completion::new(5).with_write(write))
        })
    }
}

#[tokio::test]
async fn a_transaction_conflict_at_the_top_level_is_retried_then_reported_as_a_conflict() {
    for mode in MODES {
        let Some(rig) = proxied(1).await else { return };
        let ledger = create_table_keyed(&rig.client, "ledger", "account").await;
        let runs = Arc::new(AtomicUsize::new(0));
        let layer = IdempotencyLayer::new(rig.store.clone()).with_config(config());
        let processor = BatchProcessor::new(
            layer
                .clone()
                .with_writes()
                .with_commit(mode)
                .handler(credit(ledger.clone(), runs.clone())),
        );
        let conflict = || Scripted::Error("TransactionConflictException");
        // One conflict: sent again, applied once.
        rig.proxy.script("TransactWriteItems", conflict());
        let report = processor
            .process(invocation(one("m-1"), SystemTime::now(), REMAINING))
            .await;
        assert_eq!(outcomes(&report), [Outcome::Executed], "{mode:?}");
        assert_eq!(runs.load(Ordering::SeqCst), 1, "{mode:?}");
        assert_eq!(balance(&rig.client, &ledger, "acct-1").await, 5, "{mode:?}");
        // Conflicts on every attempt: a conflict (retried later), not an outage, and the
        // key is free for the next delivery.
        for _ in 0..3 {
            rig.proxy.script("TransactWriteItems", conflict());
        }
        let report = processor
            .process(invocation(one("m-2"), SystemTime::now(), REMAINING))
            .await;
        assert_eq!(outcomes(&report), [Outcome::Locked], "{mode:?}");
        assert!(
            matches!(report.records[0].error, Some(Error::Conflict { .. })),
            "{mode:?}: {:?}",
            report.records[0].error
        );
        assert!(rig.proxy.unused_script().is_empty());
        assert!(stored(&rig.direct, "m-2").await.is_none(), "{mode:?}");
        let report = processor
            .process(invocation(one("m-2"), SystemTime::now(), REMAINING))
            .await;
        assert_eq!(outcomes(&report), [Outcome::Executed], "{mode:?}");
        assert_eq!(runs.load(Ordering::SeqCst), 3, "{mode:?}");
        assert_eq!(
            balance(&rig.client, &ledger, "acct-1").await,
            10,
            "{mode:?}"
        );
    }
}

/// Writes DynamoDB refuses as invalid: a malformed expression, or two on one item.
fn invalid_writes(kind: &str, ledger: &str) -> Vec<Write> {
    let key = || [("account", Attr::s("a"))];
    match kind {
        "bad expression" => vec![Write::update(ledger, key(), "ADD #b").name("#b", "balance")],
        _ => vec![Write::put(ledger, key()), Write::delete(ledger, key())],
    }
}

#[tokio::test]
async fn invalid_handler_writes_are_rejected_once_and_free_the_key() {
    for mode in MODES {
        for kind in ["bad expression", "two operations on one item"] {
            let counter = CallCounter::default();
            let Some(client) = counted_client(&counter).await else {
                return;
            };
            let table = create_table(&client).await;
            let ledger = create_table_keyed(&client, "ledger", "account").await;
            let store = DynamoDbStore::new(client.clone(), &table);
            let writes = invalid_writes(kind, &ledger);
            let layer = IdempotencyLayer::new(store.clone()).with_config(config());
            let processor =
                BatchProcessor::new(layer.clone().with_writes().with_commit(mode).handler(
                    move |_m: SqsMessage| {
                        let writes = writes.clone();
                        async move {
                            let completion = Completion::new(());
                            Ok::<_, std::io::Error>(
                                writes.into_iter().fold(completion, Completion::with_write),
                            )
                        }
                    },
                ));
            counter.reset();
            let report = processor
                .process(invocation(one("m-1"), SystemTime::now(), REMAINING))
                .await;
            assert_eq!(outcomes(&report), [Outcome::Rejected], "{mode:?} {kind}");
            assert_eq!(reported(&report), ["m-1"], "{mode:?} {kind}");
            let error = report.records[0].error.as_ref().unwrap();
            assert!(
                matches!(error, Error::Store(StoreError::InvalidRequest { .. })),
                "{mode:?} {kind}: {error:?}"
            );
            assert_eq!(
                counter.count("TransactWriteItems"),
                1,
                "{mode:?} {kind}: not retried blindly"
            );
            assert!(
                stored(&store, "m-1").await.is_none(),
                "{mode:?} {kind}: the lease was released"
            );
        }
    }
}

#[tokio::test]
async fn optimistic_duplicates_whose_handler_now_fails_are_replayed() {
    for failure in ["error", "panic", "other result type"] {
        let Some(client) = client().await else { return };
        let store = DynamoDbStore::new(client.clone(), create_table(&client).await);
        let ledger = create_table_keyed(&client, "ledger", "account").await;
        let runs = Arc::new(AtomicUsize::new(0));
        let layer = IdempotencyLayer::new(store.clone()).with_config(config());
        let first = BatchProcessor::new(
            layer
                .clone()
                .with_writes()
                .with_commit(CommitStrategy::Optimistic)
                .handler(credit(ledger.clone(), runs.clone())),
        )
        .process(invocation(one("m-1"), SystemTime::now(), REMAINING))
        .await;
        assert_eq!(outcomes(&first), [Outcome::Executed]);
        let broken = Arc::new(AtomicBool::new(true));
        let report = match failure {
            "other result type" => {
                BatchProcessor::new(layer.clone().with_writes().handler(|_m: SqsMessage| async {
                    Ok::<_, std::io::Error>(Completion::new(String::from("a string now")))
                }))
                .process(invocation(one("m-1"), SystemTime::now(), REMAINING))
                .await
                .records
                .into_iter()
                .map(|r| r.outcome)
                .collect::<Vec<_>>()
            }
            kind => {
                let (broken, runs) = (broken.clone(), runs.clone());
                let panics = kind == "panic";
                let report = BatchProcessor::new(layer.clone().with_writes().handler(
                    move |_m: SqsMessage| {
                        let (broken, runs) = (broken.clone(), runs.clone());
                        async move {
                            runs.fetch_add(1, Ordering::SeqCst);
                            if broken.load(Ordering::SeqCst) {
                                if panics {
                                    panic!("the duplicate's handler panicked");
                                }
                                return Err(std::io::Error::other("downstream is down"));
                            }
                            Ok(Completion::new(5u32))
                        }
                    },
                ))
                .process(invocation(one("m-1"), SystemTime::now(), REMAINING))
                .await;
                assert!(reported(&report).is_empty(), "{failure}");
                outcomes(&report)
            }
        };
        assert_eq!(report, [Outcome::Replayed], "{failure}");
        assert_eq!(balance(&client, &ledger, "acct-1").await, 5, "{failure}");
    }
}

#[tokio::test]
async fn results_over_the_item_limit_and_huge_permanent_failures_run_once() {
    let Some(client) = client().await else { return };
    let store = DynamoDbStore::new(client.clone(), create_table(&client).await);
    let mut rng_state: u64 = 7;
    let incompressible: String = (0..700_000)
        .map(|_| {
            rng_state ^= rng_state << 13;
            rng_state ^= rng_state >> 7;
            rng_state ^= rng_state << 17;
            char::from(b'a' + (rng_state % 26) as u8)
        })
        .collect();
    for (id, result) in [
        ("big-compressible", "ab".repeat(300_000)),
        ("big-random", incompressible),
    ] {
        let runs = Arc::new(AtomicUsize::new(0));
        let layer = IdempotencyLayer::new(store.clone()).with_config(config());
        let (counter, value) = (runs.clone(), result.clone());
        let processor = BatchProcessor::new(layer.handler(move |_m: SqsMessage| {
            let (runs, value) = (counter.clone(), value.clone());
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, std::io::Error>(value)
            }
        }));
        for expected in [Outcome::Executed, Outcome::Replayed] {
            let report = processor
                .process(invocation(one(id), SystemTime::now(), REMAINING))
                .await;
            assert_eq!(outcomes(&report), [expected], "{id}");
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1, "{id}");
        assert_eq!(stored(&store, id).await.unwrap().status, Status::Completed);
    }
    let runs = Arc::new(AtomicUsize::new(0));
    let layer = IdempotencyLayer::new(store.clone())
        .with_config(config().with_stored_failure_messages(true));
    let counter = runs.clone();
    let processor = BatchProcessor::new(layer.handler(move |_m: SqsMessage| {
        let runs = counter.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>(Permanent::new("é".repeat(300 * 1024)))
        }
    }));
    for _ in 0..2 {
        let report = processor
            .process(invocation(
                one("huge-failure"),
                SystemTime::now(),
                REMAINING,
            ))
            .await;
        assert_eq!(outcomes(&report), [Outcome::FailedPermanently]);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(
        stored(&store, "huge-failure").await.unwrap().status,
        Status::Failed
    );
}
