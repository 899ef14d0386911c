//! `order-consumer`: the SQS-triggered Lambda function users deploy. Its contract (the
//! environment, the message body, the effect) is documented in the crate's library part,
//! `src/lib.rs`, with the wiring that the tests and the benchmarks reuse.

use lambda_idempotency::aws_lambda_events::sqs::SqsEvent;
use lambda_idempotency::lambda_runtime::LambdaEvent;
use order_consumer::{metrics, processor, sdk_config, Settings};
use tower::ServiceExt;

// Records concurrent on one thread: a single-threaded runtime starts faster and uses less
// memory. Lambda gives a function one event at a time, except on Lambda Managed Instances,
// where `AWS_LAMBDA_MAX_CONCURRENCY` above 1 makes `run_concurrent` poll for that many
// events at once (on this same thread): the invocations then share the processor's single
// flight and local cache, so a key in several of them runs once in the process.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    lambda_runtime::tracing::init_default_subscriber();
    order_consumer::install_panic_hook();
    let settings = Settings::from_env()?;
    let client = aws_sdk_dynamodb::Client::new(&sdk_config().await);
    let processor = processor(client, &settings);
    tracing::info!(
        mode = ?settings.mode,
        expires_after_secs = settings.expires_after.as_secs(),
        "order-consumer ready"
    );
    let function_name = std::env::var("AWS_LAMBDA_FUNCTION_NAME").unwrap_or_default();
    let collector = metrics::install(&function_name)?;
    lambda_runtime::run_concurrent(lambda_runtime::service_fn(
        move |event: LambdaEvent<SqsEvent>| {
            let processor = processor.clone();
            async move {
                let context = event.context.clone();
                let response = processor.oneshot(event).await;
                // One EMF line per invocation: the records' outcomes, latencies, DynamoDB calls
                // (with concurrent invocations, what was recorded since the last line).
                metrics::flush(collector, &context);
                response
            }
        },
    ))
    .await
}
