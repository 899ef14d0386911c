//! `KinesisEventRecord` as [`Input`] and `KinesisEvent` as [`BatchEvent`].

use std::borrow::Cow;

use aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};
use aws_lambda_events::event::streams::KinesisEventResponse;

use crate::batch::{BatchEvent, Ordering};
use crate::input::{AttributeValue, Input};

/// The attribute name under which a Kinesis record's partition key is read.
const PARTITION_KEY: &str = "partitionKey";

impl crate::input::Identified for KinesisEventRecord {}

impl Input for KinesisEventRecord {
    /// The `eventID`: `shardId-…:` and the sequence number.
    fn id(&self) -> Option<&str> {
        self.event_id.as_deref()
    }

    /// The record's data, decoded from base64.
    fn body(&self) -> Option<Cow<'_, [u8]>> {
        Some(Cow::Borrowed(&self.kinesis.data.0))
    }

    /// `partitionKey`: the record's partition key. No other attribute.
    fn attribute(&self, name: &str) -> Option<AttributeValue<'_>> {
        (name == PARTITION_KEY).then_some(AttributeValue::Text(&self.kinesis.partition_key))
    }

    fn same_event(&self, other: &Self) -> bool {
        self == other
    }
}

impl BatchEvent for KinesisEvent {
    type Record = KinesisEventRecord;
    type Response = KinesisEventResponse;

    fn into_records(self) -> Vec<KinesisEventRecord> {
        self.records
    }

    /// Always in order: the records of one invocation come from one shard.
    fn ordering(_records: &[KinesisEventRecord]) -> Ordering {
        Ordering::InOrder
    }

    fn item_identifier(record: &KinesisEventRecord) -> Option<String> {
        Some(record.kinesis.sequence_number.clone()).filter(|sequence| !sequence.is_empty())
    }

    fn response(failures: Vec<String>) -> KinesisEventResponse {
        let mut response = KinesisEventResponse::default();
        for sequence_number in failures {
            response.add_failure(sequence_number);
        }
        response
    }
}
