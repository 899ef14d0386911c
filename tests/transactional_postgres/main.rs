//! Handlers that write in a PostgreSQL transaction (`IdempotencyLayer::in_transaction`), in
//! both modes, against the PostgreSQL server `scripts/test.sh` starts: the ledger moves once
//! per record however the deliveries go.

mod failures;
mod heartbeat;
mod races;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_lambda_events::sqs::SqsMessage;
use lambda_idempotency::batch::{BatchProcessor, BatchReport};
use lambda_idempotency::key::IdempotencyKey;
use lambda_idempotency::record::{Record, Status};
use lambda_idempotency::store::postgres::PgTransaction;
use lambda_idempotency::store::{PostgresStore, Store};
use lambda_idempotency::{BoxError, CommitStrategy, Config, IdempotencyLayer, Outcome};
use lambda_idempotency_test_support as support;
use serde::Deserialize;
use support::{invocation, load_event, outcomes};

/// The order the sample events carry.
#[derive(Deserialize)]
pub(crate) struct Order {
    pub(crate) account: String,
    pub(crate) amount: i64,
}

/// Credits the order's amount to its account in `transaction`; answers the new balance.
pub(crate) async fn credit(
    transaction: &PgTransaction,
    ledger: &str,
    order: &Order,
) -> Result<i64, BoxError> {
    let client = transaction.client().await?;
    let row = client
        .query_one(
            &format!(
                "INSERT INTO {ledger} (account, balance) VALUES ($1, $2) \
                 ON CONFLICT (account) DO UPDATE SET balance = {ledger}.balance + EXCLUDED.balance \
                 RETURNING balance"
            ),
            &[&order.account, &order.amount],
        )
        .await?;
    Ok(row.get(0))
}

/// A store, its ledger, and a count of handler runs.
pub(crate) struct Rig {
    pub(crate) store: PostgresStore,
    pub(crate) ledger: String,
    pub(crate) runs: Arc<AtomicUsize>,
}

impl Rig {
    pub(crate) async fn new() -> Option<Self> {
        let store = support::postgres::fresh_store().await?;
        let ledger = support::postgres::fresh_ledger(&store).await;
        Some(Self {
            store,
            ledger,
            runs: Arc::new(AtomicUsize::new(0)),
        })
    }

    pub(crate) fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    pub(crate) async fn balances(&self) -> Vec<(String, i64)> {
        support::postgres::balances(&self.store, &self.ledger).await
    }

    pub(crate) async fn record(&self, message_id: &str) -> Option<Record> {
        let key = IdempotencyKey::derive("orders", message_id.as_bytes());
        self.store.get(&key).await.unwrap()
    }
}

/// What the handler does on its first run (later runs credit and answer).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum FirstRun {
    Credits,
    CreditsThenFails,
    CreditsThenFailsPermanently,
    CreditsThenLosesTheLease,
    AbortsItsTransaction,
    CreditsThenHangs,
    CreditsThenWaits,
}

impl Rig {
    /// A fresh process (layer and batch processor) with `config` whose handler counts its
    /// runs and credits the order.
    pub(crate) fn crediting(
        &self,
        config: Config,
        mode: CommitStrategy,
    ) -> BatchProcessor<
        impl tower::Service<
                lambda_idempotency::batch::BatchRecord<SqsMessage>,
                Response = lambda_idempotency::Processed<i64>,
                Error = lambda_idempotency::Error,
            > + Clone,
    > {
        let (runs, ledger) = (Arc::clone(&self.runs), self.ledger.clone());
        let handler = IdempotencyLayer::new(self.store.clone())
            .with_config(config)
            .in_transaction()
            .expect("a pool with room for transactions")
            .with_commit(mode)
            .handler(move |message: SqsMessage, transaction: PgTransaction| {
                runs.fetch_add(1, Ordering::SeqCst);
                let ledger = ledger.clone();
                async move {
                    let order: Order = serde_json::from_str(message.body.as_deref().unwrap_or(""))?;
                    credit(&transaction, &ledger, &order).await
                }
            });
        BatchProcessor::new(handler)
    }

    /// A fresh process (layer and batch processor) in `mode` whose handler credits the order,
    /// doing `first` on its first run. `ready` is notified when a handler has credited.
    pub(crate) fn process(
        &self,
        mode: CommitStrategy,
        first: FirstRun,
        ready: Arc<tokio::sync::Notify>,
    ) -> impl std::future::Future<Output = BatchReport<i64>> + 'static {
        self.process_with(mode, first, ready, Arc::new(tokio::sync::Notify::new()))
    }

    /// As [`process`](Self::process), the first run crediting and then waiting for `release`.
    pub(crate) fn process_holding(
        &self,
        mode: CommitStrategy,
        ready: Arc<tokio::sync::Notify>,
        release: Arc<tokio::sync::Notify>,
    ) -> impl std::future::Future<Output = BatchReport<i64>> + 'static {
        self.process_with(mode, FirstRun::CreditsThenWaits, ready, release)
    }

    fn process_with(
        &self,
        mode: CommitStrategy,
        first: FirstRun,
        ready: Arc<tokio::sync::Notify>,
        release: Arc<tokio::sync::Notify>,
    ) -> impl std::future::Future<Output = BatchReport<i64>> + 'static {
        let (runs, ledger, store) = (
            Arc::clone(&self.runs),
            self.ledger.clone(),
            self.store.clone(),
        );
        let handler = IdempotencyLayer::new(self.store.clone())
            .with_config(config())
            .in_transaction()
            .expect("a pool with room for transactions")
            .with_commit(mode)
            .handler(move |message: SqsMessage, transaction: PgTransaction| {
                let run = runs.fetch_add(1, Ordering::SeqCst);
                let (ledger, store, ready) = (ledger.clone(), store.clone(), Arc::clone(&ready));
                let release = Arc::clone(&release);
                async move {
                    let order: Order = serde_json::from_str(message.body.as_deref().unwrap_or(""))?;
                    let first = if run == 0 { first } else { FirstRun::Credits };
                    if first == FirstRun::AbortsItsTransaction {
                        let client = transaction.client().await?;
                        // An error the handler ignores still aborts the transaction.
                        let _ = client.batch_execute("SELECT 1 / 0").await;
                        return Ok::<i64, BoxError>(0);
                    }
                    let balance = match credit(&transaction, &ledger, &order).await {
                        Ok(balance) => balance,
                        Err(err) => return Err(err),
                    };
                    ready.notify_one();
                    match first {
                        FirstRun::CreditsThenFails => Err(BoxError::from("the handler failed")),
                        FirstRun::CreditsThenFailsPermanently => Err(BoxError::from(
                            lambda_idempotency::Permanent::new("a bad order"),
                        )),
                        FirstRun::CreditsThenLosesTheLease => {
                            let client = store.pool().get().await?;
                            client
                                .execute(
                                    &format!("UPDATE {} SET lease_owner = 'thief'", store.table()),
                                    &[],
                                )
                                .await?;
                            Ok(balance)
                        }
                        FirstRun::CreditsThenWaits => {
                            release.notified().await;
                            Ok(balance)
                        }
                        FirstRun::CreditsThenHangs => {
                            std::future::pending::<()>().await;
                            Ok(balance)
                        }
                        _ => Ok(balance),
                    }
                }
            });
        let processor = BatchProcessor::new(handler);
        async move { processor.process(deliver_first()).await }
    }
}

pub(crate) fn config() -> Config {
    Config::new().with_key_prefix("orders")
}

pub(crate) fn deliver(name: &str) -> lambda_runtime::LambdaEvent<aws_lambda_events::sqs::SqsEvent> {
    invocation(load_event(name), SystemTime::now(), Duration::from_secs(30))
}

/// The first record of the sample batch (acct-alice, 25), alone.
pub(crate) fn deliver_first() -> lambda_runtime::LambdaEvent<aws_lambda_events::sqs::SqsEvent> {
    let mut event = load_event("batch.json");
    event.records.truncate(1);
    invocation(event, SystemTime::now(), Duration::from_secs(30))
}

pub(crate) fn ids(name: &str) -> Vec<String> {
    load_event(name)
        .records
        .into_iter()
        .map(|r| r.message_id.unwrap())
        .collect()
}

/// The sample batch, delivered twice to fresh processes: each record's handler runs once, its
/// credit is committed with its record, and the second delivery replays the stored balance.
async fn batch_twice(mode: CommitStrategy) {
    let Some(rig) = Rig::new().await else {
        return;
    };
    let process = || rig.crediting(config(), mode);
    let first = process().process(deliver("batch.json")).await;
    assert_eq!(outcomes(&first), [Outcome::Executed; 3]);
    assert!(first.response.batch_item_failures.is_empty());
    assert_eq!(rig.runs(), 3);
    let second = process().process(deliver("batch.json")).await;
    assert_eq!(outcomes(&second), [Outcome::Replayed; 3]);
    assert_eq!(rig.runs(), 3, "no handler ran again");
    let values = |report: &lambda_idempotency::batch::BatchReport<i64>| {
        report.records.iter().map(|r| r.value).collect::<Vec<_>>()
    };
    assert_eq!(values(&second), values(&first));
    assert_eq!(
        rig.balances().await,
        [("acct-alice".to_string(), 20), ("acct-bob".to_string(), 40)]
    );
    for id in ids("batch.json") {
        let record = rig.record(&id).await.expect("the record");
        assert_eq!(record.status, Status::Completed);
        assert_eq!(record.lease_expiration_ms, None);
    }
}

#[tokio::test]
async fn lease_mode_commits_each_credit_once_with_its_record() {
    batch_twice(CommitStrategy::Lease).await;
}

#[tokio::test]
async fn optimistic_mode_commits_each_credit_once_with_its_record() {
    batch_twice(CommitStrategy::Optimistic).await;
}

/// A store whose pool leaves no connection for a handler's transaction besides the one kept
/// for lease calls (a max size of 1) is refused when the layer is built, saying what pool it
/// needs, and its transactions are refused at once (they could never begin); a pool of 2 is
/// accepted. Nothing is sent: there is no server at this address.
#[tokio::test]
async fn a_pool_without_room_for_a_transaction_is_refused_when_the_layer_is_built() {
    use lambda_idempotency::store::{StoreError, TransactionScope};
    let store = |max_size: usize| {
        let config: tokio_postgres::Config = "postgres://nobody@127.0.0.1:1/none".parse().unwrap();
        let manager = deadpool_postgres::Manager::new(config, tokio_postgres::NoTls);
        PostgresStore::new(
            deadpool_postgres::Pool::builder(manager)
                .max_size(max_size)
                .build()
                .unwrap(),
        )
    };
    let expected = "the PostgreSQL store is misconfigured (table idempotency_records): \
                    PoolTooSmall: a PostgreSQL pool of max size 1 leaves no connection for \
                    handlers' transactions besides the one kept for lease calls: build it with \
                    a max size of at least 2 (the transactions to run at once, plus one)";
    let small = store(1);
    for mode in [CommitStrategy::Lease, CommitStrategy::Optimistic] {
        let layer = IdempotencyLayer::new(small.clone())
            .with_config(config().with_heartbeat(Duration::from_secs(3), Duration::from_secs(1)))
            .in_transaction();
        match layer {
            Err(err @ StoreError::Misconfigured { .. }) => assert_eq!(err.to_string(), expected),
            Err(other) => panic!("{other:?}"),
            Ok(_) => panic!("a pool of 1 was accepted for {mode:?}"),
        }
    }
    match small.begin(Duration::from_secs(30)).await {
        Err(err @ StoreError::Misconfigured { .. }) => assert_eq!(err.to_string(), expected),
        other => panic!("{other:?}"),
    }
    assert!(IdempotencyLayer::new(store(2)).in_transaction().is_ok());
}

/// A handler that writes in the store's transaction never runs unprotected, under either
/// commit strategy, even with `MissingKey::ProcessUnprotected`. (Written in review of the
/// admission consolidation.)
#[tokio::test]
async fn a_missing_key_in_transaction_is_a_key_error() {
    use lambda_idempotency::key::JsonPointer;
    use lambda_idempotency::MissingKey;
    let Some(rig) = Rig::new().await else { return };
    for mode in [CommitStrategy::Lease, CommitStrategy::Optimistic] {
        let runs = Arc::clone(&rig.runs);
        let handler = IdempotencyLayer::new(rig.store.clone())
            .with_key(JsonPointer::new("/nope"))
            .with_config(Config::new().with_missing_key(MissingKey::ProcessUnprotected))
            .in_transaction()
            .expect("pool")
            .with_commit(mode)
            .handler(move |_m: SqsMessage, _t: PgTransaction| {
                runs.fetch_add(1, Ordering::SeqCst);
                async move { Ok::<_, BoxError>(1_i64) }
            });
        let mut event = load_event("batch.json");
        event.records.truncate(1);
        let report = BatchProcessor::new(handler)
            .process(invocation(
                event,
                SystemTime::now(),
                Duration::from_secs(60),
            ))
            .await;
        assert_eq!(outcomes(&report), [Outcome::Rejected], "{mode:?}");
        assert!(
            matches!(
                report.records[0].error,
                Some(lambda_idempotency::Error::Key(_))
            ),
            "{mode:?}"
        );
    }
    assert_eq!(rig.runs(), 0);
}
