//! Runs a compiled function binary as a Lambda "container": its process polls the Runtime API
//! emulator, with the environment Lambda gives and DynamoDB Local's endpoint.

use std::process::Stdio;

use tokio::process::{Child, Command};

/// Starts the function binary at `binary` (a `CARGO_BIN_EXE_<name>` path) as the function
/// `name`, polling `runtime_api`, with `env` added to the Lambda environment. DynamoDB is
/// DynamoDB Local (`AWS_ENDPOINT_URL_DYNAMODB` of the test, if set) unless `env` names
/// another endpoint. The process is killed when the handle is dropped.
pub fn spawn(binary: &str, name: &str, runtime_api: &str, env: &[(&str, &str)]) -> Child {
    start(binary, name, runtime_api, env, Stdio::null())
}

/// As [`spawn`], with the process's stdout piped (`Child::stdout`), to read what the
/// function writes there (its metrics lines).
pub fn spawn_with_stdout(
    binary: &str,
    name: &str,
    runtime_api: &str,
    env: &[(&str, &str)],
) -> Child {
    start(binary, name, runtime_api, env, Stdio::piped())
}

fn start(
    binary: &str,
    name: &str,
    runtime_api: &str,
    env: &[(&str, &str)],
    stdout: Stdio,
) -> Child {
    let endpoint = std::env::var("AWS_ENDPOINT_URL_DYNAMODB").unwrap_or_default();
    let mut command = Command::new(binary);
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("AWS_LAMBDA_RUNTIME_API", runtime_api)
        .env("AWS_LAMBDA_FUNCTION_NAME", name)
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "2026/11/22/[$LATEST]e2e")
        .env("AWS_LAMBDA_LOG_GROUP_NAME", format!("/aws/lambda/{name}"))
        .env("AWS_ENDPOINT_URL_DYNAMODB", endpoint)
        .env("AWS_ACCESS_KEY_ID", "local")
        .env("AWS_SECRET_ACCESS_KEY", "local")
        .env("AWS_REGION", "us-east-1")
        .env("RUST_LOG", "error");
    for (key, value) in env {
        command.env(key, value);
    }
    command
        .stdout(stdout)
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("start {binary}: {e}"))
}
