//! Exactly-once-in-effect AWS Lambda handlers: SQS, Kinesis and DynamoDB Streams batches,
//! HTTP APIs with the `Idempotency-Key` header, and any other event, with DynamoDB as the lock
//! and result store.
//!
//! SQS delivers at least once. This crate makes your per-record handler's effect happen once
//! per idempotency key while the key's record counts, replays the stored result to
//! duplicates, and reports only the records that need a retry in `batchItemFailures`. Writes a
//! handler hands back are committed with its record, so they apply once per key even if the
//! process dies at any instant. The handler itself runs once per key except when it fails
//! retryably, when its invocation ends or the store cannot be reached after it ran and before
//! its result is stored, when it outlives a lease capped below the deadline, and, with the
//! optimistic commit strategy, for a duplicate that neither the local cache nor the batch's
//! pre-check answers (see [`guide::guarantees`]).
//!
//! ```
//! use lambda_idempotency::aws_lambda_events::sqs::{SqsEvent, SqsMessage};
//! use lambda_idempotency::batch::BatchProcessor;
//! use lambda_idempotency::store::InMemoryStore;
//! use lambda_idempotency::{IdempotencyLayer, Outcome};
//! use lambda_idempotency::lambda_runtime::{Context, LambdaEvent};
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
//! # use lambda_idempotency::aws_lambda_events::sqs::SqsMessage;
//! # async fn charge(m: SqsMessage) -> Result<u64, std::num::ParseIntError> { m.body.unwrap_or_default().parse() }
//! use lambda_idempotency::batch::BatchProcessor;
//! use lambda_idempotency::store::DynamoDbStore;
//! use lambda_idempotency::{aws_sdk_dynamodb, lambda_runtime, Config, IdempotencyLayer};
//!
//! # async fn example(client: aws_sdk_dynamodb::Client) -> Result<(), lambda_runtime::Error> {
//! let store = DynamoDbStore::new(client, "idempotency");
//! let layer = IdempotencyLayer::new(store).with_config(Config::new().with_local_cache(256));
//! lambda_runtime::run(BatchProcessor::new(layer.handler(charge))).await
//! # }
//! ```
//!
//! Two defaults make this safe as it is deployed: records count for 43 days
//! ([`DEFAULT_EXPIRES_AFTER`]), longer than a message can live in SQS with a dead-letter
//! queue and a redrive (a duplicate after the window runs again: a shorter window must
//! still outlive your queues' retention periods added up); and every store call follows the
//! invocation deadline, ending 100 ms before it at the latest ([`clock::CALL_MARGIN`])
//! whatever the client's timeouts, while a batch stops its records 500 ms before it
//! ([`clock::ANSWER_MARGIN`]) and starts one only while 1 s is left, so Lambda's default 3 s
//! timeout works. A store that is not set up (a missing table, denied access) fails the
//! invocation as a whole ([`store::StoreError::Misconfigured`]), never a record.
//!
//! # How it works
//! For each record: derive the key ([`key::KeyExtractor`], default [`key::MessageId`]) and
//! store it as `<prefix>#<sha256>`; take a lease with one conditional write
//! ([`store::Store::acquire`]) that ends at the invocation deadline; run the handler; store
//! the result with owner-fenced [`store::Store::complete`], or [`store::Store::release`] the
//! lease on failure. A duplicate replays the stored result; a record locked elsewhere,
//! failed, or rejected is reported for retry. Each record ends in one [`Outcome`].
//!
//! When the effect is a DynamoDB write, a handler built with
//! [`IdempotencyLayer::with_writes`] returns a [`Completion`] (its result and
//! [`store::Write`]s) and the writes are committed with the record in one
//! `TransactWriteItems` ([`store::TransactionalStore`]), so they are applied exactly once
//! even if the process dies at any instant; [`CommitStrategy`] chooses between a lease
//! first and an optimistic single round trip. Errors marked [`Permanent`] are stored and
//! acknowledged instead of retried.
//!
//! The [`guide`] takes each choice in turn: guarantees and failures, handler kinds and
//! commit strategies, keys, batches, HTTP, invocations and functions, stores, operations,
//! costs, testing, troubleshooting, and migrating from Powertools (one table shared by a
//! Powertools function and its Rust rewrite while both run: [`powertools`]).
//!
//! # Modules
//! - [`guide`]: the guide (documentation only);
//! - [`idempotent`]: the layer, the service and the protocol's drivers;
//! - [`store`]: the store trait, its requests and limits, the embedded and DynamoDB stores;
//! - [`key`]: idempotency keys and payload hashes, from any [`Input`]; [`powertools`]: the
//!   records in the format of Powertools for AWS Lambda, to share a table with it;
//! - [`batch`]: batch processors and their partial batch responses, for [`sqs`] and, with
//!   their features, `kinesis` and `dynamodb_streams`;
//! - [`invocation`]: whole invocations of any event; `http` (feature `http`): HTTP APIs with
//!   the `Idempotency-Key` header;
//! - [`record`]: the record and the pure decision over it; [`clock`]: injected time;
//! - [`hooks`]: the response hook on replays and the record-created hook; [`metrics`]: what
//!   the `metrics` feature records.
//!
//! # Features
//! - `dynamodb` (default): [`store::DynamoDbStore`], on `aws-sdk-dynamodb` with no HTTP
//!   client or TLS stack chosen: build the `Client` as your application does.
//! - `kinesis`, `dynamodb-streams` (default): Kinesis and DynamoDB Streams batches.
//! - `http`: HTTP APIs through `lambda_http` (API Gateway REST and HTTP APIs, Function URLs,
//!   ALB).
//! - `redis`: `store::RedisStore`, the records in Redis or Valkey (one Lua script per
//!   transition), on the `redis` crate's tokio connections.
//! - `postgres`: `store::PostgresStore`, the records in a PostgreSQL table (one statement per
//!   transition), on a `deadpool-postgres` pool; handlers can write in its transaction
//!   (`IdempotencyLayer::in_transaction`), so their PostgreSQL effects commit with the record.
//! - `metrics`: outcomes, latencies and DynamoDB calls through the `metrics` facade.
//! - `sqs-visibility`: `sqs::VisibilityLayer`, retry shaping with SQS's visibility timeout
//!   (the SQS client without a TLS choice: give it yours).
//! - `testing`: the testing kit for your handlers (`testing`: event builders for each
//!   trigger, invocations, the store contract suites), `clock::ManualClock`,
//!   `clock::epoch_ms`/`epoch_secs`, `InMemoryStore::set_unavailable`, and the DynamoDB
//!   expression emulator behind `InMemoryStore`: transactional writes
//!   (`store::TransactionalStore`, for handlers with writes), `store::GuardedWrite` (for
//!   sequence-guarded effects) and the in-memory tables (`InMemoryStore::define_table`,
//!   `item`, `items`). Enable it as a dev-dependency to test such handlers in memory.
//!
//! Always compiled, whatever the features: the protocol, the layers, SQS batches, and
//! [`store::InMemoryStore`] as a map of records (the record protocol alone: a plain handler
//! on it needs no feature).
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![warn(
    missing_docs,
    missing_debug_implementations,
    unreachable_pub,
    rust_2018_idioms
)]

pub mod batch;
pub mod clock;
mod config;
#[cfg(feature = "dynamodb-streams")]
#[cfg_attr(docsrs, doc(cfg(feature = "dynamodb-streams")))]
pub mod dynamodb_streams;
mod error;
pub mod function;
pub mod guide;
pub mod hooks;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http;
pub mod idempotent;
pub mod input;
pub mod invocation;
pub mod key;
#[cfg(feature = "kinesis")]
#[cfg_attr(docsrs, doc(cfg(feature = "kinesis")))]
pub mod kinesis;
pub mod metrics;
mod outcome;
pub mod powertools;
pub mod prelude;
pub mod record;
pub mod sqs;
pub mod store;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;

mod canonical;

pub use config::{CommitStrategy, Config, MissingKey, DEFAULT_EXPIRES_AFTER};
pub use error::{BoxError, Error, Permanent};
pub use idempotent::{
    Completion, IdempotencyLayer, Idempotent, InTransaction, SequencedLayer, TransactionEvent,
};
pub use input::Input;
pub use outcome::{Outcome, Processed};

/// The Lambda runtime, re-exported: [`LambdaEvent`](lambda_runtime::LambdaEvent) and
/// [`Context`](lambda_runtime::Context) cross this crate's API, so take them from here to
/// always have the version it was built with.
pub use lambda_runtime;

/// The Lambda event types, re-exported: the SQS, Kinesis and DynamoDB Streams events cross
/// this crate's API, so take them from here to always have the version it was built with.
pub use aws_lambda_events;

/// The DynamoDB SDK, re-exported: [`store::DynamoDbStore`] takes its `Client` and handlers'
/// writes are its `AttributeValue`s, so take them from here to always have the same version.
#[cfg(feature = "dynamodb")]
#[cfg_attr(docsrs, doc(cfg(feature = "dynamodb")))]
pub use aws_sdk_dynamodb;

/// The SQS SDK, re-exported: [`sqs::VisibilityLayer`] takes its `Client`, so take it from
/// here to always have the version it was built with.
#[cfg(feature = "sqs-visibility")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqs-visibility")))]
pub use aws_sdk_sqs;

/// The `lambda_http` crate, re-exported: [`http`]'s services take and answer its requests
/// and responses, so take them from here to always have the version it was built with.
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub use lambda_http;

/// The `redis` crate, re-exported: [`store::RedisStore`] runs on its connections, so take
/// them from here to always have the version it was built with.
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use redis;

/// The `tokio-postgres` crate, re-exported: [`store::PostgresStore`]'s transactions and
/// configuration are its types, so take them from here to always have the same version.
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use tokio_postgres;

/// The `deadpool-postgres` crate, re-exported: [`store::PostgresStore`] takes its pool, so
/// take it from here to always have the version it was built with.
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use deadpool_postgres;

/// The README's Rust examples, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
