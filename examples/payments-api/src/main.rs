//! `payments-api`: the HTTP API users deploy (API Gateway HTTP API or a Function URL). Its
//! contract is documented in the crate's library part, `src/lib.rs`, with the wiring its
//! tests reuse.

use payments_api::{sdk_config, service, settings_from_env};

// One request at a time: Lambda gives a function one event at a time, and a single-threaded
// runtime starts faster and uses less memory.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let settings = settings_from_env()?;
    let client = aws_sdk_dynamodb::Client::new(&sdk_config().await);
    tracing::info!(mode = ?settings.mode, "payments-api ready");
    lambda_http::run(service(client, &settings)).await
}
