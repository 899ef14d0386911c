//! Batches of records with partial batch responses.
//!
//! [`BatchProcessor`] runs each record of a [`BatchEvent`] (an SQS, Kinesis or DynamoDB Streams event) through a per-record service (normally an
//! [`Idempotent`](crate::Idempotent) one), concurrently or in order as the source needs,
//! and answers the records to retry in `batchItemFailures`.

mod error;
mod event;
mod event_only;
mod processor;
mod report;
mod scheduling;

pub use crate::idempotent::batch_replay::{BatchReplay, BatchReplayer, ReplayPhase};
pub use crate::idempotent::batch_scope::BatchRecord;
pub use error::BatchError;
pub use event::{BatchEvent, Ordering};
pub use event_only::EventOnly;
pub use processor::{
    BatchFuture, BatchProcessor, Precheck, ANSWER_MARGIN, DEFAULT_DEADLINE_MARGIN,
};
pub use report::{BatchReport, RecordReport};
pub use scheduling::Scheduling;
