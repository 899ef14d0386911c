//! One scenario run, implementations alternating batch by batch, and the cold start.

use std::process::Stdio;
use std::time::{Duration, Instant};

use aws_lambda_events::sqs::SqsEvent;
use lambda_idempotency::CommitStrategy;
use lambda_idempotency_test_support::dynamodb::{
    counted_client, counted_client_at, create_table, create_table_keyed, CallCounter,
};
use lambda_idempotency_test_support::harness::runtime_api::{Reply, RuntimeApi};
use lambda_runtime::LambdaEvent;
use order_consumer::{processor, Settings, Tables};
use serde_json::{json, Value};

use crate::python::Python;
use crate::raw::raw_batch;
use crate::scenario::{batch, context, order_message, Sample, Scenario, Timed};

/// The toolkit's name in the JSON lines and the report.
pub const OURS: &str = "lambda-idempotency";
/// The raw requests' name in the JSON lines and the report.
pub const RAW: &str = "raw-dynamodb";
/// The Powertools baseline's name in the JSON lines and the report.
pub const POWERTOOLS: &str = "powertools-python";

/// Fresh tables for one implementation.
pub async fn tables(client: &aws_sdk_dynamodb::Client) -> Tables {
    Tables {
        idempotency: create_table(client).await,
        ledger: create_table_keyed(client, "ledger", "account").await,
    }
}

/// Where one scenario runs: DynamoDB's endpoint (DynamoDB Local, or a latency proxy in
/// front of it) and the delay that endpoint adds to each request.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub endpoint: &'a str,
    pub added_ms: u64,
}

pub fn json_line(
    scenario: &Scenario,
    target: Target<'_>,
    implementation: &str,
    mode: &str,
    sample: &Sample,
) -> Value {
    json!({
        "scenario": scenario.name,
        "added_latency_ms": target.added_ms,
        "implementation": implementation,
        "mode": mode,
        "batches": sample.latencies_ms.len(),
        "batch_size": scenario.batch_size,
        "median_ms": round(sample.percentile(50.0)),
        "p99_ms": round(sample.percentile(99.0)),
        "records_per_sec": round(sample.records_per_sec()),
        "calls_per_record": round(sample.per_record(sample.calls as f64)),
        "wcu_per_record": round(sample.per_record(sample.wcu)),
        "refused_wcu_per_record": round(sample.per_record(sample.refused_wcu)),
        "rcu_per_record": round(sample.per_record(sample.rcu)),
        "client_cpu_us_per_record": round(sample.per_record(sample.cpu.as_secs_f64() * 1e6)),
        "allocations_per_record": sample.allocations.map(|n| round(sample.per_record(n as f64))),
        "operations": sample.operations,
    })
}

/// `x` to two decimals.
pub fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Runs `scenario` in `mode` over `batches` batches against `target`: one JSON line per
/// implementation.
pub async fn run_scenario(
    scenario: &Scenario,
    mode: CommitStrategy,
    batches: usize,
    python: Option<&str>,
    target: Target<'_>,
) -> Vec<Value> {
    let mode_name = match mode {
        CommitStrategy::Lease => "lease",
        _ => "optimistic",
    };
    let (ours_counter, raw_counter, setup) = (
        CallCounter::default(),
        CallCounter::default(),
        CallCounter::default(),
    );
    let ours_client = counted_client_at(target.endpoint, &ours_counter).await;
    let raw_client = counted_client_at(target.endpoint, &raw_counter).await;
    let setup_client = counted_client(&setup).await.expect("DynamoDB Local");
    let (ours_t, raw_t, py_t) = (
        tables(&setup_client).await,
        tables(&setup_client).await,
        tables(&setup_client).await,
    );
    // The toolkit as order-consumer runs it, with a larger cache when the scenario has one,
    // and the batch processor's default start margin (the context gives a minute).
    let mut settings = Settings::new(ours_t.clone(), mode);
    settings.local_cache = if scenario.cache { 4096 } else { 0 };
    settings.deadline_margin = Duration::from_secs(1);
    let ours = processor(ours_client, &settings);
    // Powertools has one design (a lease) and no cache: it runs beside each mode, its
    // batches alternating with that mode's, so that each mode's ratio to it compares
    // batches of the same minutes on DynamoDB Local (whose speed drifts between runs).
    let with_python = python.filter(|_| !scenario.cache);
    let mut py = with_python.map(|p| Python::start(p, &py_t, target.endpoint));
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
    for (b, (_, timed)) in plan.iter().enumerate() {
        // The toolkit and the raw requests take turns going first, so that neither always
        // runs right after the Python worker (cold caches) or right after the other.
        for ours_turn in [b % 2 == 0, b % 2 == 1] {
            let records = timed.records.len();
            if ours_turn {
                let event = LambdaEvent::new(timed.clone(), context());
                let timing = Timed::start();
                let report = ours.process(event).await;
                timing.finish(&mut s_ours, records, [scenario.name, OURS, mode_name]);
                assert!(report.response.batch_item_failures.is_empty(), "{report:?}");
            } else if raw_too {
                // Its own copy of the event (and context), dropped within the timing, as the
                // toolkit's is: both are handed an event and are done with it when they answer.
                // The toolkit's answer, the batch report, is dropped after its timing.
                let event = LambdaEvent::new(timed.clone(), context());
                let timing = Timed::start();
                raw_batch(&raw_client, &raw_t, mode, &event.payload).await;
                drop(event);
                timing.finish(&mut s_raw, records, [scenario.name, RAW, mode_name]);
            }
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
            s_py.refused_wcu += answer["refused_wcu"].as_f64().unwrap();
            s_py.rcu += answer["rcu"].as_f64().unwrap();
            s_py.cpu += Duration::from_secs_f64(answer["cpu_ms"].as_f64().unwrap() / 1000.0);
            let operations = answer["operations"]
                .as_array()
                .expect("the worker's operations");
            s_py.operations
                .extend(operations.iter().map(|o| o.as_str().unwrap().to_string()));
        }
    }
    s_ours.count(&ours_counter);
    s_raw.count(&raw_counter);
    let line =
        |name: &str, mode: &str, sample: &Sample| json_line(scenario, target, name, mode, sample);
    let mut lines = vec![line(OURS, mode_name, &s_ours)];
    if raw_too {
        lines.push(line(RAW, mode_name, &s_raw));
    }
    if let Some(mut py) = py {
        // Named by the mode it ran beside.
        lines.push(line(POWERTOOLS, mode_name, &s_py));
        let _ = py.child.kill().await;
    }
    lines
}

/// Cold start (process start to the first poll for an event) and peak resident memory
/// (after three batches of 10) of a function process under the Runtime API emulator.
pub async fn cold_start(command: &[String], t: &Tables) -> (f64, u64) {
    let api = RuntimeApi::start().await;
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
        assert!(matches!(reply, Some(Reply::Response(_))), "{reply:?}");
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

/// The median of `v`.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
