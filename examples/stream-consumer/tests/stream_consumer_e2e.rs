//! End to end: the compiled stream-consumer binary, driven through the Lambda Runtime API
//! emulator with `events/kinesis.json` and `events/dynamodb_stream.json` and their
//! redeliveries from the checkpoint, against DynamoDB Local, in both modes. Checks each
//! response (`batchItemFailures`) and the ledger after each.

use std::time::Duration;

use lambda_idempotency_test_support as support;
use serde_json::{json, Value};
use stream_consumer::Tables;
use support::dynamodb::{balance, create_table, create_table_keyed};
use support::harness::function;
use support::harness::runtime_api::{batch_failures as failures, Reply, RuntimeApi};

/// The sequence numbers of `event`'s records at `indexes`.
fn sequences(event: &Value, indexes: &[usize]) -> Vec<String> {
    indexes
        .iter()
        .map(|&i| {
            let record = &event["Records"][i];
            let sequence = record["kinesis"]["sequenceNumber"]
                .as_str()
                .or(record["dynamodb"]["SequenceNumber"].as_str());
            sequence.expect("a sequence number").to_string()
        })
        .collect()
}

/// `event` with only the records at `indexes`, in that order.
fn with_records(event: &Value, indexes: &[usize]) -> Value {
    let records: Vec<Value> = indexes
        .iter()
        .map(|&i| event["Records"][i].clone())
        .collect();
    json!({ "Records": records })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_consumer_holds_its_contract_in_both_modes() {
    let Some(client) = support::dynamodb::client().await else {
        return;
    };
    for mode in ["optimistic", "lease"] {
        let tables = Tables {
            idempotency: create_table(&client).await,
            ledger: create_table_keyed(&client, "ledger", "account").await,
        };
        let api = RuntimeApi::start().await;
        let _container = function::spawn(
            env!("CARGO_BIN_EXE_stream-consumer"),
            "stream-consumer",
            &api.address(),
            &[
                ("IDEMPOTENCY_TABLE", &tables.idempotency),
                ("LEDGER_TABLE", &tables.ledger),
                ("IDEMPOTENCY_MODE", mode),
            ],
        );
        let invoke = |event: Value| {
            let api = &api;
            async move {
                let reply = api
                    .invoke(&event, Duration::from_secs(30), Duration::from_secs(60))
                    .await;
                failures(reply)
            }
        };
        let ledger = |account: &'static str| balance(&client, &tables.ledger, account);

        // Kinesis: an order, data that is not an order, an order behind it. The shard stops
        // at the second record: it and the third are reported.
        let kinesis = support::load_event_json("kinesis.json");
        assert_eq!(
            invoke(kinesis.clone()).await,
            sequences(&kinesis, &[1, 2]),
            "{mode}"
        );
        assert_eq!(ledger("acct-alice").await, 10, "{mode}");
        assert_eq!(ledger("acct-bob").await, 0, "{mode}: never started");
        // The whole batch again (a lost response): the first replays, nothing credited twice.
        assert_eq!(
            invoke(kinesis.clone()).await,
            sequences(&kinesis, &[1, 2]),
            "{mode}"
        );
        // The producer put the first order again: a new record, the same eventId.
        let mut retry = with_records(&kinesis, &[0]);
        retry["Records"][0]["kinesis"]["sequenceNumber"] =
            json!("49590338271490256608559692538361571095921575989136588899");
        assert_eq!(invoke(retry).await, Vec::<String>::new(), "{mode}");
        assert_eq!(ledger("acct-alice").await, 10, "{mode}: credited once");
        // From the checkpoint, once the mapping has given up on the poison record.
        assert_eq!(
            invoke(with_records(&kinesis, &[2])).await,
            Vec::<String>::new()
        );
        assert_eq!(ledger("acct-bob").await, 5, "{mode}");
        assert_eq!(
            invoke(with_records(&kinesis, &[2])).await,
            Vec::<String>::new()
        );
        assert_eq!(ledger("acct-bob").await, 5, "{mode}: credited once");

        // DynamoDB Streams: INSERTs of an order, a mistyped amount, an order.
        let stream = support::load_event_json("dynamodb_stream.json");
        assert_eq!(
            invoke(stream.clone()).await,
            sequences(&stream, &[1, 2]),
            "{mode}"
        );
        assert_eq!(ledger("acct-alice").await, 20, "{mode}");
        assert_eq!(
            invoke(stream.clone()).await,
            sequences(&stream, &[1, 2]),
            "{mode}"
        );
        // A MODIFY of the first order is not an order: acknowledged, nothing credited.
        let mut modify = with_records(&stream, &[0]);
        modify["Records"][0]["eventName"] = json!("MODIFY");
        modify["Records"][0]["eventID"] = json!("c4ca4238a0b923820dcc509a6f7584ff");
        modify["Records"][0]["dynamodb"]["NewImage"]["amount"] = json!({"N": "99"});
        assert_eq!(invoke(modify).await, Vec::<String>::new(), "{mode}");
        assert_eq!(
            invoke(with_records(&stream, &[2])).await,
            Vec::<String>::new()
        );
        assert_eq!(ledger("acct-alice").await, 20, "{mode}");
        assert_eq!(ledger("acct-bob").await, 10, "{mode}");

        // An event of neither kind fails its invocation; the function goes on.
        let reply = api
            .invoke(
                &json!({"Records": [{"eventSource": "aws:s3"}]}),
                Duration::from_secs(30),
                Duration::from_secs(60),
            )
            .await;
        assert!(matches!(reply, Some(Reply::Error(_))), "{reply:?}");
        assert_eq!(invoke(json!({"Records": []})).await, Vec::<String>::new());
        assert!(api.init_errors().await.is_empty());
        eprintln!("stream-consumer ({mode}) held its contract under the Runtime API");
    }
}
