//! A testing kit for your handlers (the `testing` feature, for dev-dependencies). It has
//! event builders for each trigger ([`events`]), invocations with a fresh request id and a deadline
//! ([`invocation`]), the manual clock ([`ManualClock`]), the embedded store with DynamoDB's
//! transactional writes ([`InMemoryStore`], with `set_unavailable` to fail closed), and the
//! store contract suites ([`contract`], [`transactional`]) for a store of your own.
//!
//! A test of an SQS handler, its redelivery and its failure, without DynamoDB:
//!
//! ```
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use aws_lambda_events::sqs::SqsMessage;
//! use lambda_idempotency::batch::BatchProcessor;
//! use lambda_idempotency::key::JsonPointer;
//! use lambda_idempotency::testing::events::{sqs_event, sqs_message};
//! use lambda_idempotency::testing::{invocation_at, InMemoryStore, ManualClock};
//! use lambda_idempotency::clock::Clock;
//! use lambda_idempotency::{IdempotencyLayer, Outcome};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let clock = ManualClock::starting_now();
//! let runs = Arc::new(AtomicUsize::new(0));
//! let counted = Arc::clone(&runs);
//! let handler = IdempotencyLayer::new(InMemoryStore::new())
//!     .with_key(JsonPointer::new("/orderId"))
//!     .with_clock(clock.clone())
//!     .handler(move |message: SqsMessage| {
//!         counted.fetch_add(1, Ordering::SeqCst);
//!         let body = message.body.unwrap_or_default();
//!         async move { Ok::<_, lambda_runtime::Error>(body.len()) }
//!     });
//! let processor = BatchProcessor::new(handler).with_clock(clock.clone());
//! let batch = || sqs_event([
//!     sqs_message("m-1", r#"{"orderId":"o-1"}"#),
//!     sqs_message("m-2", r#"{"orderId":"o-2"}"#),
//! ]);
//!
//! let first = processor
//!     .process(invocation_at(batch(), clock.now(), Duration::from_secs(30)))
//!     .await;
//! assert!(first.records.iter().all(|r| r.outcome == Outcome::Executed));
//! // The same batch again, a minute later: replayed, the handler does not run again.
//! clock.advance(Duration::from_secs(60));
//! let again = processor
//!     .process(invocation_at(batch(), clock.now(), Duration::from_secs(30)))
//!     .await;
//! assert!(again.records.iter().all(|r| r.replayed));
//! assert_eq!(runs.load(Ordering::SeqCst), 2);
//! assert!(again.response.batch_item_failures.is_empty());
//! # }
//! ```

pub mod contract;
#[cfg(feature = "dynamodb")]
#[cfg_attr(docsrs, doc(cfg(feature = "dynamodb")))]
pub mod dynamodb;
pub mod events;
pub mod transactional;

use std::time::{Duration, SystemTime};

use lambda_runtime::{Context, LambdaEvent};

pub use crate::clock::ManualClock;
pub use crate::store::InMemoryStore;

/// An invocation context at `now` whose deadline is `remaining` later, with a fresh request
/// id (as Lambda gives each invocation).
pub fn context_at(now: SystemTime, remaining: Duration) -> Context {
    let mut context = Context::default();
    context.request_id = uuid::Uuid::new_v4().to_string();
    context.deadline = crate::clock::epoch_ms(now).saturating_add(millis(remaining));
    context
}

/// An invocation context whose deadline is `remaining` from now (by the system clock).
pub fn context(remaining: Duration) -> Context {
    context_at(SystemTime::now(), remaining)
}

/// An invocation of `payload` (an event, or one record for a record service) at `now`, with
/// `remaining` before its deadline and a fresh request id. With a [`ManualClock`], pass
/// `clock.now()`.
pub fn invocation_at<T>(payload: T, now: SystemTime, remaining: Duration) -> LambdaEvent<T> {
    LambdaEvent::new(payload, context_at(now, remaining))
}

/// An invocation of `payload` now (by the system clock), with `remaining` before its
/// deadline and a fresh request id.
pub fn invocation<T>(payload: T, remaining: Duration) -> LambdaEvent<T> {
    invocation_at(payload, SystemTime::now(), remaining)
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
