//! `pg-order-consumer`: the order consumer on PostgreSQL, for Lambda. Its contract is in the
//! crate's library part (`src/lib.rs`), with the wiring the tests reuse.

use std::sync::Arc;

use lambda_idempotency::aws_lambda_events::sqs::SqsEvent;
use lambda_idempotency::lambda_runtime::LambdaEvent;
use pg_order_consumer::{connect, processor, Settings, Tables};
use tower::ServiceExt;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    lambda_runtime::tracing::init_default_subscriber();
    order_consumer::install_panic_hook();
    let settings = Settings::from_env()?;
    let store = connect(&settings.database_url)?;
    // A pool too small for the records' transactions is refused here, at start-up.
    let processor = processor(store.clone(), &settings)?;
    let tables = Arc::new(Tables::default());
    // Early, when the database answers; otherwise at the first batch.
    if let Err(err) = tables.ensure(&store).await {
        tracing::warn!(error = %err, "the database is not reachable yet: tables are created at the first batch");
    }
    tracing::info!(mode = ?settings.mode, "pg-order-consumer ready");
    lambda_runtime::run(lambda_runtime::service_fn(
        move |event: LambdaEvent<SqsEvent>| {
            let (store, tables, processor) = (store.clone(), tables.clone(), processor.clone());
            async move {
                // Until the tables exist the invocation fails as a whole: the batch is retried.
                tables.ensure(&store).await?;
                Ok::<_, lambda_runtime::Error>(processor.oneshot(event).await?)
            }
        },
    ))
    .await
}
