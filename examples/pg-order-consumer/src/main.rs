//! `pg-order-consumer`: the order consumer on PostgreSQL, for Lambda. Its contract is in the
//! crate's library part (`src/lib.rs`), with the wiring the tests reuse.

use aws_lambda_events::sqs::SqsEvent;
use lambda_runtime::LambdaEvent;
use pg_order_consumer::{connect, processor, Settings};
use tower::ServiceExt;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    lambda_runtime::tracing::init_default_subscriber();
    order_consumer::install_panic_hook();
    let settings = Settings::from_env()?;
    let store = connect(&settings.database_url).await?;
    // A pool too small for the records' transactions is refused here, at start-up.
    let processor = processor(store, &settings)?;
    tracing::info!(mode = ?settings.mode, "pg-order-consumer ready");
    lambda_runtime::run(lambda_runtime::service_fn(
        move |event: LambdaEvent<SqsEvent>| processor.clone().oneshot(event),
    ))
    .await
}
