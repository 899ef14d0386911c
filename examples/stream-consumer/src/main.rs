//! `stream-consumer`: the Kinesis and DynamoDB Streams consumer users deploy. Its contract is
//! documented in the crate's library part, `src/lib.rs`, with the wiring its tests reuse.

use std::sync::Arc;

use stream_consumer::{sdk_config, stream_consumer, Settings};

// One invocation at a time, its records in order on one thread.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    lambda_runtime::tracing::init_default_subscriber();
    // The default panic hook prints the panic message, which may quote the input; the panic
    // is caught and its record reported: log only where it happened.
    std::panic::set_hook(Box::new(|info| {
        let location = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        tracing::error!(location, "a handler panicked (its message is not logged)");
    }));
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
