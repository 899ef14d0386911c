//! Kinesis batches (feature `kinesis`, on by default). A record is an [`Input`](crate::Input) (its
//! `eventID`, the decoded `data` as its body, its partition key as the attribute
//! `partitionKey`), and `KinesisEvent` is a [`BatchEvent`](crate::batch::BatchEvent):
//! processed in order, stopping at the first record that does not succeed (the event source
//! mapping checkpoints at the lowest reported sequence number and sends the rest again), and
//! reported by sequence number.
//!
//! The default key, [`MessageId`](crate::key::MessageId), is the `eventID` (the shard id and
//! the sequence number), so a redelivery from the checkpoint replays what completed. Key on
//! a field of the data ([`JsonPointer`](crate::key::JsonPointer)) to catch a producer that
//! puts the same event twice.

mod record;
