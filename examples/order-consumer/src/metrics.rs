//! The function's metrics: the library's (`lambda_idempotency::metrics`: records by outcome,
//! handler and batch latency, DynamoDB calls) in CloudWatch Embedded Metric Format, one JSON
//! line on stdout per invocation, under the namespace [`NAMESPACE`] with the function's name
//! as the dimension `FunctionName` and the invocation's request id as the property
//! `RequestId`.

use lambda_idempotency::lambda_runtime::Context;
use metrics_cloudwatch_embedded::{Builder, Collector};

/// The CloudWatch namespace of the metrics.
pub const NAMESPACE: &str = "LambdaIdempotency";

/// Installs the EMF recorder for the function `function_name` (once per process).
pub fn install(function_name: &str) -> Result<&'static Collector, lambda_runtime::Error> {
    Builder::new()
        .cloudwatch_namespace(NAMESPACE)
        .with_dimension("FunctionName", function_name.to_owned())
        .init()
        .map_err(|err| format!("cannot install the metrics recorder: {err}").into())
}

/// Writes the invocation's metrics as one EMF line on stdout (nothing when none changed).
pub fn flush(collector: &Collector, context: &Context) {
    collector.set_property("RequestId", context.request_id.clone());
    if let Err(err) = collector.flush(std::io::stdout().lock()) {
        tracing::warn!(error = %err, "could not write the invocation's metrics");
    }
}
