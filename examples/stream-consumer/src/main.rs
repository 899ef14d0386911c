//! `stream-consumer`: the Kinesis and DynamoDB Streams consumer users deploy. Its contract is
//! documented in the crate's library part, `src/lib.rs`, with the wiring its tests reuse.

use std::sync::Arc;

use stream_consumer::{sdk_config, stream_consumer, Settings};

// One invocation at a time, its records in order on one thread.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    lambda_runtime::tracing::init_default_subscriber();
    order_consumer::install_panic_hook();
    let settings = Settings::from_env()?;
    let client = aws_sdk_dynamodb::Client::new(&sdk_config().await);
    let consumer = Arc::new(stream_consumer(client, &settings));
    tracing::info!(mode = ?settings.mode, "stream-consumer ready");
    lambda_runtime::run(lambda_runtime::service_fn(move |event| {
        let consumer = Arc::clone(&consumer);
        async move { consumer.handle(event).await }
    }))
    .await
}
