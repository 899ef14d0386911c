//! The guide: how to use the crate, chapter by chapter, with examples that compile.
//!
//! Start with the crate's front page (a complete SQS function) and the README's Getting
//! started; then the chapter for your job:
//!
//! - [`guarantees`]: what runs once, when it can run again, and how each failure ends;
//! - [`handler_kinds`]: a result alone, writes committed with the record, or the entity's
//!   own sequence;
//! - [`keys`]: choosing the idempotency key, and payload validation;
//! - [`batches`]: SQS standard and FIFO queues, Kinesis, DynamoDB Streams;
//! - [`http`]: HTTP APIs with the `Idempotency-Key` header;
//! - [`invocations`]: whole invocations of any event, and idempotent functions;
//! - [`stores`]: DynamoDB, Redis or Valkey, PostgreSQL, in memory;
//! - [`operations`]: metrics, the CLI and a runbook;
//! - [`costs`]: what a million messages cost in DynamoDB units, Lambda GB-seconds and
//!   dollars, by handler kind and commit strategy;
//! - [`testing`]: testing your own functions;
//! - [`troubleshooting`]: each symptom, its cause and its fix;
//! - [`configuration`]: every setting of `Config`, the layer, the processor and the stores;
//! - [`migrating`]: from Powertools for AWS Lambda, with both versions live during the
//!   cut-over.
//!
//! The chapters hold documentation only.

/// What the crate guarantees, and how each failure ends.
pub mod guarantees {
    #![doc = include_str!("guarantees.md")]
}
/// Choosing the handler kind and the commit strategy: a result alone, writes committed
/// with the record, or the entity's own sequence.
pub mod handler_kinds {
    #![doc = include_str!("handler_kinds.md")]
}
/// Choosing the idempotency key, and validating the payload under it.
pub mod keys {
    #![doc = include_str!("keys.md")]
}
/// Batches: SQS standard and FIFO queues, Kinesis and DynamoDB Streams.
pub mod batches {
    #![doc = include_str!("batches.md")]
}
/// HTTP APIs: the `Idempotency-Key` header.
pub mod http {
    #![doc = include_str!("http.md")]
}
/// Whole invocations of any event, and idempotent functions inside a handler.
pub mod invocations {
    #![doc = include_str!("invocations.md")]
}
/// Choosing a store: DynamoDB (one table or a single-table layout), Redis or Valkey,
/// PostgreSQL, or in memory.
pub mod stores {
    #![doc = include_str!("stores.md")]
}
/// Operating it: metrics, the `lambda-idempotency` CLI and a runbook.
pub mod operations {
    #![doc = include_str!("operations.md")]
}
/// What it costs: DynamoDB units, Lambda GB-seconds and dollars per million messages, by
/// handler kind and commit strategy, from the benchmark's figures.
pub mod costs {
    #![doc = include_str!("costs.md")]
}
/// Testing your own functions with the `testing` feature.
pub mod testing {
    #![doc = include_str!("testing.md")]
}
/// Troubleshooting: each symptom, its cause and its fix.
pub mod troubleshooting {
    #![doc = include_str!("troubleshooting.md")]
}
/// Every setting: of `Config`, the layer, the batch processor and the stores.
pub mod configuration {
    #![doc = include_str!("configuration.md")]
}
/// Migrating from Powertools for AWS Lambda: one table shared by both versions during the
/// cut-over, the option mapping, and what differs.
pub mod migrating {
    #![doc = include_str!("migrating.md")]
}
