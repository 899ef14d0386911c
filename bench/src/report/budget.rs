//! The allocation budget: how many heap allocations per record the toolkit may make beyond
//! the raw requests' in each batch scenario at 0 ms. Unlike CPU time, the count is nearly
//! the same in every run and in debug and release builds (within about one allocation a
//! record), so a copy put back on the record's path shows at once: CI's smoke fails on it
//! (`BENCH_ENFORCE_BUDGET=1`, set by `scripts/bench.sh`).

use std::fmt::Write as _;

use serde_json::Value;

use super::{find, num};

/// Allocations per record beyond the raw requests' that each scenario and mode may make:
/// the figures measured when the budget was set (2026-11-27: fresh-10 35, 44 and 48;
/// duplicates-10 14, 14 and 26; retries-10 40, 12 and 55; mixed-10 26 and 30) and 8 more
/// (the most a figure was seen to move between runs is about 3).
const BUDGET: [(&str, &str, f64); 11] = [
    ("fresh-10", "optimistic", 43.0),
    ("fresh-10", "lease", 52.0),
    ("fresh-10", "sequenced", 56.0),
    ("duplicates-10", "optimistic", 22.0),
    ("duplicates-10", "lease", 22.0),
    ("duplicates-10", "sequenced", 34.0),
    ("retries-10", "optimistic", 48.0),
    ("retries-10", "lease", 20.0),
    ("retries-10", "sequenced", 63.0),
    ("mixed-10", "optimistic", 34.0),
    ("mixed-10", "lease", 38.0),
];

/// One scenario's count against its budget.
#[derive(Debug, Clone, PartialEq)]
pub struct Spent {
    pub scenario: &'static str,
    pub mode: &'static str,
    /// The toolkit's allocations per record beyond the raw requests'.
    pub extra: f64,
    pub budget: f64,
}

impl Spent {
    pub fn over(&self) -> bool {
        self.extra > self.budget
    }
}

/// Each budgeted scenario the run measured, with its count.
pub fn spent(lines: &[Value]) -> Vec<Spent> {
    let key = "allocations_per_record";
    BUDGET
        .iter()
        .filter_map(|&(scenario, mode, budget)| {
            let ours = num(find(lines, scenario, 0, "lambda-idempotency", mode), key)?;
            let raw = num(find(lines, scenario, 0, "raw-dynamodb", mode), key)?;
            Some(Spent {
                scenario,
                mode,
                extra: ours - raw,
                budget,
            })
        })
        .collect()
}

/// The budget's section of the report.
pub(super) fn budget(md: &mut String, lines: &[Value]) {
    let spent = spent(lines);
    if spent.is_empty() {
        return;
    }
    let _ = writeln!(md, "\n## Allocation budget\n");
    let _ = writeln!(md, "The toolkit's heap allocations per record beyond the raw requests', against the budget in `bench/src/report/budget.rs` (the count when it was set, and 8 more). The count barely changes between runs or builds, so CI's smoke fails when a scenario is over budget: a copy put back on the record's path.\n");
    let _ = writeln!(
        md,
        "| scenario | mode | beyond the raw requests | budget | result |"
    );
    let _ = writeln!(md, "| --- | --- | ---: | ---: | --- |");
    for s in &spent {
        let result = if s.over() { "over" } else { "within" };
        let _ = writeln!(
            md,
            "| {} | {} | {:+.1} | {:+.0} | {result} |",
            s.scenario, s.mode, s.extra, s.budget
        );
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn line(implementation: &str, mode: &str, allocations: f64) -> Value {
        json!({"scenario": "duplicates-10", "added_latency_ms": 0, "implementation": implementation,
               "mode": mode, "allocations_per_record": allocations})
    }

    #[test]
    fn a_scenario_over_its_budget_is_named_over() {
        let lines = [
            line("lambda-idempotency", "optimistic", 89.0),
            line("raw-dynamodb", "optimistic", 67.0),
            line("lambda-idempotency", "lease", 81.0),
            line("raw-dynamodb", "lease", 67.0),
        ];
        let spent = spent(&lines);
        assert_eq!(spent.len(), 2);
        assert!(spent[0].extra == 22.0 && !spent[0].over(), "{spent:?}");
        assert!(spent[1].extra == 14.0 && !spent[1].over(), "{spent:?}");
        let over = [
            line("lambda-idempotency", "optimistic", 89.5),
            line("raw-dynamodb", "optimistic", 67.0),
        ];
        assert!(spent_over(&over));
        let mut md = String::new();
        budget(&mut md, &over);
        assert!(
            md.contains("| duplicates-10 | optimistic | +22.5 | +22 | over |"),
            "{md}"
        );
    }

    #[test]
    fn a_run_without_counts_spends_nothing() {
        let lines = [json!({"scenario": "duplicates-10", "added_latency_ms": 0,
                            "implementation": "lambda-idempotency", "mode": "optimistic"})];
        assert!(spent(&lines).is_empty());
        let mut md = String::new();
        budget(&mut md, &lines);
        assert!(md.is_empty());
    }

    fn spent_over(lines: &[Value]) -> bool {
        spent(lines).iter().any(Spent::over)
    }
}
