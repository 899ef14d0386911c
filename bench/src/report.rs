//! BENCHMARKS.md, from the run's JSON lines.

use std::fmt::Write as _;

use serde_json::Value;

use crate::scenario::{batches_at, REALISTIC_MS, ROUND_TRIP_PROBE_MS, SCENARIOS};

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

/// The line of `scenario` at `added_ms` for `implementation` (in `mode`, unless empty).
fn find<'a>(
    lines: &'a [Value],
    scenario: &str,
    added_ms: u64,
    implementation: &str,
    mode: &str,
) -> Option<&'a Value> {
    lines.iter().find(|l| {
        l["scenario"] == scenario
            && l["added_latency_ms"].as_u64() == Some(added_ms)
            && l["implementation"] == implementation
            && (mode.is_empty() || l["mode"] == mode)
    })
}

fn num(line: Option<&Value>, key: &str) -> Option<f64> {
    line.and_then(|l| l[key].as_f64())
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "missed"
    }
}

const MODES: [&str; 2] = ["optimistic", "lease"];
const IMPLEMENTATIONS: [&str; 3] = ["lambda-idempotency", "raw-dynamodb", "powertools-python"];

/// Round trips on the critical path of one batch: the batch time the larger delay added
/// over the realistic one, per millisecond of difference (both runs go through the proxy,
/// after DynamoDB Local has warmed up).
fn round_trips(lines: &[Value], scenario: &str, implementation: &str, mode: &str) -> Option<f64> {
    let at = |ms| num(find(lines, scenario, ms, implementation, mode), "median_ms");
    Some(
        (at(ROUND_TRIP_PROBE_MS)? - at(REALISTIC_MS)?)
            / (ROUND_TRIP_PROBE_MS - REALISTIC_MS) as f64,
    )
}

/// Powertools' throughput over the toolkit's in `mode` (`None` when either is missing).
fn over_powertools(lines: &[Value], scenario: &str, added_ms: u64, mode: &str) -> Option<f64> {
    let rate = |implementation, mode| {
        num(
            find(lines, scenario, added_ms, implementation, mode),
            "records_per_sec",
        )
    };
    Some(rate("lambda-idempotency", mode)? / rate("powertools-python", "")?)
}

/// `secs` as minutes and seconds.
fn minutes(secs: u64) -> String {
    format!("{} min {} s", secs / 60, secs % 60)
}

/// How long a run took: the release build before it (measured by `scripts/bench.sh`, absent
/// when the bench runs alone) and the measurements themselves.
#[derive(Debug, Clone, Copy)]
pub struct Took {
    /// The build's seconds (`BENCH_BUILD_SECS`).
    pub build_secs: Option<u64>,
    /// The bench's own seconds, warm-up to report.
    pub run_secs: u64,
}

/// The Markdown report of `lines`, a run of `batches` batches per scenario that took `took`.
pub fn report(lines: &[Value], batches: usize, took: Took) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# Benchmarks\n");
    let _ = writeln!(
        md,
        "Written by `scripts/bench.sh` (which runs the `bench` crate in release mode); every figure comes from one run, \
         with the implementations alternating batch by batch on the same DynamoDB Local, so the ratios are what to read: \
         absolute numbers depend on the machine and on DynamoDB Local. The batches of 10 run again behind a loopback proxy \
         that delays every request by a fixed time, for every implementation alike: {REALISTIC_MS} ms, a realistic in-region \
         figure (AWS documents DynamoDB as answering in single-digit milliseconds; 8 ms is the upper end, nearer a \
         `TransactWriteItems` than a `GetItem`), and {ROUND_TRIP_PROBE_MS} ms, from which the round trips on a batch's critical \
         path follow: (median at {ROUND_TRIP_PROBE_MS} ms - median at {REALISTIC_MS} ms) / ({ROUND_TRIP_PROBE_MS} - {REALISTIC_MS}) ms. \
         DynamoDB Local is warmed up (JIT) with untimed batches before the first scenario.\n"
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
    let of = |name: &str, added_ms: u64| {
        SCENARIOS
            .iter()
            .find(|s| s.name == name)
            .map_or(0, |s| batches_at(batches, s, added_ms))
    };
    let _ = writeln!(md, "- Batches per scenario (`BENCH_BATCHES={batches}`): {} at 0 ms ({} with batches of 100; {} of duplicates-10, redelivered duplicates without a cache, whose batches of a few milliseconds are the most sensitive to a pause of DynamoDB Local's JVM), {} at {REALISTIC_MS} ms, {} at {ROUND_TRIP_PROBE_MS} ms; concurrency within a batch: 10 (toolkit and raw), Powertools sequential", of("fresh-10", 0), of("fresh-100", 0), of("duplicates-10", 0), of("fresh-10", REALISTIC_MS), of("fresh-10", ROUND_TRIP_PROBE_MS));
    let _ = writeln!(
        md,
        "- Command: `scripts/bench.sh` (settings: `BENCH_BATCHES`)"
    );
    let build = took.build_secs.map_or_else(
        || {
            "not measured (`BENCH_BUILD_SECS` unset: the bench ran without `scripts/bench.sh`)"
                .to_string()
        },
        minutes,
    );
    let _ = writeln!(
        md,
        "- Duration: build {build}, measurements {}\n",
        minutes(took.run_secs)
    );
    let _ = writeln!(md, "## Batches\n");
    let _ = writeln!(md, "| scenario | added ms | implementation | mode | median ms | p99 ms | records/s | calls/record | WCU/record | refused-write WCU/record | RCU/record | client CPU µs/record |");
    let _ = writeln!(
        md,
        "| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for l in lines
        .iter()
        .filter(|l| l["scenario"] != "cold-start" && l["scenario"] != "toolkit-alone")
    {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            l["scenario"].as_str().unwrap(),
            l["added_latency_ms"],
            l["implementation"].as_str().unwrap(),
            l["mode"].as_str().unwrap(),
            l["median_ms"],
            l["p99_ms"],
            l["records_per_sec"],
            l["calls_per_record"],
            l["wcu_per_record"],
            l["refused_wcu_per_record"],
            l["rcu_per_record"],
            l["client_cpu_us_per_record"]
        );
    }
    let _ = writeln!(md, "\n## Round trips on the critical path per batch\n");
    let _ = writeln!(md, "| scenario | implementation | mode | round trips |");
    let _ = writeln!(md, "| --- | --- | --- | ---: |");
    for scenario in ["fresh-10", "duplicates-10", "retries-10", "mixed-10"] {
        for implementation in IMPLEMENTATIONS {
            for mode in ["optimistic", "lease", "sequenced"] {
                let mode = if implementation == "powertools-python" {
                    "lease"
                } else {
                    mode
                };
                if let Some(trips) = round_trips(lines, scenario, implementation, mode) {
                    let _ = writeln!(
                        md,
                        "| {scenario} | {implementation} | {mode} | {trips:.1} |"
                    );
                }
                if implementation == "powertools-python" {
                    break;
                }
            }
        }
    }
    alone(&mut md, lines);
    targets(&mut md, lines);
    let _ = writeln!(md, "\n## Reading the figures\n");
    let _ = writeln!(md, "- *raw-dynamodb* issues exactly the requests each mode must make (optimistic: one `TransactWriteItems` per fresh record; lease: a conditional `PutItem`, then the `TransactWriteItems`; a duplicate SQS marks as redelivered: its share of one strongly consistent `BatchGetItem`, the pre-check; an unmarked duplicate: the one refused request), with the same attributes, the same conditions (taking over expired records and elapsed leases; the owner fence), `ALL_OLD` on refusal and a `ClientRequestToken`, at the same concurrency, with no toolkit logic. The toolkit's overhead over it is key hashing, payload hashing, JSON, and decoding.");
    let _ = writeln!(md, "- *powertools-python* is `BatchProcessor` with `idempotent_function` (`scripts/bench_powertools.py`), on the same DynamoDB Local and events. It cannot commit the ledger write with its record, so it makes three calls per fresh record (put, the ledger update, update) and its effect is not exactly-once. It processes a batch's records one after another, as its `BatchProcessor` does.");
    let _ = writeln!(md, "- *duplicates-10*: every record completed before and redelivered by SQS (`ApproximateReceiveCount` 2), to a container that never saw it (no local cache). *retries-10*: the same duplicates unmarked (a producer's retries, each a new message), which the default pre-check does not look up. *mixed-10*: five redelivered duplicates and five first deliveries.");
    let _ = writeln!(md, "- Calls are counted by an SDK interceptor (botocore event hooks on the Python side). WCU and RCU come from `ReturnConsumedCapacity=TOTAL` as DynamoDB Local reports them. A write refused by its condition reports no capacity, although DynamoDB charges it: the refused-write column counts it as DynamoDB would for items up to 1 KB (1 unit per refused item write, 2 per item of a refused transaction). An estimate, not a report.");
    let _ = writeln!(md, "- Without the pre-check, in optimistic mode a duplicate is computed again and learns it is one from the refused commit; in lease mode the refused conditional put answers it. With the local cache on, a warm container answers duplicates without any call.");
    let _ = writeln!(md, "- *sequenced* is the sequence-guarded (natural) mode: each order is the first event of its own entity (a ledger item keyed by its `eventId`), so a fresh order is one conditional `UpdateItem` on the entity and no idempotency record is written; a redelivered duplicate is one consistent `GetItem` of the entity; an unmarked one (retries-10) runs the handler and its write is refused. Its raw limit makes the same calls. Powertools has no such mode.");
    let _ = writeln!(md, "- Client CPU is the CPU time the client process spent during its timed batches (`CLOCK_PROCESS_CPUTIME_ID` for the bench process, which runs the toolkit and the raw requests in turn; `time.process_time()` in the Python worker), per record. The raw requests' figure is the SDK's own cost (serialization, signing, HTTP, TLS-free loopback); the toolkit's adds key and payload hashing, JSON, and its decisions.");
    let _ = writeln!(md, "- Cold start is the time from process start to the function's first request for an event on the Runtime API; peak memory is VmHWM after three batches of 10.");
    let _ = writeln!(md, "\n## JSON lines\n\n```json");
    for l in lines {
        let _ = writeln!(md, "{l}");
    }
    let _ = writeln!(md, "```");
    md
}

/// The toolkit's own work per record, without I/O.
fn alone(md: &mut String, lines: &[Value]) {
    let alone: Vec<&Value> = lines
        .iter()
        .filter(|l| l["scenario"] == "toolkit-alone")
        .collect();
    if alone.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "\n## The toolkit's own work per record (in-memory store, no I/O)\n"
    );
    let _ = writeln!(md, "The order-consumer's key and payload hash alone, and whole records through the batch processor on the embedded store (its own in-memory work included: for a fresh record, evaluating the ledger write's expressions), in this process, with no call to make: the part of the client CPU above that is the toolkit's rather than the SDK's.\n");
    let _ = writeln!(md, "| work | mode | CPU µs/record |");
    let _ = writeln!(md, "| --- | --- | ---: |");
    for l in alone {
        let _ = writeln!(
            md,
            "| {} | {} | {} |",
            l["what"].as_str().unwrap_or(""),
            l["mode"].as_str().unwrap_or(""),
            l["cpu_us_per_record"]
        );
    }
}

/// The toolkit's own CPU per record for `what` in `mode`, from the in-memory measurement.
fn alone_us(lines: &[Value], what: &str, mode: &str) -> Option<f64> {
    lines
        .iter()
        .find(|l| l["scenario"] == "toolkit-alone" && l["what"] == what && l["mode"] == mode)
        .and_then(|l| l["cpu_us_per_record"].as_f64())
}

/// What the toolkit does in `scenario` that the raw requests do not, with its measured cost
/// without I/O where the bench has one.
fn own_work(lines: &[Value], scenario: &str, mode: &str) -> String {
    let key = alone_us(lines, "key and payload hash", "-");
    // Sequence-guarded mode reads and writes the entity itself, one call per record: only
    // the common part applies.
    if mode == "sequenced" {
        return String::new();
    }
    if scenario.starts_with("duplicates") {
        let measured = match (key, alone_us(lines, "redelivered duplicate, pre-checked and replayed", mode)) {
            (Some(key), Some(duplicate)) => format!(
                " Measured without I/O (the section above), the key and payload hash alone take {key} µs a record and a \
                 whole pre-checked duplicate {duplicate} µs."
            ),
            _ => String::new(),
        };
        return format!(
            " Here the calls are cheapest (one shared `BatchGetItem` for ten records), so that work is the larger share.{measured}"
        );
    }
    let key_only = key.map_or_else(String::new, |key| {
        format!(" Measured without I/O, the key and payload hash take {key} µs a record.")
    });
    if scenario.starts_with("retries") && mode == "lease" {
        // An unmarked duplicate in lease mode is answered by its refused `PutItem`: no commit.
        return format!(
            " Each unmarked duplicate's refused `PutItem` comes back with the stored record, which the toolkit decodes \
             and replays.{key_only}"
        );
    }
    let measured = match (key, alone_us(lines, "fresh record, run and committed", mode)) {
        (Some(key), Some(fresh)) => format!(
            " Measured without I/O, the key and payload hash take {key} µs a record, and a whole fresh record on the \
             in-memory store {fresh} µs (its own evaluation of the write included)."
        ),
        _ => key_only,
    };
    format!(
        " Each commit also carries a client request token derived from the whole request (SHA-256, so that a resent \
         commit is recognised), where the raw requests send a random one.{measured}"
    )
}

/// The targets, each met or missed with its figure, and why where missed.
fn targets(md: &mut String, lines: &[Value]) {
    let _ = writeln!(md, "\n## Ratios and targets\n");
    let _ = writeln!(md, "| target | figure | result |");
    let _ = writeln!(md, "| --- | --- | --- |");
    let mut missed = Vec::new();
    let mut why: Vec<String> = Vec::new();
    let py_trips = round_trips(lines, "fresh-10", "powertools-python", "lease");
    for (mode, limit) in [("optimistic", 1.0), ("lease", 2.0)] {
        if let Some(trips) = round_trips(lines, "fresh-10", "lambda-idempotency", mode) {
            let py = py_trips.map_or("-".into(), |p| format!("{p:.1}"));
            let _ = writeln!(md, "| fresh-10: {limit} critical-path round trips per batch ({mode}) | {trips:.1} (Powertools: {py}) | {} |", verdict(trips.round() <= limit));
        }
    }
    for (scenario, limit) in [
        ("fresh-10", 1.0),
        ("duplicates-10", 0.0),
        ("retries-10", 0.0),
    ] {
        if let Some(l) = find(lines, scenario, 0, "lambda-idempotency", "sequenced") {
            let calls = l["calls_per_record"].as_f64().unwrap_or(f64::NAN);
            let writes = l["wcu_per_record"].as_f64().unwrap_or(f64::NAN)
                + l["refused_wcu_per_record"].as_f64().unwrap_or(f64::NAN);
            let _ = writeln!(md, "| {scenario}, sequence-guarded: at most 1 call and {limit} write units per record | {calls:.1} calls, {writes:.1} WCU per record | {} |", verdict(calls <= 1.0 && writes <= limit));
        }
    }
    for mode in MODES {
        if let Some(l) = find(lines, "duplicates-10", 0, "lambda-idempotency", mode) {
            let calls = l["calls_per_record"].as_f64().unwrap_or(f64::NAN) * 10.0;
            let writes = l["wcu_per_record"].as_f64().unwrap_or(f64::NAN)
                + l["refused_wcu_per_record"].as_f64().unwrap_or(f64::NAN);
            let _ = writeln!(md, "| duplicates-10 (redelivered, new container): 1 call per batch, 0 writes ({mode}) | {calls:.1} calls, {writes:.1} WCU per record | {} |", verdict(calls <= 1.0 && writes == 0.0));
        }
    }
    for (scenario, added_ms) in [
        ("duplicates-10", 0),
        ("duplicates-10", REALISTIC_MS),
        ("fresh-10", REALISTIC_MS),
    ] {
        for mode in MODES {
            if let Some(ratio) = over_powertools(lines, scenario, added_ms, mode) {
                let _ = writeln!(md, "| {scenario} at {added_ms} ms: throughput at least 10x Powertools ({mode}) | {ratio:.1}x | {} |", verdict(ratio >= 10.0));
                if ratio < 10.0 {
                    missed.push((scenario, added_ms, mode, ratio));
                }
            }
        }
    }
    for l in lines
        .iter()
        .filter(|l| l["implementation"] == "lambda-idempotency")
    {
        let (scenario, mode) = (l["scenario"].as_str().unwrap(), l["mode"].as_str().unwrap());
        let added_ms = l["added_latency_ms"].as_u64().unwrap_or(0);
        if let (Some(ours), Some(raw)) = (
            l["median_ms"].as_f64(),
            num(
                find(lines, scenario, added_ms, "raw-dynamodb", mode),
                "median_ms",
            ),
        ) {
            let over = (ours / raw - 1.0) * 100.0;
            let _ = writeln!(md, "| {scenario} at {added_ms} ms: at most 10% latency over the raw limit ({mode}) | {over:+.1}% (median {ours} ms vs {raw} ms) | {} |", verdict(over <= 10.0));
            if over > 10.0 {
                let delayed = [REALISTIC_MS, ROUND_TRIP_PROBE_MS].map(|ms| {
                    let at = |implementation| {
                        num(find(lines, scenario, ms, implementation, mode), "median_ms")
                    };
                    match (at("lambda-idempotency"), at("raw-dynamodb")) {
                        (Some(o), Some(r)) => format!("{:+.1}% at {ms} ms", (o / r - 1.0) * 100.0),
                        _ => format!("not run at {ms} ms"),
                    }
                });
                why.push(format!(
                    "{scenario} at {added_ms} ms, {mode}: {over:+.1}% over the raw limit, {:.2} ms a batch of {:.2} ms. The \
                     toolkit does per record what the raw requests skip (see the client CPU rows below); at a few \
                     milliseconds a batch, that and DynamoDB Local's jitter are of the same size: compare several runs. With \
                     the network delay added, the same scenario is {} and {}.",
                    ours - raw,
                    raw,
                    delayed[0],
                    delayed[1]
                ));
            }
        }
    }
    for l in lines
        .iter()
        .filter(|l| l["implementation"] == "lambda-idempotency" && l["added_latency_ms"] == 0)
    {
        let (scenario, mode) = (l["scenario"].as_str().unwrap(), l["mode"].as_str().unwrap());
        let key = "client_cpu_us_per_record";
        if let (Some(ours), Some(raw)) = (
            l[key].as_f64(),
            num(find(lines, scenario, 0, "raw-dynamodb", mode), key),
        ) {
            let over = (ours / raw - 1.0) * 100.0;
            let _ = writeln!(md, "| {scenario}: client CPU per record within 10% of the raw requests' ({mode}) | {over:+.1}% ({ours} µs vs {raw} µs) | {} |", verdict(over <= 10.0));
            if over > 10.0 {
                why.push(format!(
                    "{scenario}, {mode}: {:.0} µs more client CPU per record than the raw requests ({over:+.0}%). The raw requests \
                     only build, sign and send the calls; the toolkit also derives each key (a JSON pointer into the body, then \
                     SHA-256), hashes the payload (canonical JSON, SHA-256), serializes the result, decodes the records it reads \
                     and the results it replays, and tracks each record's flight and deadline.{}",
                    ours - raw,
                    own_work(lines, scenario, mode)
                ));
            }
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
            verdict(r * 10.0 <= p)
        );
    }
    if let (Some(r), Some(p)) = (
        cold("order-consumer", "peak_rss_mib"),
        cold("powertools-python", "peak_rss_mib"),
    ) {
        let _ = writeln!(
            md,
            "| peak memory at most a quarter of Python's | {r} MiB vs {p} MiB ({:.2}x less) | {} |",
            p / r,
            verdict(r * 4.0 <= p)
        );
        if r * 4.0 > p {
            why.push(format!(
                "Peak memory: {r} MiB against {p} MiB, {:.2}x less, short of 4x by {:.2} MiB. Most of it is the AWS SDK's HTTP \
                 and TLS stack (aws-lc) and the runtime, loaded whatever the workload.",
                p / r,
                r - p / 4.0
            ));
        }
    }
    if let Some(l) = find(lines, "retries-10", 0, "lambda-idempotency", "sequenced") {
        if l["refused_wcu_per_record"].as_f64().unwrap_or(0.0) > 0.0 {
            why.push(
                "retries-10, sequence-guarded: a duplicate SQS does not mark (a producer's retry, a new message) runs the \
                 handler, and its guarded write is refused, which DynamoDB charges as a write. Only events SQS marks as \
                 redelivered are read first; reading every event first would cost a read and a round trip per fresh event."
                    .to_string(),
            );
        }
    }
    if missed.is_empty() && why.is_empty() {
        return;
    }
    let _ = writeln!(md, "\n## Where a target is missed, and why\n");
    for line in &why {
        let _ = writeln!(md, "- {line}");
    }
    for (scenario, added_ms, mode, ratio) in missed {
        let raw = num(
            find(lines, scenario, added_ms, "raw-dynamodb", mode),
            "records_per_sec",
        );
        let py = num(
            find(lines, scenario, added_ms, "powertools-python", ""),
            "records_per_sec",
        );
        if let (Some(raw), Some(py)) = (raw, py) {
            let cores = std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1);
            let cause = if raw >= 10.0 * py {
                format!(
                    "The raw requests alone reach {:.1}x, so the toolkit's own work per record (the client CPU rows) is \
                     what is missing: batches this short (a few milliseconds on loopback) magnify it; with the network \
                     delay added, the same scenario's ratio is in the rows above.",
                    raw / py
                )
            } else {
                format!(
                    "The raw requests alone reach {:.1}x, so the requests themselves, not the toolkit, set the figure. \
                     DynamoDB Local answers each call in milliseconds of its own CPU and serializes calls on {cores} \
                     cores, so every implementation pays that per call whatever the network; DynamoDB's own time per \
                     call is far smaller and its calls run in parallel.",
                    raw / py
                )
            };
            let _ = writeln!(
                md,
                "- {scenario} at {added_ms} ms, {mode}: {ratio:.1}x Powertools' throughput. {cause}"
            );
        }
    }
}
