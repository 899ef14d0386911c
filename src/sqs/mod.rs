//! SQS batches. Messages are an [`Input`](crate::Input) (their `messageId`, body and message
//! attributes feed the key extractors), and `SqsEvent` is a
//! [`BatchEvent`](crate::batch::BatchEvent): reported by `messageId`, in order on FIFO
//! queues (an `eventSourceARN` ending in `.fifo`), by `MessageGroupId`.

mod message;
#[cfg(feature = "sqs-visibility")]
mod visibility;

#[cfg(feature = "sqs-visibility")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqs-visibility")))]
pub use visibility::{
    queue_url, Backoff, Visibility, VisibilityLayer, CHANGES_LIMIT, CONCURRENT_CALLS,
    MAX_VISIBILITY,
};
