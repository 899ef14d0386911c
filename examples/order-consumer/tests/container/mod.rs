//! Runs the compiled `order-consumer` binary as a Lambda "container" against the Runtime API
//! emulator and DynamoDB Local.

// Each test binary uses some of these functions.
#![allow(dead_code)]

use lambda_idempotency_test_support::harness::function;
use order_consumer::Tables;
use tokio::process::Child;

/// Starts one order-consumer process polling `runtime_api`, in `mode` (`optimistic`,
/// `lease` or `sequenced`: passed as `IDEMPOTENCY_MODE`). The process is killed when the
/// handle is dropped.
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
    function::spawn(
        env!("CARGO_BIN_EXE_order-consumer"),
        "order-consumer",
        runtime_api,
        &environment(tables, mode, endpoint),
    )
}

/// As [`spawn`], as on Lambda Managed Instances: `AWS_LAMBDA_MAX_CONCURRENCY` is
/// `max_concurrency`, so the process polls for that many invocations at once.
pub fn spawn_concurrent(
    runtime_api: &str,
    tables: &Tables,
    mode: &str,
    max_concurrency: &str,
) -> Child {
    let endpoint =
        std::env::var("AWS_ENDPOINT_URL_DYNAMODB").expect("AWS_ENDPOINT_URL_DYNAMODB is set");
    let mut env = environment(tables, mode, &endpoint).to_vec();
    env.push(("AWS_LAMBDA_MAX_CONCURRENCY", max_concurrency));
    function::spawn(
        env!("CARGO_BIN_EXE_order-consumer"),
        "order-consumer",
        runtime_api,
        &env,
    )
}

/// As [`spawn`], with the process's stdout piped (its metrics lines).
pub fn spawn_with_stdout(runtime_api: &str, tables: &Tables, mode: &str) -> Child {
    let endpoint =
        std::env::var("AWS_ENDPOINT_URL_DYNAMODB").expect("AWS_ENDPOINT_URL_DYNAMODB is set");
    function::spawn_with_stdout(
        env!("CARGO_BIN_EXE_order-consumer"),
        "order-consumer",
        runtime_api,
        &environment(tables, mode, &endpoint),
    )
}

fn environment<'a>(
    tables: &'a Tables,
    mode: &'a str,
    endpoint: &'a str,
) -> [(&'a str, &'a str); 4] {
    [
        ("AWS_ENDPOINT_URL_DYNAMODB", endpoint),
        ("IDEMPOTENCY_TABLE", &tables.idempotency),
        ("LEDGER_TABLE", &tables.ledger),
        ("IDEMPOTENCY_MODE", mode),
    ]
}
