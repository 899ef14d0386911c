//! The benchmark: the toolkit against the raw DynamoDB limit and Powertools for AWS Lambda
//! (Python), side by side in one run against DynamoDB Local. Prints one JSON line per
//! scenario and writes BENCHMARKS.md. Run it with `scripts/bench.sh` (which installs the
//! Python baseline, starts DynamoDB Local and builds in release mode).
//!
//! Environment: `AWS_ENDPOINT_URL_DYNAMODB` (required), `BENCH_BATCHES` (default 40),
//! `BENCH_PYTHON` (a python with aws-lambda-powertools; the Powertools baseline is skipped
//! without it), `BENCH_ORDER_CONSUMER` (the order-consumer binary, for cold start and
//! memory), `BENCH_OUT` (default BENCHMARKS.md).

#[path = "../tests/common/dynamodb.rs"]
#[allow(dead_code)]
mod dynamodb;
#[path = "../tests/common/http1.rs"]
#[allow(dead_code)]
mod http1;
#[path = "../tests/common/runtime_api.rs"]
#[allow(dead_code)]
mod runtime_api;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};
use aws_sdk_dynamodb::Client;
use dynamodb::{counted_client, create_table, create_table_keyed, CallCounter};
use futures_util::StreamExt;
use lambda_idempotency::{
    epoch_ms, Attr, BatchProcessor, Completion, Config, DynamoDbStore, IdempotencyLayer,
    IdempotencyMode, JsonPointer, KeyExtractor, MessageAttribute, PayloadValidation, Write,
};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, Clone, Copy)]
struct Scenario {
    name: &'static str,
    batch_size: usize,
    /// Records per batch that were completed before (duplicates).
    duplicates: usize,
    cache: bool,
}

const SCENARIOS: [Scenario; 6] = [
    Scenario {
        name: "fresh-10",
        batch_size: 10,
        duplicates: 0,
        cache: false,
    },
    Scenario {
        name: "duplicates-10",
        batch_size: 10,
        duplicates: 10,
        cache: false,
    },
    Scenario {
        name: "mixed-10",
        batch_size: 10,
        duplicates: 5,
        cache: false,
    },
    Scenario {
        name: "fresh-100",
        batch_size: 100,
        duplicates: 0,
        cache: false,
    },
    Scenario {
        name: "duplicates-10-cached",
        batch_size: 10,
        duplicates: 10,
        cache: true,
    },
    Scenario {
        name: "mixed-10-cached",
        batch_size: 10,
        duplicates: 5,
        cache: true,
    },
];

/// Timings and counts of one implementation in one scenario.
#[derive(Debug, Default, Clone)]
struct Sample {
    latencies_ms: Vec<f64>,
    records: usize,
    busy: Duration,
    calls: usize,
    wcu: f64,
}

impl Sample {
    fn percentile(&self, p: f64) -> f64 {
        let mut sorted = self.latencies_ms.clone();
        sorted.sort_by(f64::total_cmp);
        if sorted.is_empty() {
            return f64::NAN;
        }
        let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
        sorted[rank]
    }
    fn records_per_sec(&self) -> f64 {
        self.records as f64 / self.busy.as_secs_f64()
    }
    fn per_record(&self, x: f64) -> f64 {
        x / self.records as f64
    }
}

fn order_message(scenario: &str, mode: &str, batch: usize, i: usize) -> SqsMessage {
    let event_id = format!("{scenario}-{mode}-{batch}-{i}");
    let mut m = SqsMessage::default();
    m.message_id = Some(format!("{:08x}-0000-4000-8000-{:012}", batch, i));
    m.body = Some(
        json!({"eventId": event_id, "account": format!("acct-{}", i % 7), "amount": (i % 13) as i64 - 3})
            .to_string(),
    );
    m.event_source = Some("aws:sqs".into());
    m
}

/// Batch `b` of a scenario: its first `duplicates` records are those of the priming batch.
fn batch(s: &Scenario, mode: &str, b: usize) -> (SqsEvent, SqsEvent) {
    let mut timed = SqsEvent::default();
    let mut prime = SqsEvent::default();
    for i in 0..s.batch_size {
        let m = order_message(s.name, mode, b, i);
        if i < s.duplicates {
            prime.records.push(m.clone());
        }
        timed.records.push(m);
    }
    (prime, timed)
}

fn context() -> Context {
    let mut c = Context::default();
    c.deadline = epoch_ms(SystemTime::now() + Duration::from_secs(60));
    c.request_id = "bench".into();
    c
}

struct Tables {
    idempotency: String,
    ledger: String,
}

async fn tables(client: &Client) -> Tables {
    Tables {
        idempotency: create_table(client).await,
        ledger: create_table_keyed(client, "ledger", "account").await,
    }
}

/// The toolkit, as order-consumer runs it.
fn toolkit(
    client: Client,
    t: &Tables,
    mode: IdempotencyMode,
    cache: bool,
) -> BatchProcessor<
    impl tower::Service<
            LambdaEvent<SqsMessage>,
            Response = lambda_idempotency::Processed<i64>,
            Error = lambda_idempotency::Error,
        > + Clone
        + Send
        + Sync
        + 'static,
> {
    let ledger = t.ledger.clone();
    let layer = IdempotencyLayer::new(DynamoDbStore::new(client, &t.idempotency))
        .with_key(MessageAttribute::new("Idempotency-Key").or(JsonPointer::new("/eventId")))
        .with_config(
            Config::new()
                .with_key_prefix("order-consumer")
                .with_mode(mode)
                .with_payload_validation(PayloadValidation::Body)
                .with_local_cache(if cache { 4096 } else { 0 }),
        );
    BatchProcessor::new(layer.transactional_handler(move |m: SqsMessage| {
        let ledger = ledger.clone();
        async move {
            let order: Value = serde_json::from_str(m.body.as_deref().unwrap_or(""))?;
            let amount = order["amount"].as_i64().ok_or("amount")?;
            let account = order["account"].as_str().ok_or("account")?.to_string();
            let write = Write::update(ledger, [("account", Attr::s(&account))], "ADD #b :a")
                .name("#b", "balance")
                .value(":a", Attr::n(amount));
            Ok::<_, BoxError>(Completion::new(amount).with_write(write))
        }
    }))
}

/// The protocol's takeover condition (no record, expired, or lease elapsed), as the raw
/// requests send it, at a fixed "now": their stored times are fixed too.
const RAW_TAKEOVER: &str =
    "attribute_not_exists(id) OR #exp < :now_secs OR (#status = :inprogress AND #ipe < :now_ms)";

fn raw_takeover_names() -> HashMap<String, String> {
    [
        ("#exp", "expiration"),
        ("#status", "status"),
        ("#ipe", "in_progress_expiration"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn raw_takeover_values() -> HashMap<String, AttributeValue> {
    HashMap::from([
        (
            ":now_secs".to_string(),
            AttributeValue::N("1795302000".into()),
        ),
        (
            ":now_ms".to_string(),
            AttributeValue::N("1795302000000".into()),
        ),
        (
            ":inprogress".to_string(),
            AttributeValue::S("INPROGRESS".into()),
        ),
    ])
}

/// The raw limit: the requests each mode must make, issued directly, no toolkit logic.
async fn raw_batch(client: &Client, t: &Tables, mode: IdempotencyMode, event: &SqsEvent) {
    let s = |v: &str| AttributeValue::S(v.to_string());
    futures_util::stream::iter(event.records.iter().map(|m| async move {
        let order: Value = serde_json::from_str(m.body.as_deref().unwrap()).unwrap();
        let id = format!("raw#{}", order["eventId"].as_str().unwrap());
        let ledger = Update::builder()
            .table_name(&t.ledger)
            .key("account", s(order["account"].as_str().unwrap()))
            .update_expression("ADD #b :a")
            .expression_attribute_names("#b", "balance")
            .expression_attribute_values(":a", AttributeValue::N(order["amount"].to_string()))
            .build()
            .unwrap();
        let marker = match mode {
            IdempotencyMode::Lease => {
                // The same attributes as the toolkit's record, and the old item back on a
                // refusal (what a duplicate needs to be answered without a second read).
                let taken = client
                    .put_item()
                    .table_name(&t.idempotency)
                    .item("id", s(&id))
                    .item("status", s("INPROGRESS"))
                    .item("expiration", AttributeValue::N("1795306000".into()))
                    .item(
                        "in_progress_expiration",
                        AttributeValue::N("1795302060000".into()),
                    )
                    .item("lease_owner", s("00000000-0000-4000-8000-000000000000"))
                    .item("validation", s(&format!("v2:{}", "0".repeat(64))))
                    .condition_expression(RAW_TAKEOVER)
                    .set_expression_attribute_names(Some(raw_takeover_names()))
                    .set_expression_attribute_values(Some(raw_takeover_values()))
                    .return_values_on_condition_check_failure(
                        aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure::AllOld,
                    )
                    .send()
                    .await;
                if taken.is_err() {
                    return; // a duplicate: one refused call
                }
                TransactWriteItem::builder()
                    .update(
                        Update::builder()
                            .table_name(&t.idempotency)
                            .key("id", s(&id))
                            // The toolkit's final state: status, data, expiry, lease removed.
                            .update_expression("SET #s = :c, #d = :d, #e = :e REMOVE #i")
                            .expression_attribute_names("#d", "data")
                            .expression_attribute_names("#e", "expiration")
                            .expression_attribute_names("#i", "in_progress_expiration")
                            .expression_attribute_values(
                                ":e",
                                AttributeValue::N("1795306000".into()),
                            )
                            .expression_attribute_values(
                                ":d",
                                s(r#"{"account":"acct-0","amount":-3}"#),
                            )
                            .condition_expression("#s = :p AND #o = :o")
                            .expression_attribute_names("#o", "lease_owner")
                            .expression_attribute_values(
                                ":o",
                                s("00000000-0000-4000-8000-000000000000"),
                            )
                            .expression_attribute_names("#s", "status")
                            .expression_attribute_values(":c", s("COMPLETED"))
                            .expression_attribute_values(":p", s("INPROGRESS"))
                            .return_values_on_condition_check_failure(
                                aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure::AllOld,
                            )
                            .build()
                            .unwrap(),
                    )
                    .build()
            }
            _ => TransactWriteItem::builder()
                .put(
                    Put::builder()
                        .table_name(&t.idempotency)
                        .item("id", s(&id))
                        .item("status", s("COMPLETED"))
                        .item("expiration", AttributeValue::N("1795306000".into()))
                        .item("lease_owner", s("00000000-0000-4000-8000-000000000000"))
                        .item("validation", s(&format!("v2:{}", "0".repeat(64))))
                        .item("data", s(r#"{"account":"acct-0","amount":-3}"#))
                        .condition_expression(RAW_TAKEOVER)
                        .set_expression_attribute_names(Some(raw_takeover_names()))
                        .set_expression_attribute_values(Some(raw_takeover_values()))
                        .return_values_on_condition_check_failure(
                            aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure::AllOld,
                        )
                        .build()
                        .unwrap(),
                )
                .build(),
        };
        // A token per attempt, as the toolkit sends (its owner token is new for each
        // delivery), so a retried commit is recognised; reusing the priming run's token
        // would turn a duplicate into DynamoDB's cheap replay of that earlier request.
        let token = uuid::Uuid::new_v4().simple().to_string();
        let _ = client
            .transact_write_items()
            .client_request_token(token)
            .transact_items(marker)
            .transact_items(TransactWriteItem::builder().update(ledger).build())
            .send()
            .await;
    }))
    .buffered(10)
    .collect::<Vec<_>>()
    .await;
}

/// The Powertools worker process.
struct Python {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Python {
    fn start(python: &str, t: &Tables) -> Python {
        let mut child = tokio::process::Command::new(python)
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/scripts/bench_powertools.py"
            ))
            .arg("worker")
            .env("IDEMPOTENCY_TABLE", &t.idempotency)
            .env("LEDGER_TABLE", &t.ledger)
            .env("AWS_LAMBDA_FUNCTION_NAME", "order-consumer-python")
            .env("POWERTOOLS_SERVICE_NAME", "bench")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start the Powertools worker");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        Python {
            child,
            stdin,
            stdout,
        }
    }

    async fn run(&mut self, event: &SqsEvent) -> Value {
        let line = json!({ "event": event }).to_string() + "\n";
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        let answer = self
            .stdout
            .next_line()
            .await
            .unwrap()
            .expect("worker answered");
        serde_json::from_str(&answer).unwrap()
    }
}

fn json_line(scenario: &Scenario, implementation: &str, mode: &str, sample: &Sample) -> Value {
    json!({
        "scenario": scenario.name,
        "implementation": implementation,
        "mode": mode,
        "batches": sample.latencies_ms.len(),
        "batch_size": scenario.batch_size,
        "median_ms": round(sample.percentile(50.0)),
        "p99_ms": round(sample.percentile(99.0)),
        "records_per_sec": round(sample.records_per_sec()),
        "calls_per_record": round(sample.per_record(sample.calls as f64)),
        "wcu_per_record": round(sample.per_record(sample.wcu)),
    })
}

fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

async fn run_scenario(
    scenario: &Scenario,
    mode: IdempotencyMode,
    batches: usize,
    python: Option<&str>,
) -> Vec<Value> {
    let mode_name = match mode {
        IdempotencyMode::Lease => "lease",
        _ => "optimistic",
    };
    let (ours_counter, raw_counter, setup) = (
        CallCounter::default(),
        CallCounter::default(),
        CallCounter::default(),
    );
    let ours_client = counted_client(&ours_counter).await.expect("DynamoDB Local");
    let raw_client = counted_client(&raw_counter).await.unwrap();
    let setup_client = counted_client(&setup).await.unwrap();
    let (ours_t, raw_t, py_t) = (
        tables(&setup_client).await,
        tables(&setup_client).await,
        tables(&setup_client).await,
    );
    let ours = toolkit(ours_client, &ours_t, mode, scenario.cache);
    // Powertools has one mode and no cache: measured once, next to the optimistic runs.
    let with_python = python.filter(|_| mode == IdempotencyMode::Optimistic && !scenario.cache);
    let mut py = with_python.map(|p| Python::start(p, &py_t));
    let raw_too = !scenario.cache;

    // Prime the duplicates (untimed), then alternate the implementations batch by batch.
    let plan: Vec<(SqsEvent, SqsEvent)> = (0..batches)
        .map(|b| batch(scenario, mode_name, b))
        .collect();
    for (prime, _) in plan.iter().filter(|(p, _)| !p.records.is_empty()) {
        ours.process(LambdaEvent::new(prime.clone(), context()))
            .await;
        if raw_too {
            raw_batch(&raw_client, &raw_t, mode, prime).await;
        }
        if let Some(py) = py.as_mut() {
            py.run(prime).await;
        }
    }
    ours_counter.reset();
    raw_counter.reset();
    let (mut s_ours, mut s_raw, mut s_py) =
        (Sample::default(), Sample::default(), Sample::default());
    for (_, timed) in &plan {
        let started = Instant::now();
        let report = ours
            .process(LambdaEvent::new(timed.clone(), context()))
            .await;
        let took = started.elapsed();
        assert!(report.response.batch_item_failures.is_empty(), "{report:?}");
        s_ours.latencies_ms.push(took.as_secs_f64() * 1000.0);
        s_ours.busy += took;
        s_ours.records += timed.records.len();

        if raw_too {
            let started = Instant::now();
            raw_batch(&raw_client, &raw_t, mode, timed).await;
            let took = started.elapsed();
            s_raw.latencies_ms.push(took.as_secs_f64() * 1000.0);
            s_raw.busy += took;
            s_raw.records += timed.records.len();
        }
        if let Some(py) = py.as_mut() {
            let answer = py.run(timed).await;
            assert_eq!(answer["failures"], 0, "{answer}");
            let ms = answer["ms"].as_f64().unwrap();
            s_py.latencies_ms.push(ms);
            s_py.busy += Duration::from_secs_f64(ms / 1000.0);
            s_py.records += timed.records.len();
            s_py.calls += answer["calls"].as_u64().unwrap() as usize;
            s_py.wcu += answer["wcu"].as_f64().unwrap();
        }
    }
    s_ours.calls = ours_counter.total();
    s_ours.wcu = ours_counter.capacity_units();
    s_raw.calls = raw_counter.total();
    s_raw.wcu = raw_counter.capacity_units();
    let mut lines = vec![json_line(
        scenario,
        "lambda-idempotency",
        mode_name,
        &s_ours,
    )];
    if raw_too {
        lines.push(json_line(scenario, "raw-dynamodb", mode_name, &s_raw));
    }
    if let Some(mut py) = py {
        lines.push(json_line(scenario, "powertools-python", "lease", &s_py));
        let _ = py.child.kill().await;
    }
    lines
}

/// Cold start (process start to the first poll for an event) and peak resident memory
/// (after three batches of 10) of a function process under the Runtime API emulator.
async fn cold_start(command: &[String], t: &Tables) -> (f64, u64) {
    let api = runtime_api::RuntimeApi::start().await;
    let started = Instant::now();
    let mut child = tokio::process::Command::new(&command[0])
        .args(&command[1..])
        .env("AWS_LAMBDA_RUNTIME_API", api.address())
        .env("AWS_LAMBDA_FUNCTION_NAME", "order-consumer")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "bench")
        .env("AWS_LAMBDA_LOG_GROUP_NAME", "bench")
        .env("IDEMPOTENCY_TABLE", &t.idempotency)
        .env("LEDGER_TABLE", &t.ledger)
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start the function");
    let ready = loop {
        if let Some(at) = api.first_poll_at().await {
            break at;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the function never polled"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    };
    let cold_ms = ready.duration_since(started).as_secs_f64() * 1000.0;
    for b in 0..3 {
        let mut event = SqsEvent::default();
        event.records = (0..10)
            .map(|i| order_message("cold", &format!("{}", child.id().unwrap()), b, i))
            .collect();
        let reply = api
            .invoke(
                &serde_json::to_value(&event).unwrap(),
                Duration::from_secs(30),
                Duration::from_secs(60),
            )
            .await;
        assert!(
            matches!(reply, Some(runtime_api::Reply::Response(_))),
            "{reply:?}"
        );
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id().unwrap())).unwrap();
    let peak_kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let _ = child.kill().await;
    (cold_ms, peak_kb)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
            })
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines().next().map(|l| {
                l.split_whitespace()
                    .nth(1)
                    .unwrap_or("0")
                    .parse::<u64>()
                    .unwrap_or(0)
                    / 1024
                    / 1024
            })
        })
        .unwrap_or(0);
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    format!("{cores} cores ({cpu}), {mem} GiB, Linux; DynamoDB Local 3.3.1 on 127.0.0.1 (Java 17); release build")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let batches: usize = std::env::var("BENCH_BATCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let python = std::env::var("BENCH_PYTHON").ok();
    let out = std::env::var("BENCH_OUT").unwrap_or_else(|_| "BENCHMARKS.md".into());
    let mut lines = Vec::new();
    for scenario in &SCENARIOS {
        for mode in [IdempotencyMode::Optimistic, IdempotencyMode::Lease] {
            let n = if scenario.batch_size >= 100 {
                batches / 4
            } else {
                batches
            }
            .max(5);
            for line in run_scenario(scenario, mode, n, python.as_deref()).await {
                println!("{line}");
                lines.push(line);
            }
        }
    }
    // Cold start and memory: order-consumer against the Python equivalent, alternating.
    let mut cold = HashMap::<&str, (Vec<f64>, Vec<u64>)>::new();
    if let (Ok(binary), Some(python)) = (std::env::var("BENCH_ORDER_CONSUMER"), python.as_deref()) {
        let setup = CallCounter::default();
        let client = counted_client(&setup).await.unwrap();
        let rust_cmd = vec![binary];
        let py_cmd = vec![
            python.to_string(),
            concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/bench_powertools.py").to_string(),
            "runtime".to_string(),
        ];
        for _ in 0..5 {
            for (name, command) in [
                ("order-consumer", &rust_cmd),
                ("powertools-python", &py_cmd),
            ] {
                let t = tables(&client).await;
                let (ms, kb) = cold_start(command, &t).await;
                let entry = cold.entry(name).or_default();
                entry.0.push(ms);
                entry.1.push(kb);
            }
        }
        for (name, (ms, kb)) in &cold {
            let line = json!({
                "scenario": "cold-start",
                "implementation": name,
                "runs": ms.len(),
                "cold_start_median_ms": round(median(ms.clone())),
                "peak_rss_mib": round(*kb.iter().max().unwrap() as f64 / 1024.0),
            });
            println!("{line}");
            lines.push(line);
        }
    }
    std::fs::write(&out, report(&lines, batches)).expect("write BENCHMARKS.md");
    eprintln!("wrote {out}");
}

fn find<'a>(
    lines: &'a [Value],
    scenario: &str,
    implementation: &str,
    mode: &str,
) -> Option<&'a Value> {
    lines.iter().find(|l| {
        l["scenario"] == scenario
            && l["implementation"] == implementation
            && (mode.is_empty() || l["mode"] == mode)
    })
}

fn report(lines: &[Value], batches: usize) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# Benchmarks\n");
    let _ = writeln!(
        md,
        "Written by `scripts/bench.sh` (which runs `cargo run --release --example bench`); every figure comes from one run, \
         with the implementations alternating batch by batch on the same DynamoDB Local, so the ratios are what to read: \
         absolute numbers depend on the machine and on DynamoDB Local, which is far slower per call than DynamoDB.\n"
    );
    let _ = writeln!(md, "- Machine: {}", machine());
    let _ = writeln!(
        md,
        "- Date: {}",
        std::process::Command::new("date")
            .arg("-u")
            .arg("+%Y-%m-%d %H:%M UTC")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    );
    let _ = writeln!(md, "- Batches per scenario: {batches} (batches of 100: {}); concurrency within a batch: 10 (toolkit and raw), Powertools sequential", (batches / 4).max(5));
    let _ = writeln!(
        md,
        "- Command: `scripts/bench.sh` (settings: `BENCH_BATCHES`)\n"
    );
    let _ = writeln!(md, "## Batches\n");
    let _ = writeln!(md, "| scenario | implementation | mode | median ms | p99 ms | records/s | DynamoDB calls/record | WCU/record |");
    let _ = writeln!(md, "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |");
    for l in lines.iter().filter(|l| l["scenario"] != "cold-start") {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            l["scenario"].as_str().unwrap(),
            l["implementation"].as_str().unwrap(),
            l["mode"].as_str().unwrap(),
            l["median_ms"],
            l["p99_ms"],
            l["records_per_sec"],
            l["calls_per_record"],
            l["wcu_per_record"]
        );
    }
    let _ = writeln!(md, "\n## Ratios and targets\n");
    let _ = writeln!(md, "| target | figure | result |");
    let _ = writeln!(md, "| --- | --- | --- |");
    let num = |v: Option<&Value>, k: &str| v.and_then(|v| v[k].as_f64());
    for scenario in ["fresh-10", "duplicates-10"] {
        let py = num(
            find(lines, scenario, "powertools-python", ""),
            "records_per_sec",
        );
        for mode in ["optimistic", "lease"] {
            if let (Some(ours), Some(py)) = (
                num(
                    find(lines, scenario, "lambda-idempotency", mode),
                    "records_per_sec",
                ),
                py,
            ) {
                let ratio = ours / py;
                let _ = writeln!(md, "| {scenario}: throughput at least 10x Powertools ({mode}) | {ratio:.1}x | {} |", if ratio >= 10.0 { "met" } else { "missed" });
            }
        }
    }
    for scenario in ["fresh-10", "duplicates-10", "mixed-10", "fresh-100"] {
        for mode in ["optimistic", "lease"] {
            if let (Some(ours), Some(raw)) = (
                num(
                    find(lines, scenario, "lambda-idempotency", mode),
                    "median_ms",
                ),
                num(find(lines, scenario, "raw-dynamodb", mode), "median_ms"),
            ) {
                let over = (ours / raw - 1.0) * 100.0;
                let _ = writeln!(md, "| {scenario}: at most 10% latency over the raw limit ({mode}) | {over:+.1}% (median {ours} ms vs {raw} ms) | {} |", if over <= 10.0 { "met" } else { "missed" });
            }
        }
    }
    for (scenario, mode, limit) in [
        ("fresh-10", "optimistic", 1.0),
        ("fresh-10", "lease", 2.0),
        ("duplicates-10", "optimistic", 1.0),
        ("duplicates-10", "lease", 1.0),
        ("duplicates-10-cached", "optimistic", 0.0),
        ("duplicates-10-cached", "lease", 0.0),
    ] {
        if let Some(calls) = num(
            find(lines, scenario, "lambda-idempotency", mode),
            "calls_per_record",
        ) {
            let _ = writeln!(
                md,
                "| {scenario}: at most {limit} DynamoDB calls per record ({mode}) | {calls} | {} |",
                if calls <= limit { "met" } else { "missed" }
            );
        }
    }
    let cold = |name: &str, k: &str| {
        lines
            .iter()
            .find(|l| l["scenario"] == "cold-start" && l["implementation"] == name)
            .and_then(|l| l[k].as_f64())
    };
    if let (Some(r), Some(p)) = (
        cold("order-consumer", "cold_start_median_ms"),
        cold("powertools-python", "cold_start_median_ms"),
    ) {
        let _ = writeln!(
            md,
            "| cold start at most a tenth of Python's | {r} ms vs {p} ms ({:.1}x faster) | {} |",
            p / r,
            if r * 10.0 <= p { "met" } else { "missed" }
        );
    }
    if let (Some(r), Some(p)) = (
        cold("order-consumer", "peak_rss_mib"),
        cold("powertools-python", "peak_rss_mib"),
    ) {
        let _ = writeln!(
            md,
            "| peak memory at most a quarter of Python's | {r} MiB vs {p} MiB ({:.1}x less) | {} |",
            p / r,
            if r * 4.0 <= p { "met" } else { "missed" }
        );
    }
    let _ = writeln!(md, "\n## Where a target is missed, and why\n");
    for scenario in ["fresh-10", "duplicates-10"] {
        let py = num(
            find(lines, scenario, "powertools-python", ""),
            "records_per_sec",
        );
        for mode in ["optimistic", "lease"] {
            let (ours, raw) = (
                num(
                    find(lines, scenario, "lambda-idempotency", mode),
                    "records_per_sec",
                ),
                num(
                    find(lines, scenario, "raw-dynamodb", mode),
                    "records_per_sec",
                ),
            );
            if let (Some(ours), Some(raw), Some(py)) = (ours, raw, py) {
                if ours < 10.0 * py {
                    let _ = writeln!(
                        md,
                        "- {scenario}, {mode}: {:.1}x Powertools' throughput, short of 10x by {:.1}x. The store is the ceiling here: \
                         the raw requests alone reach {:.1}x Powertools on DynamoDB Local, and the toolkit reaches {:.0}% of them. \
                         DynamoDB Local answers a call in milliseconds and does not scale with concurrency on {} cores, so it leaves \
                         little time for client-side speed to show; against DynamoDB, where calls are cheaper and parallel, the \
                         client's own cost (Python's per-record overhead, sequential records) weighs more.",
                        ours / py,
                        10.0 * py / ours,
                        raw / py,
                        100.0 * ours / raw,
                        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
                    );
                }
            }
        }
    }
    for scenario in ["fresh-10", "duplicates-10", "mixed-10", "fresh-100"] {
        for mode in ["optimistic", "lease"] {
            if let (Some(ours), Some(raw)) = (
                num(
                    find(lines, scenario, "lambda-idempotency", mode),
                    "median_ms",
                ),
                num(find(lines, scenario, "raw-dynamodb", mode), "median_ms"),
            ) {
                if ours > raw * 1.1 {
                    let _ = writeln!(
                        md,
                        "- {scenario}, {mode}: {:+.1}% over the raw limit, {:.2} ms a batch. The toolkit does per record what the raw \
                         requests skip: hashing the key and the payload, JSON for the result, the record's decoding on a refusal, \
                         and the handler itself (optimistic mode computes a duplicate before its refused commit tells it so). \
                         At a few milliseconds a batch, DynamoDB Local's jitter is of the same size: compare several runs.",
                        (ours / raw - 1.0) * 100.0,
                        ours - raw
                    );
                }
            }
        }
    }
    if let (Some(r), Some(p)) = (
        cold("order-consumer", "peak_rss_mib"),
        cold("powertools-python", "peak_rss_mib"),
    ) {
        if r * 4.0 > p {
            let _ = writeln!(
                md,
                "- Peak memory: {r} MiB against {p} MiB, {:.1}x less, short of 4x. Most of it is the AWS SDK's HTTP and TLS \
                 stack (aws-lc) and the runtime, loaded whatever the workload.",
                p / r
            );
        }
    }
    let _ = writeln!(md, "\n## Reading the figures\n");
    let _ = writeln!(md, "- *raw-dynamodb* issues exactly the requests each mode must make (optimistic: one `TransactWriteItems` per fresh record; lease: a conditional `PutItem`, then the `TransactWriteItems`; a duplicate: the one refused request), with the same attributes, the same conditions (taking over expired records and elapsed leases; the owner fence), `ALL_OLD` on refusal and a `ClientRequestToken`, at the same concurrency, with no toolkit logic. The toolkit's overhead over it is key hashing, payload hashing, JSON, and the refused request's decoding.");
    let _ = writeln!(md, "- *powertools-python* is `BatchProcessor` with `idempotent_function` (`scripts/bench_powertools.py`), on the same DynamoDB Local and events. It cannot commit the ledger write with its record, so it makes three calls per fresh record (put, the ledger update, update) and its effect is not exactly-once. It processes a batch's records one after another, as its `BatchProcessor` does.");
    let _ = writeln!(md, "- DynamoDB calls are counted by an SDK interceptor (botocore event hooks on the Python side); WCU come from `ReturnConsumedCapacity=TOTAL` as DynamoDB Local reports it. A write refused by its condition reports no capacity in its error, although real DynamoDB charges it, so the duplicate rows understate WCU for every implementation alike.");
    let _ = writeln!(md, "- In optimistic mode a duplicate is computed again and learns it is one from the refused commit (one call); in lease mode the refused conditional put answers it. With the local cache on, a warm container answers duplicates without any call.");
    let _ = writeln!(md, "- Cold start is the time from process start to the function's first request for an event on the Runtime API; peak memory is VmHWM after three batches of 10.");
    let _ = writeln!(md, "\n## JSON lines\n\n```json");
    for l in lines {
        let _ = writeln!(md, "{l}");
    }
    let _ = writeln!(md, "```");
    md
}
