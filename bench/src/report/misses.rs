//! Why a missed target is missed: what the toolkit does beyond the raw requests in each
//! scenario and mode, with its cost measured without I/O, and what was measured around a
//! latency row over the limit.

use std::fmt::Write as _;

use serde_json::Value;

use super::{cpu_us, find, num};
use crate::layers::LAYERS;
use crate::scenario::{REALISTIC_MS, ROUND_TRIP_PROBE_MS};

/// The toolkit's own CPU per record for `what` in `mode`, from the in-memory measurement.
fn alone_us(lines: &[Value], what: &str, mode: &str) -> Option<f64> {
    cpu_us(lines, "toolkit-alone", what, mode)
}

/// What the toolkit does for a scenario's records in a mode beyond the raw requests: decided
/// once here, for both sentences that name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Work {
    /// Sequence-guarded mode: reads and writes the entity itself, one call per record.
    Sequenced,
    /// Redelivered duplicates, answered at admission from the pre-check (before the single
    /// flight): no result serialized.
    PreChecked,
    /// Unmarked duplicates in lease mode, answered by their refused `PutItem`: no commit.
    RefusedAcquire,
    /// Fresh records: nothing read or replayed.
    Fresh,
    /// Anything else: fresh records and duplicates alike.
    Mixed,
}

impl Work {
    fn of(scenario: &str, mode: &str) -> Self {
        if mode == "sequenced" {
            Work::Sequenced
        } else if scenario.starts_with("duplicates") {
            Work::PreChecked
        } else if scenario.starts_with("retries") && mode == "lease" {
            Work::RefusedAcquire
        } else if scenario.starts_with("fresh") {
            Work::Fresh
        } else {
            Work::Mixed
        }
    }
}

/// What the toolkit does in `scenario` that the raw requests do not, with its measured cost
/// without I/O where the bench has one.
pub(super) fn own_work(lines: &[Value], scenario: &str, mode: &str) -> String {
    let key = alone_us(lines, "key and payload hash", "-");
    let key_only = || {
        key.map_or_else(String::new, |key| {
            format!(" Measured without I/O, the key and payload hash take {key} µs a record.")
        })
    };
    match Work::of(scenario, mode) {
        // Only the common part applies.
        Work::Sequenced => String::new(),
        Work::PreChecked => {
            let duplicate = alone_us(lines, "redelivered duplicate, pre-checked and replayed", mode);
            let measured = match (key, duplicate) {
                (Some(key), Some(duplicate)) => format!(
                    " Measured without I/O (the section above), the key and payload hash alone take {key} µs a record and a \
                     whole pre-checked duplicate {duplicate} µs."
                ),
                _ => String::new(),
            };
            let layers = match LAYERS.map(|what| cpu_us(lines, "duplicate-layers", what, mode)) {
                [Some(bare), Some(store), Some(looped), Some(processor)] => {
                    let at_once = duplicate.map_or_else(String::new, |duplicate| {
                            format!(" (on the in-memory store, which answers at once, the whole path takes {duplicate} µs)")
                        });
                    format!(
                        " Measured on DynamoDB Local layer by layer (its own section), the toolkit's store read takes \
                         {:+.2} µs a record against a bare `BatchGetItem` of the same keys, and the processor's path above \
                         it (the batch's pre-check and replay: key and payload hash, decision, replay; the report) {:+.2} µs \
                         against the store's read, which waits for DynamoDB{at_once}. The same per-record work done in one \
                         loop over the store's read (key and payload hash, the decision on the record, its result decoded) \
                         takes {:+.2} µs against it, {:+.2} µs against the bare read: the rest of the processor's figure, \
                         {:+.2} µs, is its batch's own work (sharing the offered records with the pre-check, each record's \
                         future and its wait for the replay phase, the lookup shared with the records' own calls, the reports, logs \
                         and metrics).",
                        store - bare,
                        processor - store,
                        looped - store,
                        looped - bare,
                        processor - looped
                    )
                }
                _ => String::new(),
            };
            format!(
                " Here the calls are cheapest (one shared `BatchGetItem` for ten records), so that work is the larger share.{measured}{layers}"
            )
        }
        Work::RefusedAcquire => format!(
            " Each unmarked duplicate's refused `PutItem` comes back with the stored record, which the toolkit decodes \
             and replays.{}",
            key_only()
        ),
        Work::Fresh | Work::Mixed => {
            let measured = match (key, alone_us(lines, "fresh record, run and committed", mode)) {
                (Some(key), Some(fresh)) => format!(
                    " Measured without I/O, the key and payload hash take {key} µs a record, and a whole fresh record on the \
                     in-memory store {fresh} µs (its own evaluation of the write included)."
                ),
                _ => key_only(),
            };
            format!(
                " Each commit also carries a client request token derived from the whole request (SHA-256, so that a resent \
                 commit is recognised), where the raw requests send a random one.{measured}"
            )
        }
    }
}

/// What the toolkit does per record in `scenario` and `mode` that the raw requests do not.
pub(super) fn extra_steps(scenario: &str, mode: &str) -> String {
    let rest = match Work::of(scenario, mode) {
        Work::Sequenced => {
            return "reads each event's entity and sequence number, adds the guard to the handler's write, and maps a \
                    refused guard to replayed or out of order"
                .into();
        }
        Work::PreChecked => {
            "decodes the records it reads and the results it replays, within the batch's deadline"
        }
        Work::RefusedAcquire => {
            "decodes the records it reads and the results it replays, and tracks each record's flight and deadline"
        }
        Work::Fresh => "serializes the result, and tracks each record's flight and deadline",
        Work::Mixed => {
            "serializes the result, decodes the records it reads and the results it replays, and tracks each record's \
             flight and deadline"
        }
    };
    format!(
        "derives each key (a JSON pointer into the body, then SHA-256), hashes the payload (canonical JSON, \
         SHA-256), {rest}"
    )
}

/// Why the toolkit's batch took more than 10% longer than the raw requests': at 0 ms, the
/// client CPU it spent beyond them on the same cores as DynamoDB Local, how short the batch
/// is, and the same scenario's delayed runs; at any delay, how many batches the median is of.
pub(super) fn latency_miss(lines: &[Value], ours_line: &Value) -> String {
    let scenario = ours_line["scenario"].as_str().unwrap_or_default();
    let mode = ours_line["mode"].as_str().unwrap_or_default();
    let added_ms = ours_line["added_latency_ms"].as_u64().unwrap_or(0);
    let ours = ours_line["median_ms"].as_f64().unwrap_or(f64::NAN);
    let raw = num(
        find(lines, scenario, added_ms, "raw-dynamodb", mode),
        "median_ms",
    )
    .unwrap_or(f64::NAN);
    let over = (ours / raw - 1.0) * 100.0;
    let mut why = format!(
        "{scenario} at {added_ms} ms, {mode}: {over:+.1}% over the raw limit, {:.2} ms a batch of {raw:.2} ms.",
        ours - raw
    );
    let of_batches = ours_line["batches"]
        .as_u64()
        .map_or_else(String::new, |n| format!(" of {n} batches"));
    if added_ms != 0 {
        // The client CPU rows and the delayed comparison are of the runs without delay.
        let _ = write!(why, " The median is{of_batches}: compare several runs.");
        return why;
    }
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let key = "client_cpu_us_per_record";
    if let (Some(o), Some(r), Some(size)) = (
        ours_line[key].as_f64(),
        num(find(lines, scenario, 0, "raw-dynamodb", mode), key),
        ours_line["batch_size"].as_f64(),
    ) {
        if o > r {
            let _ = write!(
                why,
                " The toolkit spent {:.2} ms more client CPU a batch than the raw requests in this run (CPU time, \
                 which moves from run to run, is beside the steadier instruction count in the client work rows \
                 above), on the same {cores} cores as DynamoDB Local, which serves every call with its own CPU.",
                (o - r) * size / 1000.0
            );
        }
    }
    if raw < 10.0 {
        let _ = write!(
            why,
            " At a few milliseconds a batch, DynamoDB Local's jitter weighs most (the median is{of_batches}): \
             compare several runs."
        );
    } else {
        let _ = write!(why, " The median is{of_batches}: compare several runs.");
    }
    let delayed: Vec<String> = [REALISTIC_MS, ROUND_TRIP_PROBE_MS]
        .into_iter()
        .filter_map(|ms| {
            let at =
                |implementation| num(find(lines, scenario, ms, implementation, mode), "median_ms");
            Some(format!(
                "{:+.1}% at {ms} ms",
                (at("lambda-idempotency")? / at("raw-dynamodb")? - 1.0) * 100.0
            ))
        })
        .collect();
    if delayed.is_empty() {
        why.push_str(" This scenario runs without the network delay only.");
    } else {
        let _ = write!(
            why,
            " With the network delay added, the same scenario is {}.",
            delayed.join(" and ")
        );
    }
    why
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn line(scenario: &str, ms: u64, implementation: &str, median: f64, cpu: f64) -> Value {
        json!({
            "scenario": scenario, "added_latency_ms": ms, "implementation": implementation,
            "mode": "optimistic", "batches": 10, "batch_size": 100,
            "median_ms": median, "client_cpu_us_per_record": cpu,
        })
    }

    #[test]
    fn a_long_batch_run_only_without_delay_is_explained_as_such() {
        let lines = [
            line("fresh-100", 0, "lambda-idempotency", 333.26, 550.05),
            line("fresh-100", 0, "raw-dynamodb", 285.07, 450.19),
        ];
        let why = latency_miss(&lines, &lines[0]);
        assert!(why.contains("48.19 ms a batch of 285.07 ms"), "{why}");
        assert!(why.contains("9.99 ms more client CPU a batch"), "{why}");
        assert!(why.contains("The median is of 10 batches"), "{why}");
        assert!(why.contains("runs without the network delay only"), "{why}");
        assert!(!why.contains("a few milliseconds"), "{why}");
    }

    #[test]
    fn a_short_batch_is_compared_with_its_delayed_runs() {
        let lines = [
            line("duplicates-10", 0, "lambda-idempotency", 10.5, 60.0),
            line("duplicates-10", 0, "raw-dynamodb", 9.5, 50.0),
            line("duplicates-10", 8, "lambda-idempotency", 11.0, 60.0),
            line("duplicates-10", 8, "raw-dynamodb", 10.0, 50.0),
            line("duplicates-10", 50, "lambda-idempotency", 51.0, 60.0),
            line("duplicates-10", 50, "raw-dynamodb", 50.0, 50.0),
        ];
        let why = latency_miss(&lines, &lines[0]);
        // The raw batch (9.5 ms), not ours (10.5 ms), decides that the batch is short.
        assert!(why.contains("At a few milliseconds a batch"), "{why}");
        assert!(why.contains("1.00 ms more client CPU a batch"), "{why}");
        assert!(why.contains("+10.0% at 8 ms and +2.0% at 50 ms"), "{why}");
        // A delayed row says only what was measured at its delay.
        let delayed = latency_miss(&lines, &lines[2]);
        assert!(delayed.contains("The median is of 10 batches"), "{delayed}");
        assert!(!delayed.contains("client CPU"), "{delayed}");
        assert!(
            !delayed.contains("With the network delay added"),
            "{delayed}"
        );
    }

    #[test]
    fn one_delayed_run_and_no_extra_cpu_say_only_what_was_measured() {
        let lines = [
            line("mixed-10", 0, "lambda-idempotency", 22.0, 40.0),
            line("mixed-10", 0, "raw-dynamodb", 20.0, 50.0),
            line("mixed-10", 50, "lambda-idempotency", 60.0, 60.0),
            line("mixed-10", 50, "raw-dynamodb", 50.0, 50.0),
        ];
        let why = latency_miss(&lines, &lines[0]);
        assert!(!why.contains("client CPU"), "{why}");
        assert!(
            why.contains("the same scenario is +20.0% at 50 ms."),
            "{why}"
        );
    }

    #[test]
    fn a_pre_checked_duplicate_is_explained_layer_by_layer() {
        let layer = |what: &str, us: f64| json!({"scenario": "duplicate-layers", "what": what, "mode": "lease", "records": 10, "cpu_us_per_record": us});
        let lines = [
            layer(LAYERS[0], 50.0),
            layer(LAYERS[1], 51.5),
            layer(LAYERS[2], 54.0),
            layer(LAYERS[3], 63.25),
        ];
        let why = own_work(&lines, "duplicates-10", "lease");
        assert!(
            why.contains("takes +1.50 µs a record against a bare"),
            "{why}"
        );
        assert!(
            why.contains("the report) +11.75 µs against the store's"),
            "{why}"
        );
        assert!(
            why.contains("takes +2.50 µs against it, +4.00 µs against the bare read"),
            "{why}"
        );
        assert!(why.contains("processor's figure, +9.25 µs, is"), "{why}");
        // Without the in-memory measurement, no figure is cited for it.
        assert!(!why.contains("in-memory"), "{why}");
        // A store read cheaper than the bare one shows its sign.
        let cheaper = [
            layer(LAYERS[0], 50.0),
            layer(LAYERS[1], 49.6),
            layer(LAYERS[2], 49.0),
            layer(LAYERS[3], 60.0),
        ];
        let why = own_work(&cheaper, "duplicates-10", "lease");
        assert!(why.contains("takes -0.40 µs a record"), "{why}");
        assert!(
            why.contains("takes -0.60 µs against it, -1.00 µs against"),
            "{why}"
        );
        // Without the loop's figure, the layers are not explained.
        let partial = [lines[0].clone(), lines[1].clone(), lines[3].clone()];
        assert!(!own_work(&partial, "duplicates-10", "lease").contains("layer by layer"));
        let mut with_alone = lines.to_vec();
        with_alone.push(json!({"scenario": "toolkit-alone", "what": "redelivered duplicate, pre-checked and replayed", "mode": "lease", "cpu_us_per_record": 4.5}));
        let why = own_work(&with_alone, "duplicates-10", "lease");
        assert!(why.contains("the whole path takes 4.5 µs)."), "{why}");
        // Another mode's figures are not borrowed, and other scenarios do not cite them.
        assert!(!own_work(&lines, "duplicates-10", "optimistic").contains("layer by layer"));
        assert!(!own_work(&lines, "fresh-10", "lease").contains("layer by layer"));
    }

    #[test]
    fn each_scenario_names_only_the_work_it_does() {
        for (scenario, mode) in [
            ("fresh-10", "optimistic"),
            ("fresh-100", "lease"),
            ("mixed-10", "lease"),
        ] {
            assert!(
                extra_steps(scenario, mode).contains("serializes the result"),
                "{scenario}"
            );
        }
        assert!(extra_steps("retries-10", "optimistic").contains("serializes the result"));
        for (scenario, mode) in [
            ("duplicates-10", "optimistic"),
            ("duplicates-10", "lease"),
            ("retries-10", "lease"),
        ] {
            assert!(
                !extra_steps(scenario, mode).contains("serializes"),
                "{scenario} {mode}"
            );
        }
        for mode in ["optimistic", "lease"] {
            assert!(
                !extra_steps("fresh-100", mode).contains("decodes"),
                "{mode}"
            );
            assert!(
                !extra_steps("duplicates-10", mode).contains("flight"),
                "{mode}"
            );
        }
        assert!(extra_steps("mixed-10", "optimistic").contains("decodes"));
        assert!(extra_steps("retries-10", "lease").contains("flight"));
        assert!(!extra_steps("fresh-10", "sequenced").contains("payload"));
    }
}
