//! [`BatchEvent`]: what the batch processor needs from a batch event source (SQS, Kinesis).

use crate::input::Input;

/// How a source wants its records processed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ordering {
    /// Any order; records may run concurrently (SQS standard queues).
    Unordered,
    /// In order, one record at a time (SQS FIFO queues, and stream shards, whose event
    /// source mapping checkpoints at the lowest reported record): a record that does not
    /// succeed holds back the later records of its [group](BatchEvent::group), or every later
    /// record when it has none (see [`Scheduling`](super::Scheduling)).
    InOrder,
}

/// A Lambda event that carries a batch of records and answers with a partial batch response
/// (`batchItemFailures`). Implemented for `SqsEvent`, `KinesisEvent` and the DynamoDB Streams `Event`.
pub trait BatchEvent: Send + 'static {
    /// One record of the batch.
    type Record: Input + Clone + Send + Sync + 'static;
    /// The partial batch response.
    type Response: Send + 'static;

    /// The records, in the order of the event.
    fn into_records(self) -> Vec<Self::Record>;

    /// How these records must be processed.
    fn ordering(records: &[Self::Record]) -> Ordering;

    /// The record's identifier in `batchItemFailures` (SQS `messageId`, a stream record's
    /// sequence number), if it has a non-empty one.
    fn item_identifier(record: &Self::Record) -> Option<String>;

    /// The ordering group of the record (an SQS FIFO `MessageGroupId`), if any.
    fn group(record: &Self::Record) -> Option<String> {
        let _ = record;
        None
    }

    /// The response reporting `failures` (item identifiers) for retry.
    fn response(failures: Vec<String>) -> Self::Response;
}
