//! BENCHMARKS.md, from the run's JSON lines.

use std::fmt::Write as _;

use serde_json::Value;

mod budget;
mod misses;
mod targets;

use crate::raw::processors_limit;
use crate::run::POWERTOOLS;
use crate::scenario::{batches_at, REALISTIC_MS, ROUND_TRIP_PROBE_MS, SCENARIOS};
pub use budget::budget_failures;
use targets::{round_trips, targets};

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
const IMPLEMENTATIONS: [&str; 3] = ["lambda-idempotency", "raw-dynamodb", POWERTOOLS];

/// The mode column of `implementation`'s line in `mode`: Powertools has one design, a lease,
/// and its lines are named by the toolkit mode whose batches it alternated with.
fn mode_shown(implementation: &str, mode: &str) -> String {
    if implementation == POWERTOOLS {
        format!("lease (beside {mode})")
    } else {
        mode.to_string()
    }
}

/// `v`, or `-` where it was not measured.
fn or_dash(v: &Value) -> String {
    match v {
        Value::Null => "-".to_string(),
        n => n.to_string(),
    }
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

/// The paragraphs at the top of the report, under its title: how the run is made, and the
/// two things to know before reading a ratio to Powertools (its records run one after
/// another; what cold start times). The committed BENCHMARKS.md holds them as they are
/// (a test checks it), so a change here is made there too, by hand if the run is not redone.
pub fn header() -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "Written by `scripts/bench.sh` (which runs the `bench` crate in release mode); every figure comes from one run, \
         with the implementations alternating batch by batch on the same DynamoDB Local, so the ratios are what to read: \
         absolute numbers depend on the machine and on DynamoDB Local. The batches of 10 run again behind a loopback proxy \
         that delays every request by a fixed time, for every implementation alike: {REALISTIC_MS} ms, a realistic in-region \
         figure (AWS documents DynamoDB as answering in single-digit milliseconds; 8 ms is the upper end, nearer a \
         `TransactWriteItems` than a `GetItem`), and {ROUND_TRIP_PROBE_MS} ms, from which the round trips on a batch's critical \
         path follow: (median at {ROUND_TRIP_PROBE_MS} ms - median at {REALISTIC_MS} ms) / ({ROUND_TRIP_PROBE_MS} - {REALISTIC_MS}) ms. \
         DynamoDB Local is warmed up (JIT) with untimed batches of every scenario of 10 without a cache in every mode, \
         by every implementation of the run, before the first scenario: the run stops if a timed batch sends an \
         operation its implementation did not send in the warm-up (the `operations` of the JSON lines).\n"
    );
    let _ = writeln!(
        md,
        "Two things to know before reading a ratio to Powertools. Powertools for AWS Lambda (Python) runs a batch's records \
         one after another, as its `BatchProcessor` does; this crate's batch processor runs them concurrently, at most {limit} \
         at once within a batch (the raw requests too). A batch of 10 fresh records thus waits for about 30 round trips under \
         Powertools (three calls a record) and for one or two under this crate, so the batch latency and throughput ratios \
         against Powertools mostly reflect that difference, not the time each record takes; the calls, capacity units and \
         client CPU per record do not depend on it. Cold start is the time from spawning the function's process (the \
         order-consumer's release binary, or `python scripts/bench_powertools.py runtime`) to its first request for an event \
         (`GET /2018-06-01/runtime/invocation/next`) to a Runtime API emulator in the bench process, on this machine, with no \
         event processed: the process's own start (loading the binary or the interpreter and its imports, the SDK's \
         configuration and client). It is not a Lambda cold start, which adds creating the execution environment and \
         fetching the code (where a package's size counts) and which this benchmark does not measure; the binary's size is \
         not measured either. Peak memory is the process's VmHWM after three batches of 10 through the same emulator.\n",
        limit = processors_limit()
    );
    md
}

/// The Markdown report of `lines`, a run of `batches` batches per scenario that took `took`.
pub fn report(lines: &[Value], batches: usize, took: Took) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# Benchmarks\n");
    md.push_str(&header());
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
    let _ = writeln!(md, "- Batches per scenario (`BENCH_BATCHES={batches}`): {} at 0 ms ({} with batches of 100; {} of duplicates-10, redelivered duplicates without a cache, whose batches of a few milliseconds are the most sensitive to a pause of DynamoDB Local's JVM), {} at {REALISTIC_MS} ms, {} at {ROUND_TRIP_PROBE_MS} ms; concurrency within a batch: {} (toolkit and raw), Powertools sequential", of("fresh-10", 0), of("fresh-100", 0), of("duplicates-10", 0), of("fresh-10", REALISTIC_MS), of("fresh-10", ROUND_TRIP_PROBE_MS), processors_limit());
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
    let _ = writeln!(md, "| scenario | added ms | implementation | mode | median ms | p99 ms | records/s | calls/record | WCU/record | refused-write WCU/record | RCU/record | client CPU µs/record | allocations/record | instructions/record |");
    let _ = writeln!(
        md,
        "| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for l in lines.iter().filter(|l| {
        !["cold-start", "toolkit-alone", "duplicate-layers"]
            .contains(&l["scenario"].as_str().unwrap_or_default())
    }) {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            l["scenario"].as_str().unwrap(),
            l["added_latency_ms"],
            l["implementation"].as_str().unwrap(),
            mode_shown(
                l["implementation"].as_str().unwrap(),
                l["mode"].as_str().unwrap()
            ),
            l["median_ms"],
            l["p99_ms"],
            l["records_per_sec"],
            l["calls_per_record"],
            l["wcu_per_record"],
            l["refused_wcu_per_record"],
            l["rcu_per_record"],
            l["client_cpu_us_per_record"],
            or_dash(&l["allocations_per_record"]),
            or_dash(&l["instructions_per_record"]),
        );
    }
    let _ = writeln!(md, "\n## Round trips on the critical path per batch\n");
    let _ = writeln!(md, "| scenario | implementation | mode | round trips |");
    let _ = writeln!(md, "| --- | --- | --- | ---: |");
    for scenario in ["fresh-10", "duplicates-10", "retries-10", "mixed-10"] {
        for implementation in IMPLEMENTATIONS {
            for mode in ["optimistic", "lease", "sequenced"] {
                if let Some(trips) = round_trips(lines, scenario, implementation, mode) {
                    let mode = mode_shown(implementation, mode);
                    let _ = writeln!(
                        md,
                        "| {scenario} | {implementation} | {mode} | {trips:.1} |"
                    );
                }
            }
        }
    }
    alone(&mut md, lines);
    layers(&mut md, lines);
    targets(&mut md, lines);
    budget::budget(&mut md, lines);
    let _ = writeln!(md, "\n## Reading the figures\n");
    let _ = writeln!(md, "- *raw-dynamodb* issues exactly the requests each mode must make (optimistic: one `TransactWriteItems` per fresh record; lease: a conditional `PutItem`, then the `TransactWriteItems`; a duplicate SQS marks as redelivered: its share of one strongly consistent `BatchGetItem`, the pre-check; an unmarked duplicate: the one refused request), with the same attributes (its keys as long as the toolkit's, its payload hash and owner the same size), the same conditions (taking over expired records and elapsed leases; the owner fence), `ALL_OLD` on refusal and a `ClientRequestToken`, at the same concurrency (at most {} records at once, the batch processor's default, a new one starting as soon as any running one finishes, as the processor schedules them), with no toolkit logic (each body parsed once). The toolkit's overhead over it is key hashing, payload hashing, JSON, and decoding.", processors_limit());
    let _ = writeln!(md, "- *powertools-python* is `BatchProcessor` with `idempotent_function` (`scripts/bench_powertools.py`), on the same DynamoDB Local and events. It cannot commit the ledger write with its record, so it makes three calls per fresh record (put, the ledger update, update) and its effect is not exactly-once. It processes a batch's records one after another, as its `BatchProcessor` does. It has one design, a lease, and runs beside each of the toolkit's optimistic and lease runs without the local cache, its batches alternating with theirs (its mode column names the run: `lease (beside optimistic)`; in the JSON lines its `mode` is the run's), so that each mode's ratio to it compares batches of the same minutes and conditions.");
    let _ = writeln!(md, "- *duplicates-10*: every record completed before and redelivered by SQS (`ApproximateReceiveCount` 2), to a container that never saw it (no local cache). *retries-10*: the same duplicates unmarked (a producer's retries, each a new message), which the default pre-check does not look up. *mixed-10*: five redelivered duplicates and five first deliveries.");
    let _ = writeln!(md, "- Calls are counted by an SDK interceptor (botocore event hooks on the Python side). WCU and RCU come from `ReturnConsumedCapacity=TOTAL` as DynamoDB Local reports them. A write refused by its condition reports no capacity, although DynamoDB charges it: the refused-write column counts it as DynamoDB would for items up to 1 KB (1 unit per refused item write, 2 per item of a refused transaction). An estimate, not a report.");
    let _ = writeln!(md, "- Without the pre-check, in optimistic mode a duplicate is computed again and learns it is one from the refused commit; in lease mode the refused conditional put answers it. With the local cache on, a warm container answers duplicates without any call.");
    let _ = writeln!(md, "- *sequenced* is the sequence-guarded (natural) mode: each order is the first event of its own entity (a ledger item keyed by its `eventId`), so a fresh order is one conditional `UpdateItem` on the entity and no idempotency record is written; a redelivered duplicate is one consistent `GetItem` of the entity; an unmarked one (retries-10) runs the handler and its write is refused. Its raw limit makes the same calls. Powertools has no such mode.");
    let _ = writeln!(md, "- Client CPU is the CPU time the client process spent during its timed batches (`CLOCK_PROCESS_CPUTIME_ID` for the bench process, which runs the toolkit and the raw requests in turn, each handed its own copy of the batch's event and dropping it within its timing (the toolkit's batch report after it); `time.process_time()` in the Python worker), per record. The raw requests' figure is the SDK's own cost (serialization, signing, HTTP, TLS-free loopback); the toolkit's adds key and payload hashing, JSON, and its decisions.");
    let _ = writeln!(md, "- Allocations are the heap allocations (and reallocations) made on every thread of the bench process during the timed batches, per record, counted by the process's global allocator (the system allocator with a count beside it, `bench/src/allocations.rs`). Unlike CPU time, the count barely changes from run to run (the SDK's buffers vary by a few), so the toolkit's figure against the raw requests' shows its own work per record without this machine's noise. The Python worker's are not counted (`-`).");
    let _ = writeln!(md, "- Instructions are the instructions executed on every thread of the bench process during the timed batches, per record, counted by callgrind (`valgrind --tool=callgrind`) in a second run of the same batches at 0 ms ({} batches of fresh-10, the others scaled as above; `bench/src/instructions.rs`): callgrind writes its count out as each batch starts and ends. SHA-256's block function and what it calls are left out: callgrind can only run it in software, about 3,300 instructions a 64-byte block where this CPU's SHA extensions take under 200 (counted, it was nearly 30% of the raw requests' count in fresh-10, where each `TransactWriteItems` is signed, and skewed every ratio); both sides hash (the SDK signs each request, the toolkit hashes each record's key and payload). The toolkit's instructions over the raw requests' move by about a point between runs of the same code (up to 1.3 points in repeated runs of each scenario), where its CPU time over theirs moves by 5 points or more on this machine, so the client work target is decided by instructions where they were counted (`-`: not counted; the Python worker, and the scenarios with a cache, which have no raw requests beside them), by CPU time otherwise: a figure within a point of 10% can fall either side in another run.", crate::instructions::counted_batches(batches));
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

/// A redelivered duplicate's client CPU on DynamoDB Local, layer by layer.
fn layers(md: &mut String, lines: &[Value]) {
    if !lines.iter().any(|l| l["scenario"] == "duplicate-layers") {
        return;
    }
    let _ = writeln!(
        md,
        "\n## A redelivered duplicate on DynamoDB Local, layer by layer\n"
    );
    let _ = writeln!(md, "The same ten completed records read four ways, taking turns in this process: a bare strongly consistent `BatchGetItem` of their keys (as the raw requests read them); the toolkit's DynamoDB store reading the same keys (`get_many`: its request built, its records parsed); the store's read followed by the processor's per-record work done in one loop (each record's key and payload hash, the decision on its record, its stored result decoded: no per-record service, span, deadline timer or panic guard); and the ten redelivered messages as a batch through the order-consumer's processor (its pre-check, the records found completed replayed together: key and payload hash, decision, replay; the report). Each turn is handed its own copy of the batch's event, as in the scenarios, and makes exactly one call (counted); each includes the SDK's own cost of that call, so the differences are the toolkit's layers.\n");
    let _ = writeln!(md, "| read | mode | CPU µs/record | over the bare read |");
    let _ = writeln!(md, "| --- | --- | ---: | ---: |");
    for mode in ["optimistic", "lease"] {
        let bare = cpu_us(lines, "duplicate-layers", crate::layers::LAYERS[0], mode);
        for what in crate::layers::LAYERS {
            let Some(us) = cpu_us(lines, "duplicate-layers", what, mode) else {
                continue;
            };
            let over = match bare {
                Some(bare) if what != crate::layers::LAYERS[0] => format!("{:+.2}", us - bare),
                _ => "-".to_string(),
            };
            let _ = writeln!(md, "| {what} | {mode} | {us:.2} | {over} |");
        }
    }
}

/// The CPU per record of `what` in `mode` in one of the measurements outside the scenarios
/// (`toolkit-alone`, `duplicate-layers`).
pub(super) fn cpu_us(lines: &[Value], measurement: &str, what: &str, mode: &str) -> Option<f64> {
    lines
        .iter()
        .find(|l| l["scenario"] == measurement && l["what"] == what && l["mode"] == mode)
        .and_then(|l| l["cpu_us_per_record"].as_f64())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::layers::LAYERS;

    #[test]
    fn the_header_says_powertools_runs_records_one_after_another_and_what_cold_start_times() {
        let header = header();
        for said in [
            "runs a batch's records one after another",
            &format!("at most {} at once within a batch", processors_limit()),
            "mostly reflect that difference",
            "to its first request for an event",
            "It is not a Lambda cold start",
        ] {
            assert!(header.contains(said), "{said} not in:\n{header}");
        }
        // The committed report holds the header as this code writes it (edited by hand when
        // the text changes and the run is not redone).
        let committed =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../BENCHMARKS.md"))
                .expect("BENCHMARKS.md");
        assert!(
            committed.starts_with(&format!("# Benchmarks\n\n{header}")),
            "BENCHMARKS.md does not start with the generated header:\n{header}"
        );
    }

    #[test]
    fn the_layers_table_shows_each_read_against_the_bare_one_of_its_mode() {
        let layer = |what: &str, mode: &str, us: f64| json!({"scenario": "duplicate-layers", "what": what, "mode": mode, "cpu_us_per_record": us});
        let lines = [
            layer(LAYERS[0], "optimistic", 50.0),
            layer(LAYERS[1], "optimistic", 49.6),
            layer(LAYERS[2], "optimistic", 53.0),
            layer(LAYERS[3], "optimistic", 60.0),
            layer(LAYERS[0], "lease", 40.0),
            layer(LAYERS[1], "lease", 41.0),
            layer(LAYERS[2], "lease", 43.25),
            layer(LAYERS[3], "lease", 52.5),
        ];
        let mut md = String::new();
        layers(&mut md, &lines);
        for row in [
            format!("| {} | optimistic | 50.00 | - |", LAYERS[0]),
            format!("| {} | optimistic | 49.60 | -0.40 |", LAYERS[1]),
            format!("| {} | optimistic | 53.00 | +3.00 |", LAYERS[2]),
            format!("| {} | optimistic | 60.00 | +10.00 |", LAYERS[3]),
            format!("| {} | lease | 40.00 | - |", LAYERS[0]),
            format!("| {} | lease | 41.00 | +1.00 |", LAYERS[1]),
            format!("| {} | lease | 43.25 | +3.25 |", LAYERS[2]),
            format!("| {} | lease | 52.50 | +12.50 |", LAYERS[3]),
        ] {
            assert!(md.contains(&row), "{row} not in:\n{md}");
        }
        // Without the measurement, no section.
        let mut md = String::new();
        layers(&mut md, &[]);
        assert!(md.is_empty());
    }
}
