//! DynamoDB Streams batches (feature `dynamodb-streams`, on by default). A stream record is an
//! [`Input`](crate::Input) (its `eventID`, the item as JSON for a body: its `NewImage`, else
//! its `OldImage`, else its `Keys`; its `Keys` as attributes), and the stream event is a [`BatchEvent`](crate::batch::BatchEvent):
//! processed in order, stopping at the first record that does not succeed (the event source
//! mapping checkpoints at the lowest reported sequence number and sends the rest again), and
//! reported by sequence number.
//!
//! The default key, [`MessageId`](crate::key::MessageId), is the `eventID`, unique per
//! change, so a redelivery replays what completed. Keep it: a key taken from the item
//! ([`JsonPointer`](crate::key::JsonPointer), [`BodyHash`](crate::key::BodyHash), a key
//! attribute) names the item, not the change, so every later change to the item (a
//! `MODIFY`, its `REMOVE`) would replay the first change's result instead of running, or,
//! with payload validation, be rejected.

mod image;
mod record;
