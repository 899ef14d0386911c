//! `order-consumer`: the SQS-triggered Lambda function users deploy.
//!
//! Contract (tests outside the repository rely on it):
//! - Environment: `IDEMPOTENCY_TABLE`, `LEDGER_TABLE`, `IDEMPOTENCY_MODE` = `optimistic`
//!   (the default) or `lease`, and `IDEMPOTENCY_EXPIRES_AFTER_SECS`, how long records count
//!   (default 23 days: it must outlive the queue's retention, the dead-letter queue's and the
//!   queue's again after a redrive; see the README), and `DEADLINE_MARGIN_MS`, the time that
//!   must remain before the invocation deadline to start a record (default: the store calls
//!   at their worst, at the SDK's 5 s operation timeout, plus 1 s: 16 s in optimistic mode, a
//!   commit sent 3 times; 26 s in lease mode, where an acquire and a release come before). The DynamoDB endpoint comes
//!   from the standard AWS settings (`AWS_ENDPOINT_URL_DYNAMODB` locally).
//! - Message body: `{"eventId": string, "account": string, "amount": integer}`. The
//!   idempotency key is the message attribute `Idempotency-Key` when present, else
//!   `eventId`. Payload validation covers the body: the same key with another account or
//!   amount is rejected, never applied, and reported as a batch item failure.
//! - Effect: `balance` of the ledger item with partition key `account` grows by `amount`,
//!   committed in the same DynamoDB transaction as the idempotency record.
//! - A body that is not valid JSON, or lacks or mistypes a field, fails that record only and
//!   is reported, so the queue's redrive policy moves it to the dead-letter queue.

use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::BehaviorVersion;
use aws_lambda_events::sqs::SqsMessage;
use lambda_idempotency::{
    Attr, BatchProcessor, Completion, Config, DynamoDbStore, IdempotencyLayer, IdempotencyMode,
    JsonPointer, KeyExtractor, MessageAttribute, PayloadValidation, Write,
};
use serde::{Deserialize, Serialize};

/// The message body.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Order {
    event_id: String,
    account: String,
    amount: i64,
}

/// The stored (and replayed) result of one order. It holds no key material (the event id
/// stays out of the table).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Applied {
    account: String,
    amount: i64,
}

/// Why a body is not an order.
#[derive(Debug, thiserror::Error)]
enum OrderError {
    #[error("the record has no body")]
    NoBody,
    #[error("the body is not an order: {0}")]
    NotAnOrder(#[from] serde_json::Error),
    #[error("the order has an empty {0}")]
    Empty(&'static str),
}

fn parse_order(message: &SqsMessage) -> Result<Order, OrderError> {
    let body = message.body.as_deref().ok_or(OrderError::NoBody)?;
    let order: Order = serde_json::from_str(body)?;
    if order.event_id.is_empty() {
        return Err(OrderError::Empty("eventId"));
    }
    if order.account.is_empty() {
        return Err(OrderError::Empty("account"));
    }
    Ok(order)
}

/// Credits the order's amount to its account, in the same transaction as the record.
async fn apply_order(
    ledger_table: String,
    message: SqsMessage,
) -> Result<Completion<Applied>, OrderError> {
    let order = parse_order(&message)?;
    let credit = Write::update(
        ledger_table,
        [("account", Attr::s(&order.account))],
        "ADD #balance :amount",
    )
    .name("#balance", "balance")
    .value(":amount", Attr::n(order.amount));
    Ok(Completion::new(Applied {
        account: order.account,
        amount: order.amount,
    })
    .with_write(credit))
}

/// How long a message can live with template.yaml's queues: 4 days in the queue, 14 in the
/// dead-letter queue, 4 again in the queue after a redrive.
const TEMPLATE_QUEUES_SECS: u64 = (4 + 14 + 4) * 24 * 3600;

/// The default record window: the template's queues, plus a day.
const DEFAULT_EXPIRES_AFTER: Duration = Duration::from_secs(TEMPLATE_QUEUES_SECS + 24 * 3600);

/// The record window from `IDEMPOTENCY_EXPIRES_AFTER_SECS`, with a warning when it may be
/// shorter than a message can live.
fn expires_after(value: Option<&str>) -> Result<Duration, lambda_runtime::Error> {
    let Some(text) = value.filter(|v| !v.is_empty()) else {
        return Ok(DEFAULT_EXPIRES_AFTER);
    };
    let secs: u64 = text.trim().parse().map_err(|_| {
        format!("IDEMPOTENCY_EXPIRES_AFTER_SECS must be a whole number of seconds, not {text:?}")
    })?;
    if secs <= TEMPLATE_QUEUES_SECS {
        tracing::warn!(
            expires_after_secs = secs,
            template_queues_secs = TEMPLATE_QUEUES_SECS,
            "the idempotency window is shorter than a message can live in template.yaml's \
             queues (queue, dead-letter queue, queue again after a redrive): a message \
             redriven after it runs again; make it longer than the retention periods added up"
        );
    }
    Ok(Duration::from_secs(secs))
}

/// The SDK's bound on one DynamoDB operation (all its attempts), set in `main`.
const OPERATION_TIMEOUT: Duration = Duration::from_secs(5);

/// Sends of a commit (`Config`'s default commit attempts).
const COMMIT_SENDS: u64 = 3;

/// Time to start a record: its store calls at their worst, plus a second to answer. A
/// commit is sent up to 3 times; in lease mode an acquire (and, after a store error, one
/// release) comes first.
fn default_deadline_margin(mode: IdempotencyMode) -> Duration {
    let calls = match mode {
        IdempotencyMode::Lease => COMMIT_SENDS + 2,
        _ => COMMIT_SENDS,
    };
    Duration::from_secs(OPERATION_TIMEOUT.as_secs() * calls + 1)
}

/// The start margin from `DEADLINE_MARGIN_MS`, or the mode's default.
fn deadline_margin(
    value: Option<&str>,
    mode: IdempotencyMode,
) -> Result<Duration, lambda_runtime::Error> {
    match value.filter(|v| !v.is_empty()) {
        None => Ok(default_deadline_margin(mode)),
        Some(text) => text.trim().parse().map(Duration::from_millis).map_err(|_| {
            format!("DEADLINE_MARGIN_MS must be a whole number of milliseconds, not {text:?}")
                .into()
        }),
    }
}

fn required_env(name: &str) -> Result<String, lambda_runtime::Error> {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| format!("environment variable {name} is required").into())
}

// One invocation at a time, its records concurrent on one thread: Lambda gives a function
// one event at a time, and a single-threaded runtime starts faster and uses less memory.
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    lambda_runtime::tracing::init_default_subscriber();
    // The default panic hook prints the panic message, which may quote the input, to stderr
    // (and so to CloudWatch). The batch processor catches the panic and reports the record;
    // log only where it happened.
    std::panic::set_hook(Box::new(|info| {
        let location = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        tracing::error!(location, "a handler panicked (its message is not logged)");
    }));
    let idempotency_table = required_env("IDEMPOTENCY_TABLE")?;
    let ledger_table = required_env("LEDGER_TABLE")?;
    let mode_text = std::env::var("IDEMPOTENCY_MODE").unwrap_or_else(|_| "optimistic".into());
    let mode = IdempotencyMode::parse(&mode_text).ok_or_else(|| {
        format!("IDEMPOTENCY_MODE must be optimistic or lease, not {mode_text:?}")
    })?;
    let window = expires_after(
        std::env::var("IDEMPOTENCY_EXPIRES_AFTER_SECS")
            .ok()
            .as_deref(),
    )?;

    // A hung store must not eat the invocation: short attempts, few retries.
    let margin = deadline_margin(std::env::var("DEADLINE_MARGIN_MS").ok().as_deref(), mode)?;
    let aws = aws_config::defaults(BehaviorVersion::latest())
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(1))
                .operation_attempt_timeout(Duration::from_secs(2))
                .operation_timeout(OPERATION_TIMEOUT)
                .build(),
        )
        .retry_config(RetryConfig::standard().with_max_attempts(3))
        .load()
        .await;
    let store = DynamoDbStore::new(aws_sdk_dynamodb::Client::new(&aws), idempotency_table);
    let layer = IdempotencyLayer::new(store)
        .with_key(MessageAttribute::new("Idempotency-Key").or(JsonPointer::new("/eventId")))
        .with_config(
            Config::new()
                .with_key_prefix("order-consumer")
                .with_mode(mode)
                .with_expires_after(window)
                .with_payload_validation(PayloadValidation::Body)
                .with_local_cache(1024),
        );
    tracing::info!(
        ?mode,
        expires_after_secs = window.as_secs(),
        "order-consumer ready"
    );
    let handler =
        layer.transactional_handler(move |message| apply_order(ledger_table.clone(), message));
    lambda_runtime::run(BatchProcessor::new(handler).with_deadline_margin(margin)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(body: &str) -> SqsMessage {
        let mut m = SqsMessage::default();
        m.body = Some(body.into());
        m
    }

    #[test]
    fn orders_must_have_every_field_with_its_type() {
        assert!(parse_order(&message(r#"{"eventId":"e","account":"a","amount":5}"#)).is_ok());
        for bad in [
            "not json",
            r#"{"eventId":"e","account":"a"}"#,
            r#"{"eventId":"e","account":"a","amount":"5"}"#,
            r#"{"eventId":"e","account":"a","amount":5.5}"#,
            r#"{"eventId":"","account":"a","amount":5}"#,
            r#"{"eventId":"e","account":"","amount":5}"#,
        ] {
            assert!(parse_order(&message(bad)).is_err(), "{bad}");
        }
        assert!(matches!(
            parse_order(&SqsMessage::default()),
            Err(OrderError::NoBody)
        ));
    }

    #[test]
    fn the_window_outlives_a_dead_letter_redrive_by_default() {
        assert_eq!(expires_after(None).unwrap(), DEFAULT_EXPIRES_AFTER);
        assert!(DEFAULT_EXPIRES_AFTER.as_secs() > TEMPLATE_QUEUES_SECS);
        assert_eq!(expires_after(Some("")).unwrap(), DEFAULT_EXPIRES_AFTER);
        assert_eq!(
            expires_after(Some("1987200")).unwrap(),
            Duration::from_secs(1_987_200)
        );
        assert!(expires_after(Some("1h")).is_err());
    }

    #[test]
    fn records_start_only_with_time_for_the_store_at_its_worst() {
        let optimistic = IdempotencyMode::Optimistic;
        assert_eq!(
            deadline_margin(None, optimistic).unwrap(),
            Duration::from_secs(16)
        );
        assert_eq!(
            deadline_margin(None, IdempotencyMode::Lease).unwrap(),
            Duration::from_secs(26)
        );
        assert_eq!(
            deadline_margin(Some("1000"), optimistic).unwrap(),
            Duration::from_secs(1)
        );
        assert!(deadline_margin(Some("1s"), optimistic).is_err());
    }

    #[tokio::test]
    async fn an_order_becomes_one_ledger_credit() {
        let completion = apply_order(
            "ledger".into(),
            message(r#"{"eventId":"e","account":"acct-1","amount":-7}"#),
        )
        .await
        .unwrap();
        assert_eq!(completion.result().amount, -7);
        assert_eq!(completion.writes().len(), 1);
        assert_eq!(completion.writes()[0].table(), "ledger");
    }
}
