//! The scenarios: batches of orders, fresh or already completed, and what is measured of
//! each implementation.

use std::time::{Duration, SystemTime};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::clock::epoch_ms;
use lambda_runtime::Context;
use serde_json::json;

/// One scenario: its batches' size, how many records of each were completed before, and
/// whether the toolkit keeps a local cache.
#[derive(Debug, Clone, Copy)]
pub struct Scenario {
    pub name: &'static str,
    pub batch_size: usize,
    /// Records per batch that were completed before (duplicates).
    pub duplicates: usize,
    pub cache: bool,
}

pub const SCENARIOS: [Scenario; 6] = [
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
pub struct Sample {
    pub latencies_ms: Vec<f64>,
    pub records: usize,
    pub busy: Duration,
    pub calls: usize,
    pub wcu: f64,
}

impl Sample {
    /// The `p`th percentile of the batch latencies.
    pub fn percentile(&self, p: f64) -> f64 {
        let mut sorted = self.latencies_ms.clone();
        sorted.sort_by(f64::total_cmp);
        if sorted.is_empty() {
            return f64::NAN;
        }
        let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
        sorted[rank]
    }
    /// Records processed per second of work.
    pub fn records_per_sec(&self) -> f64 {
        self.records as f64 / self.busy.as_secs_f64()
    }
    /// `x` per record.
    pub fn per_record(&self, x: f64) -> f64 {
        x / self.records as f64
    }
}

/// Record `i` of batch `batch`: an order over seven accounts.
pub fn order_message(scenario: &str, mode: &str, batch: usize, i: usize) -> SqsMessage {
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
pub fn batch(s: &Scenario, mode: &str, b: usize) -> (SqsEvent, SqsEvent) {
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

/// A context with a deadline a minute away.
pub fn context() -> Context {
    let mut c = Context::default();
    c.deadline = epoch_ms(SystemTime::now() + Duration::from_secs(60));
    c.request_id = "bench".into();
    c
}
