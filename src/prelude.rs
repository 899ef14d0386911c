//! The common path in one import: the layer, the batch processor, the stores (behind their
//! features), [`Config`], [`Outcome`], the key extractors, [`Completion`] and [`Error`].
//!
//! `use lambda_idempotency::prelude::*;` is what an SQS, Kinesis or DynamoDB Streams batch
//! handler, a whole-invocation handler, an HTTP handler (feature `http`) or an idempotent
//! function needs from this crate; the event and runtime types come from the re-exported
//! [`aws_lambda_events`] and [`lambda_runtime`].
//!
//! ```
//! use lambda_idempotency::aws_lambda_events::sqs::{SqsEvent, SqsMessage};
//! use lambda_idempotency::lambda_runtime::{Context, LambdaEvent};
//! use lambda_idempotency::prelude::*;
//! use std::time::{Duration, SystemTime, UNIX_EPOCH};
//!
//! async fn ship(message: SqsMessage) -> Result<String, std::convert::Infallible> {
//!     Ok(format!("shipped {}", message.body.unwrap_or_default()))
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! // The embedded store; use `DynamoDbStore` in Lambda.
//! let layer = IdempotencyLayer::new(InMemoryStore::new())
//!     .with_key(JsonPointer::new("/order_id"))
//!     .with_config(Config::new());
//! let processor = BatchProcessor::new(layer.handler(ship));
//!
//! let mut event = SqsEvent::default();
//! for id in ["m-1", "m-2"] {
//!     let mut message = SqsMessage::default();
//!     message.message_id = Some(id.into());
//!     message.body = Some(r#"{"order_id":"o-1"}"#.into());
//!     event.records.push(message);
//! }
//! let mut context = Context::default(); // in Lambda, the runtime fills this in
//! let deadline = SystemTime::now() + Duration::from_secs(30);
//! context.deadline = deadline.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
//!
//! let report = processor.process(LambdaEvent::new(event, context)).await;
//! let outcomes: Vec<Outcome> = report.records.iter().map(|r| r.outcome).collect();
//! // Two messages for one order: it is shipped once.
//! assert_eq!(outcomes, [Outcome::Executed, Outcome::Replayed]);
//! # }
//! ```

pub use crate::batch::{BatchEvent, BatchProcessor, BatchReport, Scheduling};
pub use crate::key::{
    BodyHash, JsonPointer, KeyExtractor, MessageAttribute, MessageId, PayloadValidation,
};
#[cfg(feature = "dynamodb")]
#[cfg_attr(docsrs, doc(cfg(feature = "dynamodb")))]
pub use crate::store::DynamoDbStore;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use crate::store::PostgresStore;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use crate::store::RedisStore;
pub use crate::store::{InMemoryStore, Store};
pub use crate::{
    BoxError, CommitStrategy, Completion, Config, Error, IdempotencyLayer, Idempotent, Input,
    MissingKey, Outcome, Permanent, Processed, SequencedLayer,
};

#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub use crate::http::IdempotentHttpLayer;
#[cfg(feature = "sqs-visibility")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqs-visibility")))]
pub use crate::sqs::VisibilityLayer;
