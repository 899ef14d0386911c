//! Interoperability with Powertools for AWS Lambda (Python), the real package from PyPI
//! (`scripts/bench-requirements.txt`), on DynamoDB Local: the order-consumer with
//! `POWERTOOLS_KEY_PREFIX` and the Powertools order-consumer of
//! `scripts/powertools_interop.py` share one table, as during a migration, in both commit
//! strategies:
//! - a batch Powertools applied is replayed by this crate: every record `replayed`, nothing
//!   reported, the ledger unmoved; the compiled order-consumer, given `POWERTOOLS_KEY_PREFIX`
//!   in its environment, acknowledges it too;
//! - a batch this crate applied is acknowledged by Powertools without its handler running,
//!   and the records both write for the same events are the same items;
//! - a record Powertools holds in progress is `locked` here and reported; once Powertools
//!   finishes it, this crate replays it;
//! - a record this crate holds in progress is reported by Powertools without its handler
//!   running; once this crate commits it, Powertools replays it.
//!
//! The Python side's interpreter is `LAMBDA_IDEMPOTENCY_POWERTOOLS_PYTHON` (`scripts/test.sh`
//! installs it). Without it the test skips, unless `LAMBDA_IDEMPOTENCY_REQUIRE_POWERTOOLS=1`
//! (set by `scripts/test.sh`) or `CI` is set: then it fails.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use lambda_idempotency::aws_lambda_events::sqs::SqsEvent;
use lambda_idempotency::aws_sdk_dynamodb::types::AttributeValue;
use lambda_idempotency::aws_sdk_dynamodb::Client;
use lambda_idempotency::batch::{BatchProcessor, BatchReport};
use lambda_idempotency::key::PayloadValidation;
use lambda_idempotency::powertools::PowertoolsFormat;
use lambda_idempotency::store::DynamoDbStore;
use lambda_idempotency::{CommitStrategy, Config, IdempotencyLayer, Outcome};
use lambda_idempotency_test_support as support;
use order_consumer::{apply_order, order_key, processor, Applied, Settings, Tables};
use serde_json::{json, Value};
use support::dynamodb::{balance, create_table, create_table_keyed};
use support::harness::function;
use support::harness::runtime_api::{batch_failures, RuntimeApi};
use support::reported;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::Notify;

/// The Powertools function's name: its ids start `orders-python.__main__.apply#`.
const PYTHON_FUNCTION: &str = "orders-python";
/// The exact text before `#` in the Powertools function's ids (no `key_prefix` set there:
/// Powertools' default, `<function name>.<module>.<function>`).
const PREFIX: &str = "orders-python.__main__.apply";
const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../scripts/powertools_interop.py"
);

fn python() -> Option<String> {
    let required = std::env::var("LAMBDA_IDEMPOTENCY_REQUIRE_POWERTOOLS").is_ok_and(|v| v == "1")
        || std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
    match std::env::var("LAMBDA_IDEMPOTENCY_POWERTOOLS_PYTHON") {
        Ok(python) if !python.is_empty() => Some(python),
        _ if required => panic!(
            "LAMBDA_IDEMPOTENCY_POWERTOOLS_PYTHON is not set: run scripts/test.sh, which installs Powertools"
        ),
        _ => {
            eprintln!("skipping: LAMBDA_IDEMPOTENCY_POWERTOOLS_PYTHON is not set");
            None
        }
    }
}

/// The Powertools order-consumer, one process on `tables`.
struct Powertools {
    _child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Powertools {
    fn start(python: &str, tables: &Tables) -> Self {
        let endpoint = std::env::var("AWS_ENDPOINT_URL_DYNAMODB").expect("DynamoDB Local");
        let mut child = tokio::process::Command::new(python)
            .arg(SCRIPT)
            .env("AWS_ENDPOINT_URL_DYNAMODB", endpoint)
            .env("IDEMPOTENCY_TABLE", &tables.idempotency)
            .env("LEDGER_TABLE", &tables.ledger)
            .env("AWS_LAMBDA_FUNCTION_NAME", PYTHON_FUNCTION)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start the Powertools function");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        Powertools {
            _child: child,
            stdin,
            stdout,
        }
    }

    async fn send(&mut self, request: Value) -> Value {
        let line = request.to_string() + "\n";
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(60), self.stdout.next_line())
            .await
            .expect("the Powertools function answers within a minute")
            .unwrap()
            .expect("the Powertools function answered (see its stderr above)");
        serde_json::from_str(&answer).unwrap()
    }

    /// Processes `event`: the ids it reported, and how many times its handler ran.
    async fn process(&mut self, event: &Value) -> (Vec<String>, u64) {
        let answer = self.send(json!({ "event": event })).await;
        let failures = serde_json::from_value(answer["failures"].clone()).unwrap();
        (failures, answer["applied"].as_u64().unwrap())
    }
}

/// The Rust order-consumer on `tables` in `mode`, with `POWERTOOLS_KEY_PREFIX` set to
/// [`PREFIX`], processing `event`.
async fn rust(
    client: &Client,
    tables: &Tables,
    mode: CommitStrategy,
    event: &Value,
) -> BatchReport<Applied> {
    let mut settings = Settings::new(tables.clone(), mode);
    settings.powertools_key_prefix = Some(PREFIX.to_string());
    // No local cache: every answer below comes from the table.
    settings.local_cache = 0;
    let event: SqsEvent = serde_json::from_value(event.clone()).unwrap();
    let invocation = support::invocation(event, SystemTime::now(), Duration::from_secs(30));
    processor(client.clone(), &settings)
        .process(invocation)
        .await
}

async fn balances(client: &Client, tables: &Tables) -> (i64, i64) {
    (
        balance(client, &tables.ledger, "acct-alice").await,
        balance(client, &tables.ledger, "acct-bob").await,
    )
}

/// Every item of the idempotency table, by id, with the attributes both sides write.
async fn records(client: &Client, table: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    let items = client
        .scan()
        .table_name(table)
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .items
        .unwrap_or_default();
    items
        .into_iter()
        .map(|item| {
            let text = |name: &str| match item.get(name) {
                Some(AttributeValue::S(s)) => s.clone(),
                Some(AttributeValue::N(n)) => n.clone(),
                Some(other) => format!("{other:?}"),
                None => String::new(),
            };
            let shared = ["status", "data", "validation"]
                .into_iter()
                .map(|name| (name.to_string(), text(name)))
                .collect();
            (text("id"), shared)
        })
        .collect()
}

fn event(name: &str) -> Value {
    support::load_event_json(name)
}

async fn tables(client: &Client) -> Tables {
    Tables {
        idempotency: create_table(client).await,
        ledger: create_table_keyed(client, "ledger", "account").await,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn powertools_and_this_crate_share_their_records() {
    let Some(client) = support::dynamodb::client().await else {
        return;
    };
    let Some(python) = python() else {
        return;
    };
    for mode in [CommitStrategy::Optimistic, CommitStrategy::Lease] {
        // Python first: this crate replays what Powertools applied.
        let python_first = tables(&client).await;
        let mut powertools = Powertools::start(&python, &python_first);
        assert_eq!(
            powertools.process(&event("batch.json")).await,
            (vec![], 3),
            "{mode:?}"
        );
        assert_eq!(balances(&client, &python_first).await, (20, 40));
        for redelivery in ["batch_redelivered.json", "producer_retry.json"] {
            let report = rust(&client, &python_first, mode, &event(redelivery)).await;
            assert_eq!(
                reported(&report),
                Vec::<String>::new(),
                "{mode:?} {redelivery}"
            );
            let records = event(redelivery)["Records"].as_array().unwrap().len();
            assert_eq!(
                support::outcomes(&report),
                vec![Outcome::Replayed; records],
                "{mode:?} {redelivery}"
            );
            assert!(report.records.iter().all(|r| r.replayed));
            // The stored result Powertools wrote reads back as this crate's result type.
            for record in &report.records {
                assert!(record.value.is_some(), "{mode:?} {redelivery}");
            }
        }
        assert_eq!(balances(&client, &python_first).await, (20, 40), "{mode:?}");
        // The same through the compiled function, configured by its environment alone.
        let api = RuntimeApi::start().await;
        let mode_name = match mode {
            CommitStrategy::Lease => "lease",
            _ => "optimistic",
        };
        let _function = function::spawn(
            env!("CARGO_BIN_EXE_order-consumer"),
            "order-consumer",
            &api.address(),
            &[
                ("IDEMPOTENCY_TABLE", &python_first.idempotency),
                ("LEDGER_TABLE", &python_first.ledger),
                ("IDEMPOTENCY_MODE", mode_name),
                ("POWERTOOLS_KEY_PREFIX", PREFIX),
            ],
        );
        for redelivery in ["batch_redelivered.json", "producer_retry.json"] {
            let reply = api
                .invoke(
                    &event(redelivery),
                    Duration::from_secs(30),
                    Duration::from_secs(60),
                )
                .await;
            assert!(
                reply.is_some(),
                "{mode:?} {redelivery}: the function answered"
            );
            assert_eq!(
                batch_failures(reply),
                Vec::<String>::new(),
                "{mode:?} {redelivery}"
            );
        }
        assert_eq!(balances(&client, &python_first).await, (20, 40), "{mode:?}");

        // Rust first: Powertools acknowledges what this crate applied, without running.
        let rust_first = tables(&client).await;
        let report = rust(&client, &rust_first, mode, &event("batch.json")).await;
        assert_eq!(reported(&report), Vec::<String>::new(), "{mode:?}");
        assert_eq!(support::outcomes(&report), vec![Outcome::Executed; 3]);
        assert_eq!(balances(&client, &rust_first).await, (20, 40));
        let mut powertools = Powertools::start(&python, &rust_first);
        for redelivery in ["batch_redelivered.json", "producer_retry.json"] {
            assert_eq!(
                powertools.process(&event(redelivery)).await,
                (vec![], 0),
                "{mode:?} {redelivery}: Powertools ran its handler or reported a record"
            );
        }
        assert_eq!(balances(&client, &rust_first).await, (20, 40), "{mode:?}");

        // Both sides wrote the same items for the same events: ids, status, payload hashes
        // and results, byte for byte.
        let written_by_python = records(&client, &python_first.idempotency).await;
        let written_by_rust = records(&client, &rust_first.idempotency).await;
        assert_eq!(written_by_python.len(), 3);
        assert!(written_by_python
            .keys()
            .all(|id| id.starts_with(&format!("{PREFIX}#"))));
        assert_eq!(written_by_rust, written_by_python, "{mode:?}");

        // A lease Powertools holds is respected: the record is locked here, and reported.
        let in_flight = tables(&client).await;
        let mut powertools = Powertools::start(&python, &in_flight);
        let one = event("producer_retry.json");
        let held = powertools.send(json!({ "event": one, "hold": true })).await;
        assert_eq!(held, json!({ "held": true }));
        let report = rust(&client, &in_flight, mode, &one).await;
        assert_eq!(
            support::outcomes(&report),
            vec![Outcome::Locked],
            "{mode:?}"
        );
        let message_id = one["Records"][0]["messageId"].as_str().unwrap();
        assert_eq!(reported(&report), vec![message_id.to_string()]);
        assert_eq!(balances(&client, &in_flight).await, (0, 0));
        let released = powertools.send(json!({ "release": true })).await;
        assert_eq!(released, json!({ "failures": [], "applied": 1 }));
        assert_eq!(balances(&client, &in_flight).await, (0, 40));
        let report = rust(&client, &in_flight, mode, &one).await;
        assert_eq!(
            support::outcomes(&report),
            vec![Outcome::Replayed],
            "{mode:?}"
        );
        assert_eq!(balances(&client, &in_flight).await, (0, 40), "{mode:?}");
    }
}

/// A lease this crate holds is respected by Powertools: the record is reported there and its
/// handler does not run; once this crate commits, Powertools replays it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn powertools_respects_a_lease_this_crate_holds() {
    let Some(client) = support::dynamodb::client().await else {
        return;
    };
    let Some(python) = python() else {
        return;
    };
    let tables = tables(&client).await;
    let entered = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let store = DynamoDbStore::new(client.clone(), tables.idempotency.clone());
    let ledger = tables.ledger.clone();
    let (entered_in, release_in) = (entered.clone(), release.clone());
    let handler = IdempotencyLayer::new(store)
        .with_key(order_key())
        .with_config(
            Config::new()
                .with_payload_validation(PayloadValidation::Body)
                .with_powertools_format(PowertoolsFormat::new(PREFIX)),
        )
        .with_writes()
        .with_commit(CommitStrategy::Lease)
        .handler(move |message| {
            let (entered, release, ledger) =
                (entered_in.clone(), release_in.clone(), ledger.clone());
            async move {
                entered.notify_one();
                release.notified().await;
                apply_order(ledger, message).await
            }
        });
    let processor = BatchProcessor::new(handler);
    let one = event("producer_retry.json");
    let batch: SqsEvent = serde_json::from_value(one.clone()).unwrap();
    let invocation = support::invocation(batch, SystemTime::now(), Duration::from_secs(30));
    let held = tokio::spawn(async move { processor.process::<Applied>(invocation).await });
    entered.notified().await;

    let mut powertools = Powertools::start(&python, &tables);
    let message_id = one["Records"][0]["messageId"].as_str().unwrap();
    assert_eq!(
        powertools.process(&one).await,
        (vec![message_id.to_string()], 0),
        "Powertools ran the handler of a record this crate holds, or did not report it"
    );
    assert_eq!(balances(&client, &tables).await, (0, 0));

    release.notify_one();
    let report = held.await.unwrap();
    assert_eq!(support::outcomes(&report), vec![Outcome::Executed]);
    assert_eq!(balances(&client, &tables).await, (0, 40));
    assert_eq!(powertools.process(&one).await, (vec![], 0));
    assert_eq!(balances(&client, &tables).await, (0, 40));
}
