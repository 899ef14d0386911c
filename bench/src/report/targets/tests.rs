//! The targets' rows and explanations, from made-up JSON lines.

use serde_json::json;

use super::*;

/// The targets section of `lines`.
fn targets_of(lines: &[Value]) -> String {
    let mut md = String::new();
    targets(&mut md, lines);
    md
}

/// Asserts that `md` holds each of `rows`.
fn assert_holds(md: &str, rows: &[&str]) {
    for row in rows {
        assert!(md.contains(row), "{row} in {md}");
    }
}

#[test]
fn a_client_cpu_miss_names_the_counted_allocations_beside_the_raw_requests() {
    let line = |implementation: &str, allocations: Value| {
        json!({"scenario": "fresh-10", "added_latency_ms": 0, "implementation": implementation,
               "mode": "optimistic", "allocations_per_record": allocations})
    };
    let ours = line("lambda-idempotency", json!(504.5));
    let lines = [ours.clone(), line("raw-dynamodb", json!(450.0))];
    let said = allocations_beside(&lines, &ours, "fresh-10", "optimistic");
    assert!(
        said.contains("504.5 heap allocations a record against the raw requests' 450 (+12%"),
        "{said}"
    );
    // Without the raw requests' count (or the toolkit's), nothing is said.
    let without = [ours.clone(), line("raw-dynamodb", Value::Null)];
    assert_eq!(
        allocations_beside(&without, &ours, "fresh-10", "optimistic"),
        ""
    );
    let uncounted = line("lambda-idempotency", Value::Null);
    assert_eq!(
        allocations_beside(&lines, &uncounted, "fresh-10", "optimistic"),
        ""
    );
}

#[test]
fn the_client_work_target_is_decided_by_instructions_where_they_were_counted() {
    let line = |implementation: &str, cpu: f64, instructions: Option<f64>| {
        json!({"scenario": "fresh-10", "added_latency_ms": 0, "implementation": implementation,
               "mode": "lease", "client_cpu_us_per_record": cpu,
               "instructions_per_record": instructions})
    };
    let row = |lines: &[Value]| {
        let (mut md, mut why) = (String::new(), Vec::new());
        client_work(&mut md, lines, &mut why);
        (md, why)
    };
    // CPU time 15% over, instructions 5% over: met, both shown.
    let counted = [
        line("lambda-idempotency", 115.0, Some(1050.0)),
        line("raw-dynamodb", 100.0, Some(1000.0)),
    ];
    let (md, why) = row(&counted);
    assert!(
        md.contains(
            "| instructions +5.0% (1050 vs 1000); CPU time +15.0% (115 µs vs 100 µs) | met |"
        ),
        "{md}"
    );
    assert!(why.is_empty(), "{why:?}");
    // The other way round: missed, and why names the instructions.
    let counted = [
        line("lambda-idempotency", 105.0, Some(1150.0)),
        line("raw-dynamodb", 100.0, Some(1000.0)),
    ];
    let (md, why) = row(&counted);
    assert!(md.ends_with("| missed |\n"), "{md}");
    assert!(
        why[0].contains(
            "150 more instructions per record than the raw requests (+15%; 5 µs more CPU time)"
        ),
        "{why:?}"
    );
    // Not counted: CPU time decides.
    let timed = [
        line("lambda-idempotency", 115.0, None),
        line("raw-dynamodb", 100.0, None),
    ];
    let (md, why) = row(&timed);
    assert!(
        md.contains("| CPU time +15.0% (115 µs vs 100 µs) | missed |"),
        "{md}"
    );
    assert!(
        why[0].contains("15 µs more client CPU per record than the raw requests (+15%)"),
        "{why:?}"
    );
}

#[test]
fn each_mode_is_compared_with_the_powertools_batches_beside_it() {
    let line = |implementation: &str, mode: &str, rate: f64| {
        json!({"scenario": "duplicates-10", "added_latency_ms": 0, "implementation": implementation,
               "mode": mode, "records_per_sec": rate})
    };
    // Powertools ran slower in the lease run's minutes than in the optimistic run's.
    let lines = [
        line("lambda-idempotency", "optimistic", 1100.0),
        line("raw-dynamodb", "optimistic", 1200.0),
        line(POWERTOOLS, "optimistic", 100.0),
        line("lambda-idempotency", "lease", 880.0),
        line("raw-dynamodb", "lease", 950.0),
        line(POWERTOOLS, "lease", 80.0),
    ];
    assert_holds(
        &targets_of(&lines),
        &[
            "| duplicates-10 at 0 ms: throughput at least 10x Powertools (optimistic) | 11.0x | met |",
            "| duplicates-10 at 0 ms: throughput at least 10x Powertools (lease) | 11.0x | met |",
        ],
    );
    // A miss is explained with the raw requests over the same Powertools batches, in
    // either order of the lines.
    for lines in [
        [
            line("lambda-idempotency", "lease", 700.0),
            line("raw-dynamodb", "lease", 760.0),
            line(POWERTOOLS, "optimistic", 100.0),
            line(POWERTOOLS, "lease", 80.0),
        ],
        [
            line("lambda-idempotency", "optimistic", 400.0),
            line("raw-dynamodb", "optimistic", 500.0),
            line(POWERTOOLS, "lease", 80.0),
            line(POWERTOOLS, "optimistic", 50.0),
        ],
    ] {
        let md = targets_of(&lines);
        let said = if lines[0]["mode"] == "lease" {
            "- duplicates-10 at 0 ms, lease: 8.8x Powertools' throughput. The raw requests alone reach 9.5x"
        } else {
            "- duplicates-10 at 0 ms, optimistic: 8.0x Powertools' throughput. The raw requests alone reach 10.0x"
        };
        assert!(md.contains(said), "{said} in {md}");
    }
}

#[test]
fn each_mode_s_round_trips_are_shown_beside_powertools_in_the_same_run() {
    let line = |implementation: &str, mode: &str, added_ms: u64, median: f64| {
        json!({"scenario": "fresh-10", "added_latency_ms": added_ms, "implementation": implementation,
               "mode": mode, "median_ms": median})
    };
    let mut lines = Vec::new();
    // (ours, Powertools) medians at 8 and 50 ms: 1 and 2 round trips; 30 and 31.
    for (mode, ours, py) in [
        ("optimistic", (20.0, 62.0), (300.0, 1560.0)),
        ("lease", (30.0, 114.0), (310.0, 1612.0)),
    ] {
        lines.push(line("lambda-idempotency", mode, 8, ours.0));
        lines.push(line("lambda-idempotency", mode, 50, ours.1));
        lines.push(line(POWERTOOLS, mode, 8, py.0));
        lines.push(line(POWERTOOLS, mode, 50, py.1));
    }
    assert_holds(
        &targets_of(&lines),
        &[
            "| fresh-10: 1 critical-path round trips per batch (optimistic) | 1.0 (Powertools: 30.0) | met |",
            "| fresh-10: 2 critical-path round trips per batch (lease) | 2.0 (Powertools: 31.0) | met |",
        ],
    );
    let md = super::super::report(
        &lines,
        40,
        super::super::Took {
            build_secs: None,
            run_secs: 0,
        },
    );
    assert_holds(
        &md,
        &[
            "| fresh-10 | powertools-python | lease (beside optimistic) | 30.0 |",
            "| fresh-10 | powertools-python | lease (beside lease) | 31.0 |",
            "| fresh-10 | 8 | powertools-python | lease (beside lease) | 310.0 |",
        ],
    );
}
