//! SQS batches: [`BatchProcessor`] runs each message of an `SqsEvent` through a per-record
//! service (normally an [`Idempotent`](crate::Idempotent) one), in order on FIFO queues, and
//! answers the partial batch response (`batchItemFailures`). SQS messages are an
//! [`Input`](crate::Input): their `messageId`, body and message attributes feed the key
//! extractors.

mod error;
mod message;
mod processor;
mod report;

pub use error::BatchError;
pub use processor::{
    BatchFuture, BatchMode, BatchProcessor, ANSWER_MARGIN, DEFAULT_DEADLINE_MARGIN,
};
pub use report::{BatchReport, RecordReport};
