//! Runs the compiled `order-consumer` binary as a Lambda "container" against the Runtime API
//! emulator and DynamoDB Local.

use std::process::Stdio;

use order_consumer::Tables;
use tokio::process::{Child, Command};

/// Starts one order-consumer process polling `runtime_api`, in `mode`
/// (`optimistic` or `lease`). The process is killed when the handle is dropped.
pub fn spawn(runtime_api: &str, tables: &Tables, mode: &str) -> Child {
    let endpoint =
        std::env::var("AWS_ENDPOINT_URL_DYNAMODB").expect("AWS_ENDPOINT_URL_DYNAMODB is set");
    spawn_with_endpoint(runtime_api, tables, mode, &endpoint)
}

/// As [`spawn`], with the DynamoDB endpoint given (a fault proxy, say).
pub fn spawn_with_endpoint(
    runtime_api: &str,
    tables: &Tables,
    mode: &str,
    endpoint: &str,
) -> Child {
    Command::new(env!("CARGO_BIN_EXE_order-consumer"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("AWS_LAMBDA_RUNTIME_API", runtime_api)
        .env("AWS_LAMBDA_FUNCTION_NAME", "order-consumer")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "2026/11/21/[$LATEST]e2e")
        .env("AWS_LAMBDA_LOG_GROUP_NAME", "/aws/lambda/order-consumer")
        .env("AWS_ENDPOINT_URL_DYNAMODB", endpoint)
        .env("AWS_ACCESS_KEY_ID", "local")
        .env("AWS_SECRET_ACCESS_KEY", "local")
        .env("AWS_REGION", "us-east-1")
        .env("IDEMPOTENCY_TABLE", &tables.idempotency)
        .env("LEDGER_TABLE", &tables.ledger)
        .env("IDEMPOTENCY_MODE", mode)
        // The chaos test's invocations last 2.2 s: start records with 1 s left, not 16.
        .env("DEADLINE_MARGIN_MS", "1000")
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("start order-consumer")
}
