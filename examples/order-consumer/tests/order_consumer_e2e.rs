//! End to end: the compiled order-consumer binary, driven through a Lambda Runtime API
//! emulator, against DynamoDB Local, in both modes. Checks each response and the ledger,
//! and that a hung store cannot eat an invocation.
mod container;

use std::time::{Duration, Instant};

use container::{spawn, spawn_concurrent, spawn_with_endpoint};
use lambda_idempotency_test_support as support;
use order_consumer::Tables;
use serde_json::{json, Value};
use support::dynamodb::{balance, create_table, create_table_keyed};
use support::harness::fault_proxy::{FaultProxy, FaultRates};
use support::harness::runtime_api::{batch_failures as failures, Reply, RuntimeApi};

fn event(name: &str) -> Value {
    support::load_event_json(name)
}

fn ids(event: &Value, indexes: &[usize]) -> Vec<String> {
    indexes
        .iter()
        .map(|&i| {
            event["Records"][i]["messageId"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_consumer_holds_its_contract_in_both_modes() {
    let Some(client) = support::dynamodb::client().await else {
        return;
    };
    for mode in ["optimistic", "lease"] {
        let tables = Tables {
            idempotency: create_table(&client).await,
            ledger: create_table_keyed(&client, "ledger", "account").await,
        };
        let api = RuntimeApi::start().await;
        let _container = spawn(&api.address(), &tables, mode);
        let invoke = |name: &str| {
            let body = event(name);
            let api = &api;
            async move {
                api.invoke(&body, Duration::from_secs(30), Duration::from_secs(60))
                    .await
            }
        };

        assert_eq!(
            failures(invoke("batch.json").await),
            Vec::<String>::new(),
            "{mode}"
        );
        assert_eq!(
            failures(invoke("batch_redelivered.json").await),
            Vec::<String>::new()
        );
        assert_eq!(
            failures(invoke("producer_retry.json").await),
            Vec::<String>::new()
        );
        let poison = event("poison.json");
        assert_eq!(
            failures(invoke("poison.json").await),
            ids(&poison, &[1]),
            "{mode}"
        );
        let tampered = event("tampered.json");
        assert_eq!(
            failures(invoke("tampered.json").await),
            ids(&tampered, &[0]),
            "{mode}"
        );
        // A mistyped amount and a missing account fail alone, keyed or not.
        let mut mistyped = event("batch.json");
        mistyped["Records"][0]["body"] =
            json!(r#"{"eventId":"evt-9001","account":"acct-zed","amount":"12"}"#);
        mistyped["Records"][1]["body"] = json!(r#"{"eventId":"evt-9002","amount":3}"#);
        let reply = api
            .invoke(&mistyped, Duration::from_secs(30), Duration::from_secs(60))
            .await;
        assert_eq!(failures(reply), ids(&mistyped, &[0, 1]), "{mode}");

        assert_eq!(
            balance(&client, &tables.ledger, "acct-alice").await,
            20,
            "{mode}"
        );
        assert_eq!(
            balance(&client, &tables.ledger, "acct-bob").await,
            40,
            "{mode}"
        );
        assert_eq!(
            balance(&client, &tables.ledger, "acct-carol").await,
            17,
            "{mode}"
        );
        assert_eq!(
            balance(&client, &tables.ledger, "acct-zed").await,
            0,
            "{mode}"
        );
        assert!(api.init_errors().await.is_empty());
        eprintln!("order-consumer ({mode}) held its contract under the Runtime API");
    }
}

#[tokio::test]
async fn order_consumer_refuses_to_start_without_its_tables() {
    if support::dynamodb::client().await.is_none() {
        return;
    }
    let api = RuntimeApi::start().await;
    let tables = Tables {
        idempotency: String::new(),
        ledger: "ledger".into(),
    };
    let mut container = spawn(&api.address(), &tables, "optimistic");
    let status = tokio::time::timeout(Duration::from_secs(30), container.wait())
        .await
        .expect("exits")
        .unwrap();
    // It exits at init (Lambda reports Runtime.ExitError) rather than run half-configured.
    assert!(!status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_event_fails_its_invocation_and_the_container_goes_on() {
    let Some(client) = support::dynamodb::client().await else {
        return;
    };
    let tables = Tables {
        idempotency: create_table(&client).await,
        ledger: create_table_keyed(&client, "ledger", "account").await,
    };
    let api = RuntimeApi::start().await;
    let _container = spawn(&api.address(), &tables, "optimistic");
    let wait = Duration::from_secs(60);
    for malformed in [
        json!({"Records": "not a list"}),
        json!({"Records": [{"messageId": 42, "body": []}]}),
        json!("just a string"),
    ] {
        match api.invoke(&malformed, Duration::from_secs(30), wait).await {
            Some(Reply::Error(body)) => assert!(body["errorType"].is_string(), "{body}"),
            other => panic!("a malformed event must fail its invocation, got {other:?}"),
        }
    }
    // The same container then processes a good batch.
    assert_eq!(
        failures(invoke_file(&api, "batch.json").await),
        Vec::<String>::new()
    );
    assert_eq!(balance(&client, &tables.ledger, "acct-bob").await, 40);
}

async fn invoke_file(api: &RuntimeApi, name: &str) -> Option<Reply> {
    api.invoke(
        &event(name),
        Duration::from_secs(30),
        Duration::from_secs(60),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_store_cannot_eat_the_invocation() {
    let Some(direct) = support::dynamodb::client().await else {
        return;
    };
    let endpoint = std::env::var("AWS_ENDPOINT_URL_DYNAMODB").unwrap();
    let tables = Tables {
        idempotency: create_table(&direct).await,
        ledger: create_table_keyed(&direct, "ledger", "account").await,
    };
    // Every request hangs for a minute.
    let proxy = FaultProxy::start(&endpoint, 5).await;
    proxy.set_slow_by(Duration::from_secs(60));
    proxy.set_rates(FaultRates {
        slow: 1.0,
        ..FaultRates::default()
    });
    let api = RuntimeApi::start().await;
    let _container = spawn_with_endpoint(&api.address(), &tables, "lease", &proxy.endpoint());
    let event = support::load_event_json("batch.json");
    let started = Instant::now();
    let reply = api
        .invoke(&event, Duration::from_secs(30), Duration::from_secs(30))
        .await;
    let took = started.elapsed();
    // order-consumer's SDK timeouts (2 s per attempt, 5 s per operation) bound the wait.
    assert!(
        took < Duration::from_secs(12),
        "the invocation took {took:?}"
    );
    match reply {
        Some(Reply::Response(body)) => {
            assert_eq!(
                body["batchItemFailures"].as_array().unwrap().len(),
                3,
                "{body}"
            );
        }
        other => panic!("expected a batch response, got {other:?}"),
    }
    assert_eq!(balance(&direct, &tables.ledger, "acct-alice").await, 0);
    eprintln!("a hung store: order-consumer answered in {took:?}, every record reported");
}

/// Lambda Managed Instances: one process polls for four invocations at once
/// (`AWS_LAMBDA_MAX_CONCURRENCY=4`, `run_concurrent`), all four the same batch. The
/// invocations share the process's single flight: each order is credited once, and no
/// invocation reports a record (a duplicate waits for the copy running in the process and
/// replays it, instead of meeting its lease and being reported locked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_invocations_in_one_process_credit_once_and_report_nothing() {
    let Some(client) = support::dynamodb::client().await else {
        return;
    };
    for mode in ["optimistic", "lease"] {
        let tables = Tables {
            idempotency: create_table(&client).await,
            ledger: create_table_keyed(&client, "ledger", "account").await,
        };
        let api = RuntimeApi::start().await;
        let _container = spawn_concurrent(&api.address(), &tables, mode, "4");
        let body = event("batch.json");
        let invoke = || api.invoke(&body, Duration::from_secs(30), Duration::from_secs(60));
        let replies = tokio::join!(invoke(), invoke(), invoke(), invoke());
        for reply in [replies.0, replies.1, replies.2, replies.3] {
            assert_eq!(failures(reply), Vec::<String>::new(), "{mode}");
        }
        assert_eq!(api.most_in_flight(), 4, "{mode}: four invocations at once");
        assert_eq!(
            balance(&client, &tables.ledger, "acct-alice").await,
            20,
            "{mode}"
        );
        assert_eq!(
            balance(&client, &tables.ledger, "acct-bob").await,
            40,
            "{mode}"
        );
    }
}

/// Sequence-guarded (`IDEMPOTENCY_MODE=sequenced`): a FIFO batch of account events, each
/// carrying its account's sequence, credits each account in turn without an idempotency
/// record; the batch redelivered (`ApproximateReceiveCount` 2) changes nothing; an event
/// ahead of its turn is reported and applies once the gap closes; an order without a
/// sequence fails alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_consumer_sequenced_credits_each_account_in_turn() {
    let Some(client) = support::dynamodb::client().await else {
        return;
    };
    let tables = Tables {
        idempotency: "no-idempotency-table-needed".into(),
        ledger: create_table_keyed(&client, "ledger", "account").await,
    };
    let api = RuntimeApi::start().await;
    let _container = spawn(&api.address(), &tables, "sequenced");
    let invoke = |body: Value| {
        let api = &api;
        async move {
            api.invoke(&body, Duration::from_secs(30), Duration::from_secs(60))
                .await
        }
    };
    let batch = event("batch_sequenced.json");
    assert_eq!(failures(invoke(batch.clone()).await), Vec::<String>::new());
    assert_eq!(balance(&client, &tables.ledger, "acct-gina").await, 12);
    assert_eq!(balance(&client, &tables.ledger, "acct-hal").await, 7);
    // Redelivered: every entity is at or past its event; nothing is written.
    let mut again = batch.clone();
    for record in again["Records"].as_array_mut().unwrap() {
        record["attributes"]["ApproximateReceiveCount"] = json!("2");
    }
    assert_eq!(failures(invoke(again).await), Vec::<String>::new());
    assert_eq!(balance(&client, &tables.ledger, "acct-gina").await, 12);
    // acct-hal's event 3 before its 2: reported (nothing written); then 2 and 3 in turn.
    let event_of = |seq: u64, amount: i64, id: &str| {
        let mut one = batch.clone();
        let record = &mut one["Records"][2];
        record["messageId"] = json!(id);
        record["body"] = json!(format!(
            r#"{{"eventId":"evt-hal-{seq}","account":"acct-hal","amount":{amount},"sequence":{seq}}}"#
        ));
        one["Records"] = json!([record.clone()]);
        one
    };
    assert_eq!(failures(invoke(event_of(3, 100, "hal-3")).await), ["hal-3"]);
    assert_eq!(balance(&client, &tables.ledger, "acct-hal").await, 7);
    assert_eq!(
        failures(invoke(event_of(2, 10, "hal-2")).await),
        Vec::<String>::new()
    );
    assert_eq!(
        failures(invoke(event_of(3, 100, "hal-3")).await),
        Vec::<String>::new()
    );
    assert_eq!(balance(&client, &tables.ledger, "acct-hal").await, 117);
    // An order without a sequence fails alone.
    let mut unsequenced = event_of(4, 1, "hal-x");
    unsequenced["Records"][0]["body"] =
        json!(r#"{"eventId":"evt-hal-x","account":"acct-hal","amount":1}"#);
    assert_eq!(failures(invoke(unsequenced).await), ["hal-x"]);
    assert_eq!(balance(&client, &tables.ledger, "acct-hal").await, 117);
}
