//! A store that is not set up for the function (a missing idempotency table, a missing table
//! of the handler's writes) fails the invocation as a whole, naming the table and the code,
//! against DynamoDB Local: no record is labelled `rejected` (a poison record), nothing is
//! applied or marked done, and once the table exists the same batch is applied once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_lambda_events::sqs::SqsMessage;
use lambda_idempotency::batch::{BatchError, BatchProcessor, BatchReport};
use lambda_idempotency::key::IdempotencyKey;
use lambda_idempotency::store::{DynamoDbStore, Store};
use lambda_idempotency::validation::PayloadValidation;
use lambda_idempotency::{Completion, Config, IdempotencyLayer, IdempotencyMode, Outcome};
use lambda_idempotency_test_support as support;
use order_consumer::{apply_order, order_key, Applied, KEY_PREFIX};
use support::dynamodb::{balance, create_table, create_table_keyed};

/// A table name that does not exist yet.
fn missing(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

/// The order-consumer's handler on `idempotency`, crediting `ledger`, counting its runs.
fn processor(
    client: &aws_sdk_dynamodb::Client,
    idempotency: &str,
    ledger: &str,
    mode: IdempotencyMode,
    runs: Arc<AtomicUsize>,
) -> BatchProcessor<
    impl tower::Service<
            lambda_runtime::LambdaEvent<SqsMessage>,
            Response = lambda_idempotency::Processed<Applied>,
            Error = lambda_idempotency::Error,
            Future = impl Send,
        > + Clone
        + Send
        + Sync
        + 'static,
> {
    let ledger = ledger.to_string();
    let store = DynamoDbStore::new(client.clone(), idempotency);
    let handler = IdempotencyLayer::new(store)
        .with_key(order_key())
        .with_config(
            Config::new()
                .with_key_prefix(KEY_PREFIX)
                .with_mode(mode)
                .with_payload_validation(PayloadValidation::Body),
        )
        .with_writes()
        .handler(move |message: SqsMessage| {
            runs.fetch_add(1, Ordering::SeqCst);
            let ledger = ledger.clone();
            async move {
                let completion: Completion<Applied> = apply_order(ledger, message).await?;
                Ok::<_, order_consumer::OrderError>(completion)
            }
        });
    BatchProcessor::new(handler)
}

/// The batch of `events/batch.json`: alice +25 and -5, bob +40.
async fn deliver<S>(processor: &BatchProcessor<S>) -> BatchReport<Applied>
where
    S: tower::Service<
            lambda_runtime::LambdaEvent<SqsMessage>,
            Response = lambda_idempotency::Processed<Applied>,
            Error = lambda_idempotency::Error,
        > + Clone,
{
    let event = support::load_event("batch.json");
    let invocation = support::invocation(event, SystemTime::now(), Duration::from_secs(30));
    processor.process(invocation).await
}

/// The misconfiguration the invocation failed with.
fn failed_for(report: BatchReport<Applied>) -> lambda_idempotency::store::Misconfiguration {
    let outcomes = support::outcomes(&report);
    assert!(
        !outcomes.contains(&Outcome::Rejected),
        "no record is labelled a poison record: {outcomes:?}"
    );
    assert_eq!(outcomes, [Outcome::Misconfigured; 3]);
    assert_eq!(
        support::error_types(&report),
        [Some("Idempotency.Misconfigured"); 3]
    );
    match report.into_response() {
        Err(BatchError::Misconfigured(fault)) => {
            assert_eq!(
                BatchError::Misconfigured(fault.clone()).error_type(),
                "Idempotency.Misconfigured"
            );
            fault
        }
        other => panic!("the invocation must fail as misconfigured, not {other:?}"),
    }
}

/// The stored records of the batch's three keys (none when nothing was marked).
async fn stored(client: &aws_sdk_dynamodb::Client, table: &str) -> usize {
    let store = DynamoDbStore::new(client.clone(), table);
    let mut found = 0;
    for material in ["evt-1001", "evt-1002", "evt-1003"] {
        let key = IdempotencyKey::derive(KEY_PREFIX, material.as_bytes());
        if store.get(&key).await.unwrap().is_some() {
            found += 1;
        }
    }
    found
}

async fn applied_once(
    client: &aws_sdk_dynamodb::Client,
    idempotency: &str,
    ledger: &str,
    mode: IdempotencyMode,
    runs: &Arc<AtomicUsize>,
    runs_before: usize,
) {
    let processor = processor(client, idempotency, ledger, mode, runs.clone());
    let report = deliver(&processor).await;
    assert_eq!(
        support::outcomes(&report),
        [Outcome::Executed; 3],
        "{mode:?}"
    );
    assert!(report
        .into_response()
        .unwrap()
        .batch_item_failures
        .is_empty());
    assert_eq!(runs.load(Ordering::SeqCst), runs_before + 3, "{mode:?}");
    let again = deliver(&processor).await;
    assert_eq!(
        support::outcomes(&again),
        [Outcome::Replayed; 3],
        "{mode:?}"
    );
    assert_eq!(balance(client, ledger, "acct-alice").await, 20, "{mode:?}");
    assert_eq!(balance(client, ledger, "acct-bob").await, 40, "{mode:?}");
    assert_eq!(stored(client, idempotency).await, 3);
}

#[tokio::test]
async fn a_missing_idempotency_table_fails_the_invocation_naming_it() {
    let Some(client) = support::dynamodb::client().await else {
        return;
    };
    for mode in [IdempotencyMode::Optimistic, IdempotencyMode::Lease] {
        let idempotency = missing("idempotency");
        let ledger = create_table_keyed(&client, "ledger", "account").await;
        let runs = Arc::new(AtomicUsize::new(0));
        let processor = processor(&client, &idempotency, &ledger, mode, runs.clone());
        for _ in 0..2 {
            let fault = failed_for(deliver(&processor).await);
            assert_eq!(fault.store, "DynamoDB");
            assert_eq!(fault.table, idempotency, "{mode:?}");
            assert_eq!(fault.code, "ResourceNotFoundException");
            assert!(fault.to_string().contains(&idempotency), "{fault}");
        }
        // Lease mode: the lease is never taken, so the handler never runs; optimistic mode
        // runs it before its commit, which is refused whole.
        let runs_before = runs.load(Ordering::SeqCst);
        match mode {
            IdempotencyMode::Lease => assert_eq!(runs_before, 0),
            _ => assert!(runs_before <= 6, "{runs_before}"),
        }
        assert_eq!(balance(&client, &ledger, "acct-alice").await, 0);
        assert_eq!(balance(&client, &ledger, "acct-bob").await, 0);

        lambda_idempotency::testing::dynamodb::create_table_named(
            &client,
            &idempotency,
            "id",
            None,
        )
        .await;
        applied_once(&client, &idempotency, &ledger, mode, &runs, runs_before).await;
    }
}

#[tokio::test]
async fn a_missing_ledger_table_fails_the_invocation_naming_it() {
    let Some(client) = support::dynamodb::client().await else {
        return;
    };
    for mode in [IdempotencyMode::Optimistic, IdempotencyMode::Lease] {
        let idempotency = create_table(&client).await;
        let ledger = missing("ledger");
        let runs = Arc::new(AtomicUsize::new(0));
        let processor = processor(&client, &idempotency, &ledger, mode, runs.clone());
        for delivery in 1..=2 {
            let fault = failed_for(deliver(&processor).await);
            assert_eq!(
                fault.table, ledger,
                "{mode:?}: the ledger, not the records' table"
            );
            assert_eq!(fault.code, "ResourceNotFoundException");
            // Nothing was marked done: no record, no lease left (lease mode releases it).
            assert_eq!(
                stored(&client, &idempotency).await,
                0,
                "{mode:?} {delivery}"
            );
        }
        let runs_before = runs.load(Ordering::SeqCst);
        assert!(runs_before >= 1, "{mode:?}");

        lambda_idempotency::testing::dynamodb::create_table_named(
            &client, &ledger, "account", None,
        )
        .await;
        applied_once(&client, &idempotency, &ledger, mode, &runs, runs_before).await;
    }
}
