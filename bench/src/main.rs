//! The benchmark: the toolkit against the raw DynamoDB limit and Powertools for AWS Lambda
//! (Python), side by side in one run against DynamoDB Local. Prints one JSON line per
//! scenario and writes BENCHMARKS.md. Run it with `scripts/bench.sh` (which installs the
//! Python baseline, starts DynamoDB Local and builds in release mode).
//!
//! Every scenario runs on DynamoDB Local directly; the batches of 10 a new container meets
//! run again behind a loopback proxy that adds a network delay to every request
//! ([`scenario::ADDED_LATENCY_MS`]), with fewer batches as the delay grows.
//!
//! Environment: `AWS_ENDPOINT_URL_DYNAMODB` (required), `BENCH_BATCHES` (default 40),
//! `BENCH_PYTHON` (a python with aws-lambda-powertools; the Powertools baseline is skipped
//! without it), `BENCH_ORDER_CONSUMER` (the order-consumer binary, for cold start and
//! memory), `BENCH_OUT` (default BENCHMARKS.md), `BENCH_SCENARIOS` (comma-separated scenario
//! names to run, default all, `toolkit-alone` and `duplicate-layers` included: for profiling
//! one scenario; the report then lacks the others), `BENCH_ENFORCE_BUDGET=1` (exit 1, after
//! writing the report, when a budgeted scenario's allocations per record are over the
//! budget of [`report::budget_failures`] or were not counted; CI's smoke sets it),
//! `BENCH_INSTRUCTIONS` (`all`, or comma-separated scenario names: count those scenarios'
//! instructions per record under callgrind, [`instructions`]; needs valgrind).
//!
//! The toolkit runs as order-consumer runs it: its processor, from `order_consumer`.

mod allocations;
mod alone;
mod instructions;
mod latency;
mod layers;
mod python;
mod raw;
mod report;
mod run;
mod scenario;
mod sequenced;

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use lambda_idempotency::CommitStrategy;
use lambda_idempotency_test_support::dynamodb::{counted_client, CallCounter};
use serde_json::{json, Value};

use latency::LatencyProxy;
use report::{report, Took};
use run::{cold_start, median, round, run_scenario, tables, Target};
use scenario::{batches_at, runs_at, ADDED_LATENCY_MS, SCENARIOS};

/// Every allocation of the bench process counted ([`allocations`]).
#[global_allocator]
static ALLOCATOR: allocations::Counting = allocations::Counting;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let started = std::time::Instant::now();
    let batches: usize = std::env::var("BENCH_BATCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let python = std::env::var("BENCH_PYTHON").ok();
    let out = std::env::var("BENCH_OUT").unwrap_or_else(|_| "BENCHMARKS.md".into());
    let local = std::env::var("AWS_ENDPOINT_URL_DYNAMODB").expect("AWS_ENDPOINT_URL_DYNAMODB");
    let only = std::env::var("BENCH_SCENARIOS").ok();
    let chosen = |name: &str| {
        only.as_deref()
            .is_none_or(|o| o.split(',').any(|n| n.trim() == name))
    };
    if std::env::var_os(instructions::LABELS_ENV).is_some() {
        // The child under callgrind ([`instructions::measure`]): the chosen scenarios at
        // 0 ms, without a warm-up (DynamoDB Local's speed does not change the count), nothing
        // else.
        for scenario in SCENARIOS.iter().filter(|s| chosen(s.name)) {
            let n = batches_at(batches, scenario, 0);
            let target = Target {
                endpoint: &local,
                added_ms: 0,
            };
            run_all_modes(scenario, n, None, target).await;
        }
        instructions::write_labels();
        return;
    }
    // Warmed up only when a batch scenario runs (not for `toolkit-alone` alone, say).
    let warmed = if SCENARIOS.iter().any(|s| chosen(s.name)) {
        operations_sent(&warm_up(&local, batches, python.as_deref()).await)
    } else {
        BTreeSet::new()
    };
    let mut lines = Vec::new();
    for added_ms in ADDED_LATENCY_MS {
        // Every implementation reaches DynamoDB Local through the same proxy.
        let proxy = match added_ms {
            0 => None,
            ms => Some(LatencyProxy::start(&local, Duration::from_millis(ms)).await),
        };
        let target = Target {
            endpoint: proxy.as_ref().map_or(local.as_str(), |p| p.endpoint()),
            added_ms,
        };
        for scenario in SCENARIOS
            .iter()
            .filter(|s| runs_at(s, added_ms) && chosen(s.name))
        {
            let n = batches_at(batches, scenario, added_ms);
            for line in run_all_modes(scenario, n, python.as_deref(), target).await {
                assert!(line["operations"].is_array(), "{line}: no operations");
                let cold = not_warmed(&line, &warmed);
                assert!(
                    cold.is_empty(),
                    "{line}: its timed batches sent {cold:?}, which the warm-up did not, so \
                     DynamoDB Local compiled them during the timed batches"
                );
                println!("{line}");
                lines.push(line);
            }
        }
    }
    // Instructions per record, counted under callgrind (a child process).
    if let Some(which) = std::env::var("BENCH_INSTRUCTIONS")
        .ok()
        .filter(|w| !w.is_empty())
    {
        let scenarios = instructions::scenarios(&which, chosen);
        let counted = instructions::measure(&scenarios, instructions::BATCHES.min(batches)).await;
        for line in &counted {
            println!("{line}");
        }
        instructions::merge(&mut lines, &counted);
    }
    // The toolkit's own work, without I/O.
    if chosen("toolkit-alone") {
        for line in alone::measure(batches * 50).await {
            println!("{line}");
            lines.push(line);
        }
    }
    // A redelivered duplicate's client CPU on DynamoDB Local, layer by layer.
    if chosen("duplicate-layers") {
        for line in layers::measure(&local, batches * 5).await {
            println!("{line}");
            lines.push(line);
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
            python::SCRIPT.to_string(),
            "runtime".to_string(),
        ];
        for _ in 0..5 {
            for (name, command) in [("order-consumer", &rust_cmd), (run::POWERTOOLS, &py_cmd)] {
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
    let took = Took {
        build_secs: std::env::var("BENCH_BUILD_SECS")
            .ok()
            .and_then(|v| v.parse().ok()),
        run_secs: started.elapsed().as_secs(),
    };
    std::fs::write(&out, report(&lines, batches, took)).expect("write BENCHMARKS.md");
    eprintln!("wrote {out}");
    if std::env::var("BENCH_ENFORCE_BUDGET").as_deref() == Ok("1") {
        let failures = report::budget_failures(&lines);
        for failure in &failures {
            eprintln!("{failure}");
        }
        if !failures.is_empty() {
            std::process::exit(1);
        }
    }
}

/// `scenario` over `batches` batches against `target` in each mode it runs in: both modes,
/// and sequence-guarded for the batches of 10 whose records are all fresh or all
/// duplicates, without a cache.
async fn run_all_modes(
    scenario: &scenario::Scenario,
    batches: usize,
    python: Option<&str>,
    target: Target<'_>,
) -> Vec<serde_json::Value> {
    let mut lines = Vec::new();
    for mode in [CommitStrategy::Optimistic, CommitStrategy::Lease] {
        lines.extend(run_scenario(scenario, mode, batches, python, target).await);
    }
    if scenario.batch_size == 10 && !scenario.cache && scenario.duplicates != 5 {
        lines.extend(sequenced::run_sequenced(scenario, batches, target).await);
    }
    lines
}

/// Untimed batches of every scenario of 10 without a cache, in each mode it runs in, with
/// the Powertools worker beside them, so that DynamoDB Local's JIT has compiled the hot paths
/// of the requests the timed scenarios make before the first of them: the first batches of
/// a fresh JVM are several times slower, and a request first made in a timed scenario was
/// slower there than in the next (the pre-check's `BatchGetItem` in duplicates-10's
/// optimistic run, before its lease run). Between 5 and 20 batches each, fewer when the run
/// has fewer; their JSON lines.
async fn warm_up(endpoint: &str, batches: usize, python: Option<&str>) -> Vec<Value> {
    let target = Target {
        endpoint,
        added_ms: 0,
    };
    let mut lines = Vec::new();
    for scenario in SCENARIOS.iter().filter(|s| s.batch_size == 10 && !s.cache) {
        let warm = scenario::Scenario {
            name: "warm-up",
            ..*scenario
        };
        lines.extend(run_all_modes(&warm, batches.clamp(5, 20), python, target).await);
    }
    lines
}

/// The (implementation, operation) pairs that the batches of `lines` sent.
fn operations_sent(lines: &[Value]) -> BTreeSet<(String, String)> {
    lines
        .iter()
        .flat_map(|l| {
            let implementation = l["implementation"].as_str().unwrap_or_default();
            l["operations"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(move |o| (implementation.to_string(), o.to_string()))
        })
        .collect()
}

/// The operations that `line`'s batches sent and its implementation did not send in
/// `warmed`.
fn not_warmed(line: &Value, warmed: &BTreeSet<(String, String)>) -> Vec<String> {
    operations_sent(std::slice::from_ref(line))
        .into_iter()
        .filter(|sent| !warmed.contains(sent))
        .map(|(_, operation)| operation)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_operation_the_warm_up_did_not_send_is_named() {
        let line = |implementation: &str, operations: &[&str]| json!({"implementation": implementation, "operations": operations});
        // The warm-up of fresh batches alone: writes, no pre-check.
        let warmed = operations_sent(&[
            line("lambda-idempotency", &["PutItem", "TransactWriteItems"]),
            line("powertools-python", &["PutItem", "UpdateItem"]),
        ]);
        let duplicates = line("lambda-idempotency", &["BatchGetItem", "PutItem"]);
        assert_eq!(not_warmed(&duplicates, &warmed), ["BatchGetItem"]);
        // Each implementation's own warm-up counts, not another's.
        let theirs = line("powertools-python", &["TransactWriteItems"]);
        assert_eq!(not_warmed(&theirs, &warmed), ["TransactWriteItems"]);
        let warm = line("lambda-idempotency", &["TransactWriteItems"]);
        assert!(not_warmed(&warm, &warmed).is_empty());
        // A scenario's line lists its sample's operations.
        let sample = scenario::Sample {
            operations: BTreeSet::from(["BatchGetItem".to_string()]),
            ..Default::default()
        };
        let target = run::Target {
            endpoint: "",
            added_ms: 0,
        };
        let line = run::json_line(&SCENARIOS[1], target, run::OURS, "optimistic", &sample);
        assert_eq!(line["operations"], json!(["BatchGetItem"]));
        assert_eq!(not_warmed(&line, &warmed), ["BatchGetItem"]);
    }
}
