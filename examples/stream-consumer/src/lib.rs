//! The stream-consumer's wiring, shared by its binary (`src/main.rs`) and its tests: one
//! function for two triggers, Kinesis and DynamoDB Streams, told apart by the records'
//! `eventSource`, crediting the order-consumer's ledger.
//!
//! Contract:
//! - Kinesis (`aws:kinesis`): each record's data is the order JSON the order-consumer takes,
//!   `{"eventId": string, "account": string, "amount": integer}`.
//! - DynamoDB Streams (`aws:dynamodb`): each `INSERT` into an orders table whose item has
//!   `eventId`, `account` and `amount` is an order. Other changes (`MODIFY`, `REMOVE`) are not
//!   orders: they are acknowledged without effect (template.yaml's event source mapping
//!   filters them out already).
//! - The idempotency key is the order's `eventId`, not the stream's `eventID`: a producer
//!   that puts the same order twice makes two records with the same `eventId`, credited
//!   once. Payload validation covers the order (the data, or the item as plain JSON): the
//!   same `eventId` with another account or amount is rejected, never applied.
//! - Each source has its own key prefix ([`KINESIS_KEY_PREFIX`], [`DYNAMODB_KEY_PREFIX`]),
//!   apart from the order-consumer's: an `eventId` is unique within its source. Orders that
//!   may arrive through two sources need one prefix and one payload validation for both.
//! - Effect: `balance` of `account` grows by `amount`, committed in one transaction with the
//!   idempotency record. The records of a shard run in order; the first that does not
//!   succeed (an order that does not parse, a rejected duplicate) and every later one are
//!   reported by sequence number (`batchItemFailures`), so the event source mapping retries
//!   from it; what completed replays.
//! - Environment: the order-consumer's (`IDEMPOTENCY_TABLE`, `LEDGER_TABLE`,
//!   `IDEMPOTENCY_MODE`, `IDEMPOTENCY_EXPIRES_AFTER_SECS`, `DEADLINE_MARGIN_MS`,
//!   `AWS_ENDPOINT_URL_DYNAMODB` locally).

#![warn(missing_docs)]

use lambda_idempotency::aws_lambda_events::event::dynamodb::{Event as DynamoDbEvent, EventRecord};
use lambda_idempotency::aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};
use lambda_idempotency::batch::{BatchError, BatchProcessor, BatchRecord};
use lambda_idempotency::key::PayloadValidation;
use lambda_idempotency::key::{JsonPointer, KeyError, KeyExtractor};
use lambda_idempotency::lambda_runtime::LambdaEvent;
use lambda_idempotency::store::DynamoDbStore;
use lambda_idempotency::{Completion, Config, IdempotencyLayer, Input};
use order_consumer::{ledger_credit, order_from_json};
pub use order_consumer::{sdk_config, Applied, Order, OrderError, Settings, Tables};
use serde_json::Value;
use tower::ServiceExt;

/// The key prefix of Kinesis orders: stable across deployments.
pub const KINESIS_KEY_PREFIX: &str = "stream-consumer-kinesis";

/// The key prefix of DynamoDB Streams orders: stable across deployments.
pub const DYNAMODB_KEY_PREFIX: &str = "stream-consumer-dynamodb";

/// The order in a record (its body: Kinesis data, or the DynamoDB item as plain JSON), and
/// the ledger credit for it.
pub fn credit(
    ledger_table: &str,
    record: &impl Input,
) -> Result<Completion<Option<Applied>>, OrderError> {
    let body = record.body().ok_or(OrderError::NoBody)?;
    let order = order_from_json(&body)?;
    let write = ledger_credit(ledger_table, &order);
    Ok(Completion::new(Some(Applied {
        account: order.account,
        amount: order.amount,
    }))
    .with_write(write))
}

/// Starts the key material of a change that is not an order: `0xFE` begins no text and no
/// JSON material, so no `eventId` (whatever it holds) can spell a change's key.
const CHANGE_MATERIAL_TAG: u8 = 0xFE;

/// The key of a DynamoDB Streams record: an `INSERT`'s `eventId`; another change's own
/// stream `eventID`, after a tag byte no text begins with (it is acknowledged without effect,
/// once).
pub fn dynamodb_key(record: &EventRecord) -> Result<Vec<u8>, KeyError> {
    if record.event_name == "INSERT" {
        JsonPointer::new("/eventId").key_material(record)
    } else {
        let id = record.id().ok_or(KeyError::MissingMessageId)?;
        Ok([&[CHANGE_MATERIAL_TAG], id.as_bytes()].concat())
    }
}

/// The configuration of one source, under `prefix`.
fn config(settings: &Settings, prefix: &str) -> Config {
    Config::new()
        .with_key_prefix(prefix)
        .with_expires_after(settings.expires_after)
        .with_payload_validation(PayloadValidation::Body)
        .with_local_cache(settings.local_cache)
}

/// The Kinesis processor of one deployment: orders credited to `settings.tables.ledger`
/// in one transaction with their records in `settings.tables.idempotency`.
pub fn kinesis_processor(
    client: aws_sdk_dynamodb::Client,
    settings: &Settings,
) -> BatchProcessor<
    impl RecordService<KinesisEventRecord>,
    lambda_idempotency::clock::SystemClock,
    KinesisEvent,
> {
    let store = DynamoDbStore::new(client, settings.tables.idempotency.clone());
    let ledger = settings.tables.ledger.clone();
    let handler = IdempotencyLayer::new(store)
        .with_key(JsonPointer::new("/eventId"))
        .with_config(config(settings, KINESIS_KEY_PREFIX))
        .with_writes()
        .with_commit(settings.mode)
        .handler(move |record: KinesisEventRecord| std::future::ready(credit(&ledger, &record)));
    BatchProcessor::kinesis(handler).with_deadline_margin(settings.deadline_margin)
}

/// The DynamoDB Streams processor of one deployment: `INSERT`ed orders credited as
/// [`kinesis_processor`] does; other changes acknowledged without effect.
pub fn dynamodb_processor(
    client: aws_sdk_dynamodb::Client,
    settings: &Settings,
) -> BatchProcessor<
    impl RecordService<EventRecord>,
    lambda_idempotency::clock::SystemClock,
    DynamoDbEvent,
> {
    let store = DynamoDbStore::new(client, settings.tables.idempotency.clone());
    let ledger = settings.tables.ledger.clone();
    let handler = IdempotencyLayer::new(store)
        .with_key(dynamodb_key)
        .with_config(config(settings, DYNAMODB_KEY_PREFIX))
        .with_writes()
        .with_commit(settings.mode)
        .handler(move |record: EventRecord| {
            std::future::ready(if record.event_name == "INSERT" {
                credit(&ledger, &record)
            } else {
                Ok(Completion::new(None))
            })
        });
    BatchProcessor::dynamodb_streams(handler).with_deadline_margin(settings.deadline_margin)
}

/// A record service of either source, as the processors above build them.
pub trait RecordService<R>:
    tower::Service<
        BatchRecord<R>,
        Response = lambda_idempotency::Processed<Option<Applied>>,
        Error = lambda_idempotency::Error,
        Future: Send,
    > + Clone
    + Send
    + Sync
    + 'static
{
}

impl<R, S> RecordService<R> for S where
    S: tower::Service<
            BatchRecord<R>,
            Response = lambda_idempotency::Processed<Option<Applied>>,
            Error = lambda_idempotency::Error,
            Future: Send,
        > + Clone
        + Send
        + Sync
        + 'static
{
}

/// Why an invocation fails as a whole.
#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    /// The event is neither a Kinesis nor a DynamoDB Streams event (or does not parse as
    /// the one its `eventSource` names).
    #[error("not a Kinesis or DynamoDB Streams event: {0}")]
    NotAStreamEvent(String),
    /// A record that needs a retry cannot be reported (it has no sequence number).
    #[error(transparent)]
    Batch(#[from] BatchError),
}

/// The function: both processors, one event at a time, told apart by `eventSource`.
#[derive(Debug, Clone)]
pub struct StreamConsumer<K, D> {
    kinesis: BatchProcessor<K, lambda_idempotency::clock::SystemClock, KinesisEvent>,
    dynamodb: BatchProcessor<D, lambda_idempotency::clock::SystemClock, DynamoDbEvent>,
}

/// The function of one deployment.
pub fn stream_consumer(
    client: aws_sdk_dynamodb::Client,
    settings: &Settings,
) -> StreamConsumer<impl RecordService<KinesisEventRecord>, impl RecordService<EventRecord>> {
    StreamConsumer {
        kinesis: kinesis_processor(client.clone(), settings),
        dynamodb: dynamodb_processor(client, settings),
    }
}

impl<K, D> StreamConsumer<K, D>
where
    K: RecordService<KinesisEventRecord>,
    D: RecordService<EventRecord>,
{
    /// Processes one event: its partial batch response, as JSON.
    pub async fn handle(&self, event: LambdaEvent<Value>) -> Result<Value, StreamError> {
        let LambdaEvent { payload, context } = event;
        let source = payload["Records"][0]["eventSource"]
            .as_str()
            .unwrap_or_default();
        let not_stream = |detail: String| StreamError::NotAStreamEvent(detail);
        let response = match source {
            "aws:kinesis" => {
                let event: KinesisEvent =
                    serde_json::from_value(payload).map_err(|e| not_stream(e.to_string()))?;
                let response = self
                    .kinesis
                    .clone()
                    .oneshot(LambdaEvent::new(event, context))
                    .await?;
                serde_json::to_value(response)
            }
            "aws:dynamodb" => {
                let event: DynamoDbEvent =
                    serde_json::from_value(payload).map_err(|e| not_stream(e.to_string()))?;
                let response = self
                    .dynamodb
                    .clone()
                    .oneshot(LambdaEvent::new(event, context))
                    .await?;
                serde_json::to_value(response)
            }
            // No records: nothing to do, nothing to report.
            "" if payload["Records"].as_array().is_some_and(Vec::is_empty) => {
                Ok(serde_json::json!({ "batchItemFailures": [] }))
            }
            other => return Err(not_stream(format!("eventSource {other:?}"))),
        };
        response.map_err(|e| not_stream(e.to_string()))
    }
}

impl From<StreamError> for lambda_runtime::Diagnostic {
    fn from(err: StreamError) -> Self {
        match err {
            StreamError::Batch(batch) => batch.into(),
            other => lambda_runtime::Diagnostic {
                error_type: "StreamConsumer.NotAStreamEvent".into(),
                error_message: other.to_string(),
            },
        }
    }
}
