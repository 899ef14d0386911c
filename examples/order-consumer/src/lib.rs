//! The order-consumer's wiring, shared by its binary (`src/main.rs`), its tests, the
//! library's tests and the benchmark harness: the message body ([`Order`]), the stored
//! result ([`Applied`]), the idempotency key ([`order_key`]), the ledger credit
//! ([`ledger_credit`]) and the processor built from its [`Settings`].
//!
//! Contract (tests outside the repository rely on it):
//! - Environment: `IDEMPOTENCY_TABLE`, `LEDGER_TABLE`, `IDEMPOTENCY_MODE` = `optimistic`
//!   (the default) or `lease`, and `IDEMPOTENCY_EXPIRES_AFTER_SECS`, how long records count
//!   (default 23 days: it must outlive the queue's retention, the dead-letter queue's and the
//!   queue's again after a redrive; see the README), and `DEADLINE_MARGIN_MS`, the time that
//!   must remain before the invocation deadline to start a record (default: the library's,
//!   1 s; every store call is bounded by the time left before the deadline, whatever the
//!   SDK's timeouts, so the default works under Lambda's default 3 s timeout). The DynamoDB
//!   endpoint comes from the standard AWS settings (`AWS_ENDPOINT_URL_DYNAMODB` locally).
//! - `POWERTOOLS_KEY_PREFIX` (optional): records in the format of Powertools for AWS Lambda
//!   under this key prefix, so that this function and a Powertools (Python) one share them
//!   while both consume the queue. The key data and the validated payload are what
//!   `@idempotent_function(data_keyword_argument="order", config=IdempotencyConfig(
//!   event_key_jmespath="key", payload_validation_jmespath="body"), key_prefix=...)` selects
//!   on `apply(order={"key": <the Idempotency-Key attribute, else eventId>, "body": <the
//!   parsed body>})`; set the prefix to the exact text before `#` in that function's ids.
//!   See the library's guide, "Migrating from Powertools".
//! - Message body: `{"eventId": string, "account": string, "amount": integer}`. The
//!   idempotency key is the message attribute `Idempotency-Key` when present, else
//!   `eventId`. Payload validation covers the body: the same key with another account or
//!   amount is rejected, never applied, and reported as a batch item failure.
//! - Effect: `balance` of the ledger item with partition key `account` grows by `amount`,
//!   committed in the same DynamoDB transaction as the idempotency record.
//! - A body that is not valid JSON, or lacks or mistypes a field, fails that record only and
//!   is reported, so the queue's redrive policy moves it to the dead-letter queue.
//! - `IDEMPOTENCY_MODE=sequenced`: the body also carries `"sequence"` (the event's number in
//!   its account's sequence, from 1), and the credit is one conditional write on the ledger
//!   item, applied in turn, that sets the item's `sequence`; no idempotency record. A late
//!   or repeated event changes nothing (acknowledged), one ahead of its turn is reported, an
//!   order without a sequence fails alone.

#![warn(missing_docs)]

pub mod metrics;

use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, SdkConfig};
use lambda_idempotency::aws_lambda_events::sqs::SqsEvent;
use lambda_idempotency::aws_lambda_events::sqs::SqsMessage;
use lambda_idempotency::batch::{
    BatchProcessor, BatchRecord, BatchReplayer, DEFAULT_DEADLINE_MARGIN,
};
use lambda_idempotency::clock::SystemClock;
use lambda_idempotency::idempotent::{Position, Sequence};
use lambda_idempotency::key::PayloadValidation;
use lambda_idempotency::key::{JsonPointer, KeyError, KeyExtractor, MessageAttribute};
use lambda_idempotency::powertools::PowertoolsFormat;
use lambda_idempotency::store::{Attr, DynamoDbStore, Write};
use lambda_idempotency::{
    CommitStrategy, Completion, Config, Error, IdempotencyLayer, Processed, SequencedLayer,
};
use serde::{Deserialize, Serialize};
use tower::util::Either;

/// The message body.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Order {
    /// The producer's id for the event; the idempotency key without an `Idempotency-Key`
    /// attribute.
    pub event_id: String,
    /// The ledger account credited.
    pub account: String,
    /// The amount credited (negative: debited).
    pub amount: i64,
    /// The event's number in its account's sequence (1, 2, ...): required when the
    /// deployment is sequence-guarded (`IDEMPOTENCY_MODE=sequenced`), ignored otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence: Option<u64>,
}

/// The stored (and replayed) result of one order. It holds no key material (the event id
/// stays out of the table).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Applied {
    /// The account credited.
    pub account: String,
    /// The amount credited.
    pub amount: i64,
}

/// Why a body is not an order.
#[derive(Debug, thiserror::Error)]
pub enum OrderError {
    /// The message has no body.
    #[error("the record has no body")]
    NoBody,
    /// The body is not JSON, or lacks or mistypes a field.
    #[error("the body is not an order: {0}")]
    NotAnOrder(#[from] serde_json::Error),
    /// A string field is empty.
    #[error("the order has an empty {0}")]
    Empty(&'static str),
}

/// The order in `message`'s body.
pub fn parse_order(message: &SqsMessage) -> Result<Order, OrderError> {
    let body = message.body.as_deref().ok_or(OrderError::NoBody)?;
    order_from_json(body.as_bytes())
}

/// The order in a JSON body (a message's, a stream record's data or item).
pub fn order_from_json(body: &[u8]) -> Result<Order, OrderError> {
    let order: Order = serde_json::from_slice(body)?;
    if order.event_id.is_empty() {
        return Err(OrderError::Empty("eventId"));
    }
    if order.account.is_empty() {
        return Err(OrderError::Empty("account"));
    }
    Ok(order)
}

/// Replaces the default panic hook, which prints the panic's message (it may quote the
/// input) to stderr and so to CloudWatch: the panic is caught and its record reported (the
/// handler's by the idempotent service, any other by the batch processor), so the hook logs
/// only where it happened. The examples' binaries install it first thing.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let location = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        tracing::error!(location, "a handler panicked (its message is not logged)");
    }));
}

/// The key prefix of order-consumer's records: stable across deployments.
pub const KEY_PREFIX: &str = "order-consumer";

/// The idempotency key: the `Idempotency-Key` message attribute when present, else the
/// body's `eventId`.
pub fn order_key() -> impl KeyExtractor<SqsMessage> + Clone {
    MessageAttribute::new("Idempotency-Key").or(JsonPointer::new("/eventId"))
}

/// The ledger write of `order`: `balance` of its `account` in `ledger_table` grows by its
/// `amount`.
pub fn ledger_credit(ledger_table: impl Into<String>, order: &Order) -> Write {
    Write::update(
        ledger_table,
        [("account", Attr::s(&order.account))],
        "ADD #balance :amount",
    )
    .name("#balance", "balance")
    .value(":amount", Attr::n(order.amount))
}

/// The ledger attribute holding an account's sequence in a sequence-guarded deployment.
pub const SEQUENCE_ATTRIBUTE: &str = "sequence";

/// Where an order stands in a sequence-guarded deployment: its account's ledger item, and
/// its `sequence`. A body that is not an order, or an order without a sequence, fails its
/// record alone.
pub fn order_position(
    ledger_table: String,
) -> impl Fn(&SqsMessage) -> Result<Position, KeyError> + Clone + Send + Sync + 'static {
    move |message: &SqsMessage| {
        let order = parse_order(message).map_err(|err| KeyError::Custom(err.into()))?;
        let sequence = order.sequence.ok_or(KeyError::PointerNotFound {
            pointer: "/sequence".into(),
        })?;
        Ok(Position {
            table: ledger_table.clone(),
            key: [("account".to_string(), Attr::s(order.account))].into(),
            sequence,
        })
    }
}

/// Credits the order's amount to its account, in the same transaction as the record.
pub async fn apply_order(
    ledger_table: String,
    message: SqsMessage,
) -> Result<Completion<Applied>, OrderError> {
    let order = parse_order(&message)?;
    let credit = ledger_credit(ledger_table, &order);
    Ok(Completion::new(Applied {
        account: order.account,
        amount: order.amount,
    })
    .with_write(credit))
}

/// How long a message can live with template.yaml's queues: 4 days in the queue, 14 in the
/// dead-letter queue, 4 again in the queue after a redrive.
pub const TEMPLATE_QUEUES_SECS: u64 = (4 + 14 + 4) * 24 * 3600;

/// The default record window: the template's queues, plus a day.
pub const DEFAULT_EXPIRES_AFTER: Duration = Duration::from_secs(TEMPLATE_QUEUES_SECS + 24 * 3600);

/// The record window from `IDEMPOTENCY_EXPIRES_AFTER_SECS`, with a warning when it may be
/// shorter than a message can live.
pub fn expires_after(value: Option<&str>) -> Result<Duration, lambda_runtime::Error> {
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

/// The SDK's bound on one DynamoDB operation (all its attempts), set by [`sdk_config`]. The
/// library bounds every store call by the time left before the invocation deadline too.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(5);

/// The start margin from `DEADLINE_MARGIN_MS`, or the library's default
/// ([`DEFAULT_DEADLINE_MARGIN`], 1 s): the same rule for every example.
pub fn deadline_margin(value: Option<&str>) -> Result<Duration, lambda_runtime::Error> {
    match value.filter(|v| !v.is_empty()) {
        None => Ok(DEFAULT_DEADLINE_MARGIN),
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

/// The tables one deployment of order-consumer uses.
#[derive(Debug, Clone)]
pub struct Tables {
    /// The idempotency records (`IDEMPOTENCY_TABLE`).
    pub idempotency: String,
    /// The ledger credited (`LEDGER_TABLE`).
    pub ledger: String,
}

/// How one deployment runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Its tables.
    pub tables: Tables,
    /// How the ledger write is committed with the record.
    pub mode: CommitStrategy,
    /// How long records count.
    pub expires_after: Duration,
    /// The time that must remain before the deadline to start a record.
    pub deadline_margin: Duration,
    /// Completed keys remembered in the container (0: no local cache).
    pub local_cache: usize,
    /// Sequence-guarded instead (`IDEMPOTENCY_MODE=sequenced`): each order carries its
    /// account's `sequence`, and the credit is applied in turn by one conditional write on
    /// the ledger item, without an idempotency record.
    pub sequenced: bool,
    /// Records in Powertools' format under this key prefix (`POWERTOOLS_KEY_PREFIX`), shared
    /// with a Powertools function during a migration; `None`: this crate's format under
    /// [`KEY_PREFIX`].
    pub powertools_key_prefix: Option<String>,
}

impl Settings {
    /// The defaults for `tables` in `mode`: the default window and start margin (the
    /// library's), and a local cache of 1024 keys.
    pub fn new(tables: Tables, mode: CommitStrategy) -> Self {
        Self {
            tables,
            mode,
            expires_after: DEFAULT_EXPIRES_AFTER,
            deadline_margin: DEFAULT_DEADLINE_MARGIN,
            local_cache: 1024,
            sequenced: false,
            powertools_key_prefix: None,
        }
    }

    /// The settings from the environment (see the crate documentation).
    pub fn from_env() -> Result<Self, lambda_runtime::Error> {
        let idempotency = required_env("IDEMPOTENCY_TABLE")?;
        let ledger = required_env("LEDGER_TABLE")?;
        let mode_text = std::env::var("IDEMPOTENCY_MODE").unwrap_or_else(|_| "optimistic".into());
        let sequenced = mode_text.trim().eq_ignore_ascii_case("sequenced");
        let mode = if sequenced {
            Some(CommitStrategy::Optimistic)
        } else {
            CommitStrategy::parse(&mode_text)
        }
        .ok_or_else(|| {
            format!("IDEMPOTENCY_MODE must be optimistic, lease or sequenced, not {mode_text:?}")
        })?;
        let mut settings = Self::new(
            Tables {
                idempotency,
                ledger,
            },
            mode,
        );
        settings.expires_after = expires_after(
            std::env::var("IDEMPOTENCY_EXPIRES_AFTER_SECS")
                .ok()
                .as_deref(),
        )?;
        settings.deadline_margin =
            deadline_margin(std::env::var("DEADLINE_MARGIN_MS").ok().as_deref())?;
        settings.sequenced = sequenced;
        settings.powertools_key_prefix = std::env::var("POWERTOOLS_KEY_PREFIX")
            .ok()
            .filter(|prefix| !prefix.is_empty());
        Ok(settings)
    }
}

/// The AWS settings from the environment, with short attempts and few retries: a hung
/// store must not eat the invocation.
pub async fn sdk_config() -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(1))
                .operation_attempt_timeout(Duration::from_secs(2))
                .operation_timeout(OPERATION_TIMEOUT)
                .build(),
        )
        .retry_config(RetryConfig::standard().with_max_attempts(3))
        .load()
        .await
}

/// The batch processor of one deployment: its records in `settings.tables.idempotency`
/// through `client`, each order credited to `settings.tables.ledger` in the same
/// transaction; or, sequence-guarded, each order credited in turn by one conditional write
/// on its account's ledger item.
pub fn processor(
    client: aws_sdk_dynamodb::Client,
    settings: &Settings,
) -> BatchProcessor<
    impl tower::Service<
            BatchRecord<SqsMessage>,
            Response = Processed<Applied>,
            Error = Error,
            Future = impl Send,
        > + Clone
        + Send
        + Sync
        + 'static,
    SystemClock,
    SqsEvent,
    BatchReplayer<SqsMessage, Applied>,
> {
    let store = DynamoDbStore::new(client, settings.tables.idempotency.clone());
    let config = Config::new()
        .with_expires_after(settings.expires_after)
        .with_payload_validation(PayloadValidation::Body)
        .with_local_cache(settings.local_cache);
    let config = match &settings.powertools_key_prefix {
        Some(prefix) => config.with_powertools_format(PowertoolsFormat::new(prefix.clone())),
        None => config.with_key_prefix(KEY_PREFIX),
    };
    let layer = IdempotencyLayer::new(store.clone())
        .with_key(order_key())
        .with_config(config);
    let ledger_table = settings.tables.ledger.clone();
    let apply = move |message| apply_order(ledger_table.clone(), message);
    let handler = if settings.sequenced {
        let position = order_position(settings.tables.ledger.clone());
        let sequence = Sequence::next(SEQUENCE_ATTRIBUTE, position);
        Either::Right(SequencedLayer::new(store, sequence).handler(apply))
    } else {
        Either::Left(
            layer
                .with_writes()
                .with_commit(settings.mode)
                .handler(apply),
        )
    };
    BatchProcessor::new(handler)
        .with_deadline_margin(settings.deadline_margin)
        .with_batch_replay(true)
}

#[cfg(test)]
mod tests;
