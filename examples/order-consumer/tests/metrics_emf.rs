//! The order-consumer's metrics: the compiled binary, driven through the Runtime API
//! emulator against DynamoDB Local, writes one CloudWatch Embedded Metric Format line per
//! invocation on stdout; each is parsed back and checked against what the batch did.
mod container;

use std::time::Duration;

use lambda_idempotency_test_support as support;
use order_consumer::Tables;
use serde_json::Value;
use support::dynamodb::{create_table, create_table_keyed};
use support::harness::runtime_api::{Reply, RuntimeApi};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::ChildStdout;

/// The next EMF document the function wrote (other stdout lines, its logs, are skipped).
async fn next_emf(lines: &mut Lines<BufReader<ChildStdout>>) -> Value {
    let read = async {
        while let Some(line) = lines.next_line().await.expect("read stdout") {
            if let Ok(doc) = serde_json::from_str::<Value>(&line) {
                if doc.get("_aws").is_some() {
                    return doc;
                }
            }
        }
        panic!("the function's stdout ended without a metrics line");
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("a metrics line within 10 s")
}

fn count(doc: &Value, metric: &str) -> u64 {
    doc[metric].as_u64().unwrap_or(0)
}

fn declared(doc: &Value) -> Vec<String> {
    doc["_aws"]["CloudWatchMetrics"][0]["Metrics"]
        .as_array()
        .expect("declared metrics")
        .iter()
        .map(|m| m["Name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_invocation_writes_one_emf_line_with_its_outcomes_latencies_and_calls() {
    let Some(client) = support::dynamodb::client().await else {
        return;
    };
    // DynamoDB calls per fresh record: one transaction (optimistic), or an acquire and the
    // transaction (lease).
    for (mode, fresh_calls) in [("optimistic", 1), ("lease", 2)] {
        let tables = Tables {
            idempotency: create_table(&client).await,
            ledger: create_table_keyed(&client, "ledger", "account").await,
        };
        let api = RuntimeApi::start().await;
        let mut function = container::spawn_with_stdout(&api.address(), &tables, mode);
        let mut lines = BufReader::new(function.stdout.take().expect("piped stdout")).lines();
        let invoke = |name: &str| {
            let body = support::load_event_json(name);
            let api = &api;
            async move {
                let reply = api
                    .invoke(&body, Duration::from_secs(30), Duration::from_secs(60))
                    .await;
                assert!(
                    matches!(&reply, Some(Reply::Response(r)) if r["batchItemFailures"] == serde_json::json!([])),
                    "{mode}: {reply:?}"
                );
            }
        };

        invoke("batch.json").await;
        let fresh = next_emf(&mut lines).await;
        let aws = &fresh["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(aws["Namespace"], "LambdaIdempotency", "{fresh}");
        assert_eq!(aws["Dimensions"], serde_json::json!([["FunctionName"]]));
        assert_eq!(fresh["FunctionName"], "order-consumer");
        assert!(fresh["RequestId"].as_str().is_some_and(|id| !id.is_empty()));
        assert!(fresh["_aws"]["Timestamp"].as_u64().is_some());
        assert_eq!(count(&fresh, "RecordsExecuted"), 3, "{mode}: {fresh}");
        assert_eq!(count(&fresh, "RecordsReplayed"), 0, "{mode}: {fresh}");
        assert_eq!(
            count(&fresh, "DynamoDbCalls"),
            3 * fresh_calls,
            "{mode}: {fresh}"
        );
        let handler_ms = fresh["HandlerLatency"].as_array().expect("a value per run");
        assert_eq!(handler_ms.len(), 3, "{mode}: {fresh}");
        assert!(fresh["BatchLatency"].is_array() || fresh["BatchLatency"].is_number());
        let names = declared(&fresh);
        for name in [
            "RecordsExecuted",
            "HandlerLatency",
            "BatchLatency",
            "DynamoDbCalls",
        ] {
            assert!(
                names.iter().any(|n| n == name),
                "{mode}: {name} in {names:?}"
            );
        }
        let units = &aws["Metrics"];
        assert!(units
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["Name"] == "HandlerLatency" && m["Unit"] == "Milliseconds"));

        // The same batch again: every record replayed from the warm process's local cache
        // (no DynamoDB call), the handler never ran, and the counters start from zero for
        // this invocation.
        invoke("batch_redelivered.json").await;
        let again = next_emf(&mut lines).await;
        assert_eq!(count(&again, "RecordsReplayed"), 3, "{mode}: {again}");
        assert_eq!(count(&again, "RecordsExecuted"), 0, "{mode}: {again}");
        assert!(again.get("HandlerLatency").is_none(), "{mode}: {again}");
        assert_eq!(count(&again, "DynamoDbCalls"), 0, "{mode}: {again}");
        assert_ne!(again["RequestId"], fresh["RequestId"]);
    }
}
