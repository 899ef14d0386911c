//! Test support for `lambda-idempotency`, shared by the library's integration tests and the
//! order-consumer example's.
//!
//! Light helpers, for unit-style and store tests:
//! - this module: invocations and contexts, the sample events of `events/`, each record's
//!   outcome and the reported failures;
//! - [`faulty_store`]: a store wrapper that injects one fault at a chosen call;
//! - [`contract`] and [`transactional_contract`]: the store contract suites (the library's
//!   testing kit, `lambda_idempotency::testing`), run against every store with
//!   [`store_contract_suite!`] and [`transactional_contract_suite!`];
//! - [`dynamodb`]: clients and fresh tables on DynamoDB Local; [`redis`]: stores on the test
//!   Redis; [`postgres`]: stores on fresh tables of the test PostgreSQL.
//!
//! The heavy harness, behind the `harness` feature, for the tests that drive a real
//! function binary or a misbehaving network: `harness::runtime_api` (a Lambda Runtime API
//! emulator), `harness::sqs_sim` (an SQS queue with at-least-once delivery) and
//! `harness::fault_proxy` (a fault-injecting proxy in front of DynamoDB Local).

#![warn(missing_docs)]

pub mod dynamodb;
pub mod faulty_store;
#[cfg(feature = "harness")]
pub mod harness;
pub mod postgres;
pub mod redis;

pub use lambda_idempotency::testing::{contract, transactional as transactional_contract};
pub use lambda_idempotency::{store_contract_suite, transactional_contract_suite};

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use aws_lambda_events::sqs::SqsEvent;
use lambda_idempotency::batch::BatchReport;
use lambda_idempotency::Outcome;
use lambda_runtime::{Context, LambdaEvent};

/// The path of a sample event in the repository's `events/` directory.
pub fn event_path(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../events")).join(name)
}

/// A sample event from `events/`, as JSON.
pub fn load_event_json(name: &str) -> serde_json::Value {
    let path = event_path(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

/// A sample SQS event from `events/`.
pub fn load_event(name: &str) -> SqsEvent {
    serde_json::from_value(load_event_json(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// A Lambda context whose deadline is `remaining` after `now`, with a fresh request id (the
/// testing kit's).
pub fn context_at(now: SystemTime, remaining: Duration) -> Context {
    lambda_idempotency::testing::context_at(now, remaining)
}

/// An invocation of `event` at `now` with `remaining` time before its deadline.
pub fn invocation(event: SqsEvent, now: SystemTime, remaining: Duration) -> LambdaEvent<SqsEvent> {
    lambda_idempotency::testing::invocation_at(event, now, remaining)
}

/// Each record's outcome, in event order.
pub fn outcomes<T>(report: &BatchReport<T>) -> Vec<Outcome> {
    report.records.iter().map(|r| r.outcome).collect()
}

/// Each record's error type (`Error::error_type`), `None` for a record without an error, in
/// event order.
pub fn error_types<T>(report: &BatchReport<T>) -> Vec<Option<&'static str>> {
    report
        .records
        .iter()
        .map(|r| r.error.as_ref().map(|e| e.error_type()))
        .collect()
}

/// The `itemIdentifier`s of `batchItemFailures`.
pub fn reported<T>(report: &BatchReport<T>) -> Vec<String> {
    report
        .response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect()
}
