//! DynamoDB Streams (feature `dynamodb-streams`, on by default): a stream record is an
//! [`Input`](crate::Input) (its `eventID`, its `NewImage` as JSON for a body, its `Keys` as
//! attributes), and the stream event is a [`BatchEvent`](crate::batch::BatchEvent):
//! processed in order, stopping at the first record that does not succeed (the event source
//! mapping checkpoints at the lowest reported sequence number and sends the rest again), and
//! reported by sequence number.
//!
//! The default key, [`MessageId`](crate::key::MessageId), is the `eventID`, unique per
//! change, so a redelivery replays what completed. Key on a field of the new image
//! ([`JsonPointer`](crate::key::JsonPointer)) to catch the same business event written twice.

mod image;
mod record;
