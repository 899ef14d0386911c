//! Exactly-once-in-effect SQS batch processing for AWS Lambda, with DynamoDB as the lock
//! and result store.
//!
//! SQS delivers at least once. This crate makes your per-record handler's effect happen once
//! per idempotency key while the key's record counts, replays the stored result to
//! duplicates, and reports only the records that need a retry in `batchItemFailures`. With a
//! plain handler (and transactional handlers in lease mode) the handler itself runs once per
//! key, unless it outlives its lease; in optimistic mode a duplicate may run the handler, and
//! only its committed DynamoDB writes are exactly-once.
//!
//! ```
//! use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
//! use lambda_idempotency::{BatchProcessor, IdempotencyLayer, InMemoryStore, Outcome};
//! use lambda_runtime::{Context, LambdaEvent};
//! use std::time::{Duration, SystemTime, UNIX_EPOCH};
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Receipt { charged: u64 }
//!
//! async fn charge(message: SqsMessage) -> Result<Receipt, std::num::ParseIntError> {
//!     let amount = message.body.unwrap_or_default().parse()?;
//!     Ok(Receipt { charged: amount })
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! // The embedded store; use `DynamoDbStore` in Lambda.
//! let layer = IdempotencyLayer::new(InMemoryStore::new());
//! let processor = BatchProcessor::new(layer.handler(charge));
//!
//! // The same message delivered twice, and a poison message.
//! let mut event = SqsEvent::default();
//! for (id, body) in [("m-1", "42"), ("m-1", "42"), ("m-2", "not a number")] {
//!     let mut message = SqsMessage::default();
//!     message.message_id = Some(id.into());
//!     message.body = Some(body.into());
//!     event.records.push(message);
//! }
//! let mut context = Context::default(); // in Lambda, the runtime fills this in
//! let deadline = SystemTime::now() + Duration::from_secs(30);
//! context.deadline = deadline.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
//!
//! let report = processor.process(LambdaEvent::new(event, context)).await;
//! let outcomes: Vec<Outcome> = report.records.iter().map(|r| r.outcome).collect();
//! assert_eq!(outcomes, [Outcome::Executed, Outcome::Replayed, Outcome::Failed]);
//! // Only the poison message goes back to the queue.
//! assert_eq!(report.response.batch_item_failures[0].item_identifier, "m-2");
//! # }
//! ```
//!
//! In a Lambda function, hand the processor to the runtime; it answers `SqsBatchResponse`:
//!
//! ```no_run
//! # use aws_lambda_events::sqs::SqsMessage;
//! # async fn charge(m: SqsMessage) -> Result<u64, std::num::ParseIntError> { m.body.unwrap_or_default().parse() }
//! use lambda_idempotency::{BatchProcessor, Config, DynamoDbStore, IdempotencyLayer};
//!
//! # async fn example(client: aws_sdk_dynamodb::Client) -> Result<(), lambda_runtime::Error> {
//! let store = DynamoDbStore::new(client, "idempotency");
//! let layer = IdempotencyLayer::new(store).with_config(Config::new().with_local_cache(256));
//! lambda_runtime::run(BatchProcessor::new(layer.handler(charge))).await
//! # }
//! ```
//!
//! # How it works
//! For each record: derive the key ([`KeyExtractor`], default [`MessageId`]) and store it as
//! `<prefix>#<sha256>`; take a lease with one conditional write ([`Store::acquire`]) that
//! ends at the invocation deadline; run the handler; store the result with owner-fenced
//! [`Store::complete`], or [`Store::release`] the lease on failure. A duplicate replays the
//! stored result; a record locked elsewhere, failed, or rejected is reported for retry.
//! Each record ends in one [`Outcome`].
//!
//! When the effect is a DynamoDB write, a [`Transactional`] handler returns a [`Completion`]
//! (its result and [`Write`]s) and the writes are committed with the record in one
//! `TransactWriteItems` ([`TransactionalStore`]), so they are applied exactly once even if
//! the process dies at any instant; [`IdempotencyMode`] chooses between a lease first and an
//! optimistic single round trip. Errors marked [`Permanent`] are stored and acknowledged
//! instead of retried.
#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]

mod batch;
mod cache;
mod canonical;
mod clock;
mod config;
mod dynamodb_commit;
mod dynamodb_store;
mod engine;
mod error;
mod finish;
mod hashing;
mod idempotent;
mod in_flight;
mod key;
mod lease;
mod memory_store;
mod optimistic;
mod outcome;
mod processed;
mod record;
mod record_fn;
mod record_item;
mod retry;
mod store;
mod stored_result;
mod validation;
mod write;

pub use batch::{
    BatchFuture, BatchMode, BatchProcessor, BatchReport, RecordReport, ANSWER_MARGIN,
    DEFAULT_DEADLINE_MARGIN,
};
pub use clock::{
    deadline_ms, epoch_ms, epoch_secs, Clock, ManualClock, SystemClock, RELATIVE_DEADLINE_BELOW_MS,
};
pub use config::{Config, IdempotencyMode, MissingKey};
pub use dynamodb_store::DynamoDbStore;
pub use engine::FALLBACK_KEY_PREFIX;
pub use error::{BatchError, BoxError, Error, Permanent};
pub use finish::{MAX_STORED_FAILURE_BYTES, UNSTORED_FAILURE_MESSAGE};
pub use idempotent::{
    IdempotencyLayer, Idempotent, ResponseFuture, Transactional, TransactionalLayer,
};
pub use key::{
    BodyHash, IdempotencyKey, JsonPointer, KeyError, KeyExtractor, MessageAttribute, MessageId, Or,
    MAX_KEY_BYTES,
};
pub use memory_store::InMemoryStore;
pub use outcome::Outcome;
pub use processed::Processed;
pub use record::{decide, Decision, OwnerToken, Record, Status};
pub use record_fn::{record_fn, RecordFn};
pub use record_item::{
    AttributeNames, DYNAMODB_ITEM_LIMIT_BYTES, DYNAMODB_TRANSACTION_ITEM_LIMIT,
    DYNAMODB_TRANSACTION_LIMIT_BYTES,
};
pub use store::{
    Acquire, AcquireRequest, Commit, CommitRequest, CompleteRequest, ExtendRequest, Fenced, Store,
    StoreError, TransactionalStore,
};
pub use validation::{PayloadHash, PayloadValidation, PAYLOAD_HASH_PREFIX};
pub use write::{Attr, Completion, Item, Write, WriteKind, DYNAMODB_MAX_NESTING};

/// The README's Rust examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
