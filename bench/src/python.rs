//! The Powertools for AWS Lambda (Python) baseline: a worker process fed one batch per line.

use std::process::Stdio;

use aws_lambda_events::sqs::SqsEvent;
use order_consumer::Tables;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// `scripts/bench_powertools.py`, from the repository root.
pub const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../scripts/bench_powertools.py"
);

/// The Powertools worker process.
pub struct Python {
    pub child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Python {
    /// Starts a worker on the tables `t`, reaching DynamoDB at `endpoint`.
    pub fn start(python: &str, t: &Tables, endpoint: &str) -> Python {
        let mut child = tokio::process::Command::new(python)
            .arg(SCRIPT)
            .arg("worker")
            .env("AWS_ENDPOINT_URL_DYNAMODB", endpoint)
            .env("IDEMPOTENCY_TABLE", &t.idempotency)
            .env("LEDGER_TABLE", &t.ledger)
            .env("AWS_LAMBDA_FUNCTION_NAME", "order-consumer-python")
            .env("POWERTOOLS_SERVICE_NAME", "bench")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start the Powertools worker");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        Python {
            child,
            stdin,
            stdout,
        }
    }

    /// Processes `event`; the worker's answer (`ms`, `cpu_ms`, `calls`, `wcu`,
    /// `refused_wcu`, `rcu`, `failures`, `operations`).
    pub async fn run(&mut self, event: &SqsEvent) -> Value {
        let line = json!({ "event": event }).to_string() + "\n";
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        let answer = self
            .stdout
            .next_line()
            .await
            .unwrap()
            .expect("worker answered");
        serde_json::from_str(&answer).unwrap()
    }
}
