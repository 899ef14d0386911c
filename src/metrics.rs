//! Metrics through the [`metrics`](https://docs.rs/metrics) facade (the `metrics` feature):
//! record outcomes, handler and batch latency, and DynamoDB calls. Install any recorder of
//! that ecosystem; for CloudWatch, an Embedded Metric Format exporter such as
//! [`metrics_cloudwatch_embedded`](https://docs.rs/metrics_cloudwatch_embedded) flushed after
//! each invocation writes one EMF line per invocation (the order-consumer example does, with
//! the function name as its dimension).
//!
//! | metric | kind | unit | what |
//! | --- | --- | --- | --- |
//! | `Records<Outcome>` ([`Outcome::metric_name`]) | counter | count | records that ended in that outcome: batch records, whole invocations and the HTTP requests whose method the layer protects (not [`IdempotentFn`](crate::function::IdempotentFn) calls) |
//! | [`HANDLER_LATENCY`] | histogram | milliseconds | each run of a handler (not replays), and of an [`IdempotentFn`](crate::function::IdempotentFn) inside one, by the layer's clock |
//! | [`BATCH_LATENCY`] | histogram | milliseconds | each batch, from its start to its response, by the processor's clock |
//! | [`DYNAMODB_CALLS`] | counter | count | requests the DynamoDB store sent (each send of a retried request counts; the SDK's own retries inside one send do not) |
//!
//! Without the `metrics` feature nothing is recorded and the facade is not a dependency.
//! Units are described to the recorder the first time a metric is recorded: install the
//! recorder before the first invocation.

use std::time::Duration;

use crate::outcome::Outcome;

/// The histogram of handler run times, in milliseconds.
pub const HANDLER_LATENCY: &str = "HandlerLatency";
/// The histogram of batch times, in milliseconds.
pub const BATCH_LATENCY: &str = "BatchLatency";
/// The counter of requests sent to DynamoDB.
pub const DYNAMODB_CALLS: &str = "DynamoDbCalls";

#[cfg(feature = "metrics")]
fn describe() {
    use ::metrics::{describe_counter, describe_histogram, Unit};
    static DESCRIBED: std::sync::Once = std::sync::Once::new();
    DESCRIBED.call_once(|| {
        for outcome in Outcome::ALL {
            describe_counter!(outcome.metric_name(), Unit::Count, "records by outcome");
        }
        describe_histogram!(HANDLER_LATENCY, Unit::Milliseconds, "handler run time");
        describe_histogram!(BATCH_LATENCY, Unit::Milliseconds, "batch time");
        describe_counter!(DYNAMODB_CALLS, Unit::Count, "requests sent to DynamoDB");
    });
}

fn millis(elapsed: Duration) -> f64 {
    elapsed.as_secs_f64() * 1000.0
}

/// Counts a record's outcome.
pub(crate) fn outcome(outcome: Outcome) {
    #[cfg(feature = "metrics")]
    {
        describe();
        ::metrics::counter!(outcome.metric_name()).increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = outcome;
}

/// Records a handler's run time.
pub(crate) fn handler_latency(elapsed: Duration) {
    #[cfg(feature = "metrics")]
    {
        describe();
        ::metrics::histogram!(HANDLER_LATENCY).record(millis(elapsed));
    }
    #[cfg(not(feature = "metrics"))]
    let _ = millis(elapsed);
}

/// Records a batch's time.
pub(crate) fn batch_latency(elapsed: Duration) {
    #[cfg(feature = "metrics")]
    {
        describe();
        ::metrics::histogram!(BATCH_LATENCY).record(millis(elapsed));
    }
    #[cfg(not(feature = "metrics"))]
    let _ = millis(elapsed);
}

/// Counts a request sent to DynamoDB.
#[cfg_attr(not(feature = "dynamodb"), allow(dead_code))]
pub(crate) fn dynamodb_call() {
    #[cfg(feature = "metrics")]
    {
        describe();
        ::metrics::counter!(DYNAMODB_CALLS).increment(1);
    }
}
