//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod contract;
pub mod dynamodb;
pub mod fault_proxy;
pub mod faulty_store;
pub mod http1;
pub mod order_consumer;
pub mod runtime_api;
pub mod sqs_sim;
pub mod transactional_contract;

use std::time::{Duration, SystemTime};

use aws_lambda_events::sqs::SqsEvent;
use lambda_idempotency::{epoch_ms, BatchReport, Outcome};
use lambda_runtime::{Context, LambdaEvent};

/// Loads a sample event from `events/`.
pub fn load_event(name: &str) -> SqsEvent {
    let path = format!("{}/events/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A Lambda context whose deadline is `remaining` after `now`.
pub fn context_at(now: SystemTime, remaining: Duration) -> Context {
    let mut context = Context::default();
    // A fresh request id per invocation, as Lambda gives.
    context.request_id = uuid::Uuid::new_v4().to_string();
    context.deadline = epoch_ms(now + remaining);
    context
}

/// An invocation of `event` at `now` with `remaining` time before its deadline.
pub fn invocation(event: SqsEvent, now: SystemTime, remaining: Duration) -> LambdaEvent<SqsEvent> {
    LambdaEvent::new(event, context_at(now, remaining))
}

/// The body of the sample order events.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Order {
    pub event_id: String,
    pub account: String,
    pub amount: i64,
}

/// Each record's outcome, in event order.
pub fn outcomes<T>(report: &BatchReport<T>) -> Vec<Outcome> {
    report.records.iter().map(|r| r.outcome).collect()
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
