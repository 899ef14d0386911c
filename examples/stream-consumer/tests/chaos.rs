//! Chaos on a shard: the stream-consumer binary behind the Lambda Runtime API, fed one
//! shard's records (Kinesis, then DynamoDB Streams) by a model of the event source mapping,
//! against DynamoDB Local, while the process is killed with SIGKILL at random moments and
//! responses are lost. The mapping model sends batches from its checkpoint; on a response it
//! moves the checkpoint to the lowest reported sequence number (past the batch when none is
//! reported); on a lost response, a failed invocation or a killed process it sends the same
//! records again; after `MAX_ATTEMPTS` reports of the record at its checkpoint it gives up on
//! that record (the on-failure destination, as `MaximumRetryAttempts` with
//! `BisectBatchOnFunctionError` would) and moves past it.
//!
//! The workload mixes orders, producer duplicates (the same order put again: a new record,
//! the same `eventId`), poison records and tampered duplicates (the same `eventId`, another
//! amount). At the end: every balance is the sum of the unique orders, the on-failure
//! destination holds exactly the poison records and the tampered twins, and no order was
//! credited twice.
//!
//! Settings: `CHAOS_SEED`, `CHAOS_EVENTS`, `CHAOS_KILL_RATE`, `CHAOS_LOSS_RATE`,
//! `CHAOS_MODES`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use base64::Engine;
use lambda_idempotency_test_support as support;
use serde_json::{json, Value};
use stream_consumer::Tables;
use support::dynamodb::{balance, create_table, create_table_keyed};
use support::harness::function;
use support::harness::runtime_api::{Reply, RuntimeApi};
use support::harness::sqs_sim::Rng;
use tokio::process::Child;

/// Time the function gets per invocation: Lambda's default timeout.
const DEADLINE: Duration = Duration::from_secs(3);
/// Reports of the record at the checkpoint before the mapping gives up on it.
const MAX_ATTEMPTS: u32 = 6;
/// The pause before a batch is sent again: the attempts outlast a killed holder's lease
/// (which ends at its invocation's deadline).
const RETRY_PAUSE: Duration = Duration::from_millis(800);

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Shape {
    Kinesis,
    DynamoDb,
}

/// One record of the shard, and what the model expects of it.
#[derive(Debug, Clone)]
struct Entry {
    sequence: String,
    record: Value,
    /// The mapping must give up on it (poison, or a tampered twin).
    doomed: bool,
}

fn record(shape: Shape, index: usize, order: &str) -> (String, Value) {
    let sequence = format!(
        "{:021}",
        4_959_033_827_149_025_660u128 * 1000 + index as u128
    );
    let record = match shape {
        Shape::Kinesis => json!({
            "eventSource": "aws:kinesis",
            "eventID": format!("shardId-000000000000:{sequence}"),
            "eventName": "aws:kinesis:record",
            "eventVersion": "1.0",
            "eventSourceARN": "arn:aws:kinesis:us-east-1:123456789012:stream/orders",
            "awsRegion": "us-east-1",
            "invokeIdentityArn": "arn:aws:iam::123456789012:role/stream-consumer",
            "kinesis": {
                "kinesisSchemaVersion": "1.0",
                "partitionKey": "orders",
                "sequenceNumber": sequence,
                "data": base64::engine::general_purpose::STANDARD.encode(order),
                "approximateArrivalTimestamp": 1795000000.0
            }
        }),
        Shape::DynamoDb => {
            // The order as an item: numbers as numbers, anything else as a string.
            let parsed: Value = serde_json::from_str(order).unwrap_or(json!({"eventId": order}));
            let mut image = serde_json::Map::new();
            for (name, value) in parsed.as_object().into_iter().flatten() {
                let attribute = match value {
                    Value::Number(n) => json!({"N": n.to_string()}),
                    Value::String(s) => json!({"S": s}),
                    other => json!({"S": other.to_string()}),
                };
                image.insert(name.clone(), attribute);
            }
            json!({
                "eventID": format!("{index:032x}"),
                "eventName": "INSERT",
                "eventVersion": "1.1",
                "eventSource": "aws:dynamodb",
                "awsRegion": "us-east-1",
                "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/orders/stream/2026-11-22T00:00:00.000",
                "dynamodb": {
                    "ApproximateCreationDateTime": 1795000000,
                    "Keys": {"eventId": image.get("eventId").cloned().unwrap_or(json!({"S": "?"}))},
                    "NewImage": image,
                    "SequenceNumber": sequence,
                    "SizeBytes": 60,
                    "StreamViewType": "NEW_IMAGE"
                }
            })
        }
    };
    (sequence, record)
}

/// The shard's records, in order, and each account's expected balance.
fn workload(
    shape: Shape,
    seed: u64,
    events: usize,
    rng: &mut Rng,
) -> (Vec<Entry>, BTreeMap<String, i64>) {
    let mut orders: Vec<(String, bool)> = Vec::new();
    let mut expected = BTreeMap::new();
    for i in 0..events {
        let account = format!("acct-{}", rng.below(5));
        let amount = rng.below(100) as i64 - 30;
        *expected.entry(account.clone()).or_insert(0) += amount;
        let order =
            json!({"eventId": format!("evt-{seed}-{i}"), "account": account, "amount": amount});
        orders.push((order.to_string(), false));
        if rng.chance(0.2) {
            // The producer puts it again.
            orders.push((order.to_string(), false));
        }
        if rng.chance(0.05) {
            // The same eventId with another amount, later in the shard: never applied.
            let twin = json!({"eventId": format!("evt-{seed}-{i}"), "account": account, "amount": amount + 1000});
            orders.push((twin.to_string(), true));
        }
    }
    for poison in [
        r#"{"eventId":"evt-poison-a","account":"#,
        r#"{"eventId":"evt-poison-b","amount":"12"}"#,
    ] {
        let at = rng.below(orders.len() as u64) as usize;
        orders.insert(at, (poison.to_string(), true));
    }
    let entries = orders
        .into_iter()
        .enumerate()
        .map(|(index, (order, doomed))| {
            let (sequence, record) = record(shape, index, &order);
            Entry {
                sequence,
                record,
                doomed,
            }
        })
        .collect();
    (entries, expected)
}

fn signal(pid: u32, signal: &str) {
    let _ = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .stderr(std::process::Stdio::null())
        .status();
}

fn spawn(api: &RuntimeApi, tables: &Tables, mode: &str) -> Child {
    function::spawn(
        env!("CARGO_BIN_EXE_stream-consumer"),
        "stream-consumer",
        &api.address(),
        &[
            ("IDEMPOTENCY_TABLE", &tables.idempotency),
            ("LEDGER_TABLE", &tables.ledger),
            ("IDEMPOTENCY_MODE", mode),
        ],
    )
}

#[derive(Debug, Default)]
struct Counters {
    invocations: u64,
    kills: u64,
    lost: u64,
    given_up: u64,
}

async fn chaos_run(shape: Shape, mode: &str) {
    let Some(client) = support::dynamodb::client().await else {
        return;
    };
    let seed: u64 = env_or("CHAOS_SEED", 1);
    let kill_rate: f64 = env_or("CHAOS_KILL_RATE", 0.15);
    let loss_rate: f64 = env_or("CHAOS_LOSS_RATE", 0.15);
    let mut rng = Rng::new(seed);
    let (shard, expected) = workload(shape, seed, env_or("CHAOS_EVENTS", 30), &mut rng);
    let tables = Tables {
        idempotency: create_table(&client).await,
        ledger: create_table_keyed(&client, "ledger", "account").await,
    };
    let mut api = RuntimeApi::start().await;
    let mut child = spawn(&api, &tables, mode);
    let (mut checkpoint, mut attempts, mut counters) = (0usize, 0u32, Counters::default());
    let mut destination = BTreeSet::new();
    let started = Instant::now();
    while checkpoint < shard.len() {
        assert!(
            started.elapsed() < Duration::from_secs(240),
            "{shape:?} {mode}: stuck at {checkpoint}"
        );
        let end = (checkpoint + 1 + rng.below(10) as usize).min(shard.len());
        let batch = &shard[checkpoint..end];
        let event = json!({"Records": batch.iter().map(|e| e.record.clone()).collect::<Vec<_>>()});
        counters.invocations += 1;
        let pid = child.id().expect("running");
        let kill = rng.chance(kill_rate);
        if kill {
            counters.kills += 1;
            let delay = Duration::from_millis(rng.below(60));
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                signal(pid, "-KILL");
            });
        }
        let reply = api
            .invoke(&event, DEADLINE, DEADLINE + Duration::from_millis(300))
            .await;
        let exited = child.try_wait().ok().flatten().is_some();
        if kill || exited || reply.is_none() {
            signal(pid, "-KILL");
            let _ = child.wait().await;
            api = RuntimeApi::start().await;
            child = spawn(&api, &tables, mode);
        }
        let failures: Vec<String> = match reply {
            Some(Reply::Response(body)) if !rng.chance(loss_rate) => body["batchItemFailures"]
                .as_array()
                .expect("a batch response")
                .iter()
                .map(|f| f["itemIdentifier"].as_str().unwrap().to_string())
                .collect(),
            Some(Reply::Response(_)) => {
                counters.lost += 1;
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
            _ => {
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
        };
        let Some(lowest) = batch.iter().position(|e| failures.contains(&e.sequence)) else {
            assert!(
                failures.is_empty(),
                "{shape:?} {mode}: reported records not in the batch"
            );
            checkpoint = end;
            attempts = 0;
            continue;
        };
        // Every record after the first reported one is reported too: the shard's order holds.
        let reported: Vec<&String> = batch[lowest..].iter().map(|e| &e.sequence).collect();
        assert_eq!(
            failures.iter().collect::<Vec<_>>(),
            reported,
            "{shape:?} {mode}"
        );
        if lowest > 0 {
            (checkpoint, attempts) = (checkpoint + lowest, 0);
        }
        attempts += 1;
        if attempts >= MAX_ATTEMPTS {
            destination.insert(checkpoint);
            counters.given_up += 1;
            (checkpoint, attempts) = (checkpoint + 1, 0);
        } else {
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }
    let _ = child.kill().await;

    let doomed: BTreeSet<usize> = (0..shard.len()).filter(|&i| shard[i].doomed).collect();
    assert_eq!(
        destination, doomed,
        "{shape:?} {mode}: the on-failure destination holds exactly the doomed records"
    );
    for (account, amount) in &expected {
        let actual = balance(&client, &tables.ledger, account).await;
        assert_eq!(actual, *amount, "{shape:?} {mode}: balance of {account}");
    }
    eprintln!(
        "chaos {shape:?} {mode} seed={seed}: {} records ({} doomed) in {:.1}s: {} invocations, {} SIGKILLs, \
         {} lost responses, {} given up; every balance matches the model",
        shard.len(),
        doomed.len(),
        started.elapsed().as_secs_f64(),
        counters.invocations,
        counters.kills,
        counters.lost,
        counters.given_up,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_history_matches_the_model() {
    // The runs are independent (tables, processes, emulators of their own) and mostly wait:
    // they run at once.
    let modes = std::env::var("CHAOS_MODES").unwrap_or_else(|_| "optimistic,lease".into());
    let mut runs = Vec::new();
    for mode in modes.split(',').map(|m| m.trim().to_string()) {
        assert!(
            ["optimistic", "lease"].contains(&mode.as_str()),
            "unknown mode {mode}"
        );
        for shape in [Shape::Kinesis, Shape::DynamoDb] {
            let mode = mode.clone();
            runs.push(tokio::spawn(async move { chaos_run(shape, &mode).await }));
        }
    }
    for run in runs {
        run.await.expect("a chaos run");
    }
}
