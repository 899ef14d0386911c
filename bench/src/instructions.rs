//! Instructions per record, counted by callgrind rather than timed: the measure of the
//! toolkit's own work per record that this machine's noise barely moves (the toolkit's CPU
//! time over the raw requests' moves by 5 points or more between runs of the same code; its
//! instructions over theirs by about a point, up to 1.3 in repeated runs of each scenario).
//!
//! [`measure`] runs this bench again under `valgrind --tool=callgrind` (a child process,
//! the chosen scenarios at 0 ms, every implementation in turn as in the timed run). In the
//! child, each timed batch calls [`batch_started`] as it starts and [`batch_finished`] as it
//! ends, right where its CPU time is read. Both call one empty function on which callgrind
//! writes its counters out and zeroes them (`--dump-before`, callgrind's own trigger on a
//! function's name): one file for the untimed work before the batch, one for the batch. A
//! native run only makes two empty calls a batch. The child labels each file, in order, in a
//! file of labels; the parent adds up each implementation's batches and divides by their
//! records.
//!
//! Callgrind counts every thread of the process (the runtime's workers drive the SDK's
//! connections) and serializes them; DynamoDB Local runs outside it, at full speed.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Mutex, OnceLock};

use serde_json::{json, Value};

use crate::run::round;
use crate::scenario::{batches_at, SCENARIOS};

/// The environment variable naming the child's file of labels: set, this process is the
/// child under callgrind.
pub const LABELS_ENV: &str = "BENCH_INSTRUCTIONS_LABELS";

/// The function on whose entry callgrind writes out and zeroes its counters.
const DUMP_BEFORE: &str = "bench_instructions_dump";

/// The label of the untimed work between two batches, whose count is left out.
const UNTIMED: &str = "untimed";

/// Callgrind writes out and zeroes its counters on entering this function (`--dump-before`).
/// One function for both ends of a batch: two empty ones could be folded into one address by
/// the compiler, under either name.
#[no_mangle]
#[inline(never)]
pub extern "C" fn bench_instructions_dump() {
    std::hint::black_box(());
}

/// The labels of the files written so far, in order; `None` unless this is the child.
fn labels() -> Option<&'static Mutex<Vec<String>>> {
    static LABELS: OnceLock<Option<Mutex<Vec<String>>>> = OnceLock::new();
    LABELS
        .get_or_init(|| std::env::var_os(LABELS_ENV).map(|_| Mutex::new(Vec::new())))
        .as_ref()
}

/// A timed batch starts: callgrind writes out the untimed work before it, and zeroes. (The
/// label is written before the file, so that its work is not the batch's.)
pub fn batch_started() {
    label(|| UNTIMED.to_string());
    bench_instructions_dump();
}

/// A timed batch of `records` records of `implementation` in `scenario` and `mode` ended:
/// callgrind writes its counters out here, and the child names the batch.
pub fn batch_finished(scenario: &str, implementation: &str, mode: &str, records: usize) {
    bench_instructions_dump();
    label(|| format!("{scenario}\t{implementation}\t{mode}\t{records}"));
}

/// In the child, the next file labelled.
fn label(text: impl FnOnce() -> String) {
    if let Some(labels) = labels() {
        labels.lock().unwrap().push(text());
    }
}

/// The child's end: its labels written where the parent reads them.
pub fn write_labels() {
    if let (Some(labels), Some(path)) = (labels(), std::env::var_os(LABELS_ENV)) {
        let text: String = labels
            .lock()
            .unwrap()
            .iter()
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::write(path, text).expect("write the instruction labels");
    }
}

/// Batches counted per scenario, before scaling (fewer when the timed run has fewer; then
/// scaled per scenario as the timed run's are, by [`batches_at`]): a batch's count barely
/// changes from one to the next, so a few suffice, and callgrind runs each many times slower
/// than natively.
pub const BATCHES: usize = 10;

/// How many batches of fresh-10 are counted when the timed run has `batches`.
pub fn counted_batches(batches: usize) -> usize {
    batches_at(BATCHES.min(batches), &SCENARIOS[0], 0)
}

/// The scenarios to count, comma-separated: `which` is `all` (every chosen scenario without a
/// cache, the ones with the raw requests beside the toolkit) or a comma-separated list of
/// such scenarios. Panics on a name that is not one, and when none is left: asked for, the
/// count is never silently left out.
pub fn scenarios(which: &str, chosen: impl Fn(&str) -> bool) -> String {
    let countable = |name: &str| {
        SCENARIOS
            .iter()
            .any(|s| s.name == name && !s.cache && chosen(s.name))
    };
    if which != "all" {
        for name in which.split(',').map(str::trim) {
            assert!(
                countable(name),
                "BENCH_INSTRUCTIONS names {name:?}: not a scenario without a cache that this run \
                 runs (BENCH_SCENARIOS)"
            );
        }
    }
    let names: Vec<&str> = SCENARIOS
        .iter()
        .filter(|s| countable(s.name))
        .filter(|s| which == "all" || which.split(',').any(|n| n.trim() == s.name))
        .map(|s| s.name)
        .collect();
    assert!(
        !names.is_empty(),
        "BENCH_INSTRUCTIONS={which}: no scenario to count in this run"
    );
    names.join(",")
}

/// Runs `scenarios` (comma-separated) over `batches` batches each under callgrind, and gives
/// one JSON line per scenario, implementation and mode with its instructions per record.
/// Panics when valgrind is missing or the child fails: asked for, the count is never
/// silently left out.
pub async fn measure(scenarios: &str, batches: usize) -> Vec<Value> {
    // Removed when dropped, a panic's unwinding included (a full count writes about 165 MB).
    let dir = tempfile::Builder::new()
        .prefix("bench-instructions-")
        .tempdir()
        .expect("a directory for callgrind's files");
    let (out, labels) = (dir.path().join("callgrind.out"), dir.path().join("labels"));
    let status = tokio::process::Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(format!("--dump-before={DUMP_BEFORE}"))
        .args(["--compress-strings=no", "--quiet"])
        .arg(std::env::current_exe().expect("the bench binary"))
        .env(LABELS_ENV, &labels)
        .env("BENCH_SCENARIOS", scenarios)
        .env("BENCH_BATCHES", batches.to_string())
        .stdout(Stdio::null())
        .status()
        .await
        .expect("valgrind is required to count instructions (Debian: apt-get install valgrind)");
    assert!(
        status.success(),
        "the bench under callgrind failed: {status}"
    );
    per_record(dir.path(), &labels)
}

/// The function whose instructions, with those of everything it calls, are left out of the
/// count: SHA-256's block function, which callgrind can only run in software (about 3,300
/// instructions a 64-byte block, where this CPU's SHA extensions take under 200 natively;
/// counted, it was nearly 30% of the raw requests' count in fresh-10, where each
/// `TransactWriteItems` is signed). Both sides hash: the SDK signs every request; the toolkit
/// hashes each record's key and payload. In a release build the software blocks are inlined
/// into it; in a debug build it calls them.
pub const LEFT_OUT: &str = "sha2::sha256::compress256";

/// A callgrind file's instructions (its `summary:`), less those of [`LEFT_OUT`] and its
/// calls (its own cost lines and its calls' cost lines); an error when there is no total or
/// [`LEFT_OUT`] ran none (every batch signs its requests: a renamed function would count the
/// software blocks unnoticed).
fn counted(text: &str) -> Result<u64, String> {
    let total = text
        .lines()
        .find_map(|l| l.strip_prefix("summary:"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .ok_or("no summary")?;
    // Within its block, a cost line is its own or (after `calls=`) a call's, with the
    // callee's whole cost: both are left out. (It does not call itself.)
    let (mut left_out, mut in_left_out) = (0u64, false);
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("fn=") {
            in_left_out = name.trim() == LEFT_OUT;
        } else if in_left_out && line.starts_with(|c: char| c.is_ascii_digit() || "+-*".contains(c))
        {
            left_out += line
                .split_whitespace()
                .nth(1)
                .and_then(|n| n.parse::<u64>().ok())
                .ok_or_else(|| format!("a malformed cost line: {line:?}"))?;
        }
    }
    if left_out == 0 {
        return Err(format!("no instructions of {LEFT_OUT}"));
    }
    Ok(total - left_out)
}

/// The instructions of each batch's file (`callgrind.out.N`, N from 1, in the order of the
/// labels), added up per label and divided by its records.
fn per_record(dir: &Path, labels: &Path) -> Vec<Value> {
    let labels = std::fs::read_to_string(labels).expect("the child's instruction labels");
    let mut totals = BTreeMap::<(&str, &str, &str), (u64, u64, usize)>::new();
    for (i, label) in labels.lines().enumerate() {
        let dump = dir.join(format!("callgrind.out.{}", i + 1));
        if label == UNTIMED {
            // Left out, so not read; but there, or the files and labels are out of step.
            assert!(dump.exists(), "{}: missing", dump.display());
            continue;
        }
        let text =
            std::fs::read_to_string(&dump).unwrap_or_else(|e| panic!("{}: {e}", dump.display()));
        let ir = counted(&text).unwrap_or_else(|e| panic!("{}: {e}", dump.display()));
        let mut parts = label.split('\t');
        let (Some(scenario), Some(implementation), Some(mode), Some(records)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            panic!("a malformed label: {label:?}");
        };
        let entry = totals.entry((scenario, implementation, mode)).or_default();
        entry.0 += ir;
        entry.1 += records.parse::<u64>().expect("a label's records");
        entry.2 += 1;
    }
    assert!(
        !dir.join(format!("callgrind.out.{}", labels.lines().count() + 1))
            .exists(),
        "callgrind wrote more batches than were labelled"
    );
    totals
        .into_iter()
        .map(
            |((scenario, implementation, mode), (ir, records, batches))| {
                json!({
                    "scenario": scenario,
                    "added_latency_ms": 0,
                    "implementation": implementation,
                    "mode": mode,
                    "instruction_batches": batches,
                    "instructions_per_record": round(ir as f64 / records as f64),
                })
            },
        )
        .collect()
}

/// Each count of `counted` added to its batch line in `lines` (same scenario, implementation
/// and mode, at 0 ms) as `instructions_per_record`.
pub fn merge(lines: &mut [Value], counted: &[Value]) {
    for count in counted {
        let line = lines.iter_mut().find(|l| {
            ["scenario", "implementation", "mode"]
                .iter()
                .all(|k| l[*k] == count[*k])
                && l["added_latency_ms"] == 0
                && l.get("median_ms").is_some()
        });
        if let Some(Value::Object(line)) = line {
            line.insert(
                "instructions_per_record".into(),
                count["instructions_per_record"].clone(),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dumps(totals: &[u64], labels: &[&str]) -> tempfile::TempDir {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path();
        for (i, total) in totals.iter().enumerate() {
            if labels.get(i) == Some(&UNTIMED) {
                // The untimed work between batches need not sign a request.
                let text = format!("events: Ir\nsummary: {total}\n\nfn=x\n0 {total}\n");
                std::fs::write(dir.join(format!("callgrind.out.{}", i + 1)), text).unwrap();
                continue;
            }
            // `total` counted: x's own. Left out: SHA-256's blocks' own 100 and the 7 of y,
            // which they call (x's call into them is x's line, not theirs).
            let text = format!(
                "# callgrind format\nevents: Ir\nsummary: {}\n\nfn=x\n0 {total}\n\
                 cfn={LEFT_OUT}\ncalls=1 0\n0 107\nfn={LEFT_OUT}\n0 60\n\
                 cfn=y\ncalls=1 0\n0 7\n+1 40\nfn=y\n0 7\n",
                total + 107
            );
            std::fs::write(dir.join(format!("callgrind.out.{}", i + 1)), text).unwrap();
        }
        let labels: String = labels.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(dir.join("labels"), labels).unwrap();
        temp
    }

    #[test]
    fn each_implementations_batches_are_added_up_per_record_without_the_untimed_work() {
        let (ours, raw) = (
            "fresh-10\tlambda-idempotency\toptimistic\t10",
            "fresh-10\traw-dynamodb\toptimistic\t10",
        );
        let dir = dumps(
            &[9_000_000, 1_000, 5_000, 2_000, 7_000, 1_000_000, 3_000],
            &[UNTIMED, ours, UNTIMED, raw, UNTIMED, raw, ours],
        );
        let lines = per_record(dir.path(), &dir.path().join("labels"));
        let of = |implementation: &str| {
            lines
                .iter()
                .find(|l| l["implementation"] == implementation)
                .cloned()
                .unwrap()
        };
        // (1,000 + 3,000) / 20 records and (2,000 + 1,000,000) / 20.
        assert_eq!(of("lambda-idempotency")["instructions_per_record"], 200.0);
        assert_eq!(of("raw-dynamodb")["instructions_per_record"], 50_100.0);
        assert_eq!(of("raw-dynamodb")["instruction_batches"], 2);
        assert_eq!(lines.len(), 2);
    }

    #[test]
    fn the_scenarios_counted_are_those_named_that_run_without_a_cache() {
        let all = |_: &str| true;
        assert_eq!(
            scenarios("all", all),
            "fresh-10,duplicates-10,retries-10,mixed-10,fresh-100"
        );
        assert_eq!(scenarios(" mixed-10,fresh-10", all), "fresh-10,mixed-10");
        assert_eq!(scenarios("all", |n: &str| n == "retries-10"), "retries-10");
        for (which, chosen) in [
            ("fresh10", "fresh-10"),
            ("duplicates-10-cached", "duplicates-10-cached"),
            ("fresh-10", "mixed-10"),
            ("all", "duplicates-10-cached"),
        ] {
            let asked = std::panic::catch_unwind(|| scenarios(which, |n: &str| n == chosen));
            assert!(asked.is_err(), "{which} with {chosen} run");
        }
    }

    #[test]
    fn a_file_without_sha_256_blocks_is_an_error() {
        let text = "events: Ir\nsummary: 1000\n\nfn=x\n0 1000\n";
        assert_eq!(counted(text), Err(format!("no instructions of {LEFT_OUT}")));
        assert_eq!(counted("events: Ir\n"), Err("no summary".to_string()));
    }

    #[test]
    #[should_panic(expected = "more batches than were labelled")]
    fn a_file_beyond_the_labels_is_an_error() {
        let dir = dumps(
            &[1_000, 2_000, 3_000],
            &[UNTIMED, "fresh-10\traw-dynamodb\tlease\t10"],
        );
        per_record(dir.path(), &dir.path().join("labels"));
    }

    #[test]
    fn a_count_is_merged_into_its_batch_line_at_0_ms_only() {
        let batch = |added: u64| {
            json!({"scenario": "fresh-10", "added_latency_ms": added, "implementation": "raw-dynamodb",
                   "mode": "lease", "median_ms": 1.0})
        };
        let mut lines = vec![batch(8), batch(0)];
        let counted = [json!({"scenario": "fresh-10", "added_latency_ms": 0,
                              "implementation": "raw-dynamodb", "mode": "lease",
                              "instructions_per_record": 123.0})];
        merge(&mut lines, &counted);
        assert_eq!(lines[0].get("instructions_per_record"), None);
        assert_eq!(lines[1]["instructions_per_record"], 123.0);
    }
}
