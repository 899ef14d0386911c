//! The scenarios: batches of orders, fresh or already completed, and what is measured of
//! each implementation.

use std::collections::BTreeSet;
use std::time::{Duration, Instant, SystemTime};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::clock::epoch_ms;
use lambda_idempotency_test_support::dynamodb::CallCounter;
use lambda_runtime::Context;
use serde_json::json;

use crate::{allocations, instructions};

/// One scenario: its batches' size, how many records of each were completed before, whether
/// SQS marks those as delivered before, and whether the toolkit keeps a local cache.
#[derive(Debug, Clone, Copy)]
pub struct Scenario {
    pub name: &'static str,
    pub batch_size: usize,
    /// Records per batch that were completed before (duplicates).
    pub duplicates: usize,
    /// The duplicates carry `ApproximateReceiveCount` 2 (SQS redelivered them: a consumer
    /// died before the ack, a response was lost); otherwise 1 (a producer sent them again).
    pub redelivered: bool,
    pub cache: bool,
}

const fn scenario(name: &'static str, batch_size: usize, duplicates: usize) -> Scenario {
    Scenario {
        name,
        batch_size,
        duplicates,
        redelivered: true,
        cache: false,
    }
}

pub const SCENARIOS: [Scenario; 7] = [
    scenario("fresh-10", 10, 0),
    scenario("duplicates-10", 10, 10),
    Scenario {
        redelivered: false,
        ..scenario("retries-10", 10, 10)
    },
    scenario("mixed-10", 10, 5),
    scenario("fresh-100", 100, 0),
    Scenario {
        cache: true,
        ..scenario("duplicates-10-cached", 10, 10)
    },
    Scenario {
        cache: true,
        ..scenario("mixed-10-cached", 10, 5)
    },
];

/// The network delay added to every DynamoDB request, in milliseconds: none (DynamoDB
/// Local on loopback), [`REALISTIC_MS`], and a delay large enough that batch time over it
/// counts the round trips on the critical path.
pub const ADDED_LATENCY_MS: [u64; 3] = [0, REALISTIC_MS, ROUND_TRIP_PROBE_MS];

/// A realistic in-region figure: AWS documents DynamoDB as answering in single-digit
/// milliseconds; 8 ms is the upper end of that, nearer what a `TransactWriteItems` takes
/// from a function in the same region than a `GetItem`.
pub const REALISTIC_MS: u64 = 8;

/// The delay from which round trips on the critical path follow: (batch time at this delay -
/// batch time at 0 ms) / this delay.
pub const ROUND_TRIP_PROBE_MS: u64 = 50;

/// How many times more batches duplicates-10 (redelivered duplicates, no cache) runs at 0 ms:
/// its batches are the shortest timed against DynamoDB (one shared `BatchGetItem`, a few
/// milliseconds), so one pause of DynamoDB Local's JVM weighs most on their throughput; more
/// batches spread it.
pub const SHORT_BATCHES_FACTOR: usize = 4;

/// How many batches `scenario` runs out of `batches` at `added_ms`: a quarter for batches of
/// 100, a half at the realistic delay and a quarter at the round-trip probe,
/// [`SHORT_BATCHES_FACTOR`] times as many for redelivered duplicates without a cache at 0 ms;
/// never fewer than 5.
pub fn batches_at(batches: usize, scenario: &Scenario, added_ms: u64) -> usize {
    let short = scenario.duplicates == scenario.batch_size && scenario.redelivered;
    let n = match (scenario.batch_size >= 100, added_ms) {
        (true, _) | (false, ROUND_TRIP_PROBE_MS) => batches / 4,
        (false, 0) if short && !scenario.cache => batches * SHORT_BATCHES_FACTOR,
        (false, 0) => batches,
        (false, _) => batches / 2,
    };
    n.max(5)
}

/// Whether `scenario` runs at `added_ms`: every scenario without added latency; with it,
/// the batches of 10 a new container meets (no cache).
pub fn runs_at(scenario: &Scenario, added_ms: u64) -> bool {
    added_ms == 0 || (scenario.batch_size == 10 && !scenario.cache)
}

/// Timings and counts of one implementation in one scenario.
#[derive(Debug, Default, Clone)]
pub struct Sample {
    pub latencies_ms: Vec<f64>,
    pub records: usize,
    pub busy: Duration,
    pub calls: usize,
    pub wcu: f64,
    /// Write units of writes refused by their condition (DynamoDB charges them; DynamoDB
    /// Local reports none): estimated by the call counter.
    pub refused_wcu: f64,
    pub rcu: f64,
    /// CPU time the client spent on its batches (this process's, or the Python worker's).
    pub cpu: Duration,
    /// Heap allocations made during its batches, on every thread of this process (`None`
    /// for the Python worker, which does not count them).
    pub allocations: Option<u64>,
    /// The DynamoDB operations its batches sent (`PutItem`, `BatchGetItem`, ...).
    pub operations: BTreeSet<String>,
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
    /// Takes the calls, capacity units and operations that `counter` counted during the
    /// batches. Panics on an operation the counter does not name ("Other"): the warm-up
    /// check compares operations by name.
    pub fn count(&mut self, counter: &CallCounter) {
        self.calls = counter.total();
        self.wcu = counter.capacity_units();
        self.refused_wcu = counter.refused_write_units();
        self.rcu = counter.read_units();
        self.operations = counter.all().into_keys().map(String::from).collect();
        assert!(
            !self.operations.contains("Other"),
            "an operation the call counter does not name: {:?}",
            self.operations
        );
    }
}

/// One implementation's batch, timed from [`Timed::start`] to [`Timed::finish`]: its wall
/// time, the process's CPU time and heap allocations, and under callgrind its instructions
/// ([`instructions`]).
pub struct Timed {
    started: Instant,
    cpu: Duration,
    allocated: u64,
}

impl Timed {
    pub fn start() -> Self {
        let timed = Self {
            started: Instant::now(),
            cpu: process_cpu(),
            allocated: allocations::count(),
        };
        instructions::batch_started();
        timed
    }

    /// The batch of `records` records ended: its figures added to `sample`, and its
    /// instructions labelled with its `[scenario, implementation, mode]`.
    pub fn finish(self, sample: &mut Sample, records: usize, label: [&str; 3]) {
        let [scenario, implementation, mode] = label;
        instructions::batch_finished(scenario, implementation, mode, records);
        let took = self.started.elapsed();
        sample.cpu += process_cpu() - self.cpu;
        *sample.allocations.get_or_insert(0) += allocations::count() - self.allocated;
        sample.latencies_ms.push(took.as_secs_f64() * 1000.0);
        sample.busy += took;
        sample.records += records;
    }
}

/// Record `i` of batch `batch`: an order over seven accounts, received once so far.
pub fn order_message(scenario: &str, mode: &str, batch: usize, i: usize) -> SqsMessage {
    let event_id = format!("{scenario}-{mode}-{batch}-{i}");
    let mut m = SqsMessage::default();
    m.message_id = Some(format!("{:08x}-0000-4000-8000-{:012}", batch, i));
    m.body = Some(
        json!({"eventId": event_id, "account": format!("acct-{}", i % 7), "amount": (i % 13) as i64 - 3})
            .to_string(),
    );
    m.event_source = Some("aws:sqs".into());
    m.attributes
        .insert("ApproximateReceiveCount".into(), "1".into());
    m
}

/// Batch `b` of a scenario: its first `duplicates` records are those of the priming batch.
pub fn batch(s: &Scenario, mode: &str, b: usize) -> (SqsEvent, SqsEvent) {
    let mut timed = SqsEvent::default();
    let mut prime = SqsEvent::default();
    for i in 0..s.batch_size {
        let mut m = order_message(s.name, mode, b, i);
        if i < s.duplicates {
            prime.records.push(m.clone());
            if s.redelivered {
                m.attributes
                    .insert("ApproximateReceiveCount".into(), "2".into());
            }
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

/// The CPU time this process has used so far (every thread).
pub fn process_cpu() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for clock_gettime to fill.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID)");
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}
