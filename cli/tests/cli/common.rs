//! Running the binary, and writing records through the library.

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::key::IdempotencyKey;
use lambda_idempotency::record::{OwnerToken, Status};
use lambda_idempotency::store::{
    Acquire, AcquireRequest, CompleteRequest, DynamoDbStore, Fenced, Store,
};
use lambda_idempotency::{Config, IdempotencyLayer, Outcome};
use lambda_idempotency_test_support as support;
use serde_json::Value;

/// The key prefix of the records the tests write.
pub const PREFIX: &str = "cli-test";

/// A fresh table on DynamoDB Local, or `None` (skipped).
pub struct Rig {
    pub client: Client,
    pub table: String,
    pub store: DynamoDbStore,
}

pub async fn rig() -> Option<Rig> {
    let client = support::dynamodb::client().await?;
    let table = support::dynamodb::create_table(&client).await;
    let store = DynamoDbStore::new(client.clone(), &table);
    Some(Rig {
        client,
        table,
        store,
    })
}

/// One run of the binary.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Stdout as one JSON value.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"))
    }

    /// Stdout as one JSON value per line.
    pub fn json_lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
            .collect()
    }

    pub fn ok(self) -> Self {
        assert_eq!(self.code, 0, "{self:?}");
        self
    }
}

/// The environment variables the CLI reads for its table and attribute names.
pub const CLI_VARIABLES: [&str; 10] = [
    "IDEMPOTENCY_TABLE",
    "IDEMPOTENCY_KEY_ATTRIBUTE",
    "IDEMPOTENCY_STATUS_ATTRIBUTE",
    "IDEMPOTENCY_EXPIRATION_ATTRIBUTE",
    "IDEMPOTENCY_IN_PROGRESS_EXPIRATION_ATTRIBUTE",
    "IDEMPOTENCY_DATA_ATTRIBUTE",
    "IDEMPOTENCY_VALIDATION_ATTRIBUTE",
    "IDEMPOTENCY_OWNER_ATTRIBUTE",
    "IDEMPOTENCY_SORT_KEY_ATTRIBUTE",
    "IDEMPOTENCY_STATIC_PARTITION_KEY",
];

/// Runs the binary with `args`, with DynamoDB Local's endpoint and credentials (region and
/// keys default to the local ones when unset) and none of the CLI's own variables
/// ([`CLI_VARIABLES`]).
pub fn cli(args: &[&str]) -> Run {
    cli_with(args, &[])
}

/// Runs the binary as [`cli`] does, with the environment variables `vars` set.
pub fn cli_with(args: &[&str], vars: &[(&str, &str)]) -> Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lambda-idempotency"));
    command.args(args);
    for name in CLI_VARIABLES {
        command.env_remove(name);
    }
    command.envs(vars.iter().copied());
    for (name, default) in [
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "local"),
        ("AWS_SECRET_ACCESS_KEY", "local"),
    ] {
        let value = std::env::var(name).unwrap_or_else(|_| default.into());
        command.env(name, value);
    }
    if let Ok(endpoint) = std::env::var("AWS_ENDPOINT_URL_DYNAMODB") {
        command.env("AWS_ENDPOINT_URL_DYNAMODB", endpoint);
    }
    let output = command.output().expect("run the binary");
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8(output.stdout).unwrap(),
        stderr: String::from_utf8(output.stderr).unwrap(),
    }
}

/// A string attribute value.
pub fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.into())
}

/// Whether the item at `key` (its key attributes and string values) exists in `store`'s
/// table, read strongly consistent.
pub async fn item_exists(store: &DynamoDbStore, key: &[(&str, &str)]) -> bool {
    let mut get = store
        .client()
        .get_item()
        .table_name(store.table())
        .consistent_read(true);
    for (name, value) in key {
        get = get.key(*name, s(value));
    }
    get.send().await.unwrap().item().is_some()
}

/// The stored id of messageId `id` under [`PREFIX`].
pub fn key_of(id: &str) -> IdempotencyKey {
    IdempotencyKey::derive(PREFIX, id.as_bytes())
}

pub fn epoch_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// Delivers a message with messageId `id` to a handler behind the library's layer over
/// `store` (keyed on the messageId, prefix [`PREFIX`]) that counts its runs in `runs`.
pub async fn deliver(store: &DynamoDbStore, runs: &Arc<AtomicUsize>, id: &str) -> Outcome {
    let layer =
        IdempotencyLayer::new(store.clone()).with_config(Config::new().with_key_prefix(PREFIX));
    let counter = runs.clone();
    let processor = BatchProcessor::new(layer.handler(move |_m: SqsMessage| {
        let runs = counter.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::io::Error>(serde_json::json!({ "charged": 42 }))
        }
    }));
    let mut message = SqsMessage::default();
    message.message_id = Some(id.into());
    message.body = Some("{}".into());
    let mut event = SqsEvent::default();
    event.records.push(message);
    let report = processor
        .process(support::invocation(
            event,
            SystemTime::now(),
            Duration::from_secs(30),
        ))
        .await;
    support::outcomes(&report)[0]
}

/// Writes an INPROGRESS record for `key` through the store's acquire: lease end at
/// `lease_end`, expiry an hour later.
pub async fn acquire(
    store: &DynamoDbStore,
    key: &IdempotencyKey,
    lease_end: SystemTime,
) -> OwnerToken {
    let owner = OwnerToken::generate();
    let request = AcquireRequest {
        key: key.clone(),
        owner: owner.clone(),
        now: SystemTime::now(),
        lease_expiration_ms: epoch_ms(lease_end),
        expiration_secs: epoch_ms(lease_end + Duration::from_secs(3600)) / 1000,
        validation: Some("v2:hash".into()),
    };
    assert_eq!(store.acquire(&request).await.unwrap(), Acquire::Acquired);
    owner
}

/// Writes a COMPLETED record for `key` (acquire, then complete) expiring at `expires`.
pub async fn completed(store: &DynamoDbStore, key: &IdempotencyKey, expires: SystemTime) {
    let owner = acquire(store, key, SystemTime::now() + Duration::from_secs(60)).await;
    let request = CompleteRequest {
        key: key.clone(),
        owner,
        status: Status::Completed,
        data: r#"{"ok":true}"#.into(),
        expiration_secs: epoch_ms(expires) / 1000,
        now: std::time::SystemTime::now(),
    };
    assert_eq!(store.complete(&request).await.unwrap(), Fenced::Applied);
}
