//! A DynamoDB stream `EventRecord` as [`Input`] and the stream `Event` as [`BatchEvent`].

use std::borrow::Cow;

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use serde_dynamo::AttributeValue as DynamoValue;

use super::image;
use crate::batch::{BatchEvent, Ordering};
use crate::input::{AttributeValue, Input};

impl crate::input::Identified for EventRecord {}

impl Input for EventRecord {
    /// The `eventID`, unique per change.
    fn id(&self) -> Option<&str> {
        Some(self.event_id.as_str()).filter(|id| !id.is_empty())
    }

    /// The item as plain JSON: the `NewImage` (the item after the change); for a record
    /// without one (a `REMOVE`, or an `OLD_IMAGE` stream) the `OldImage`; for a stream that
    /// carries no images (`KEYS_ONLY`) the `Keys`. Every stream record has a body, so a body
    /// key or payload validation never rejects a record for lacking one (a rejected record
    /// would hold back its whole shard).
    fn body(&self) -> Option<Cow<'_, [u8]>> {
        let change = &self.change;
        let item = [&change.new_image, &change.old_image, &change.keys]
            .into_iter()
            .map(|image| image.inner())
            .find(|image| !image.is_empty())?;
        Some(Cow::Owned(image::to_json(item).into_bytes()))
    }

    /// A key attribute of the changed item (from `Keys`): a string or number as text, a
    /// binary value as bytes.
    fn attribute(&self, name: &str) -> Option<AttributeValue<'_>> {
        match self.change.keys.inner().get(name)? {
            DynamoValue::S(text) | DynamoValue::N(text) => Some(AttributeValue::Text(text)),
            DynamoValue::B(bytes) => Some(AttributeValue::Binary(bytes)),
            _ => None,
        }
    }

    fn same_event(&self, other: &Self) -> bool {
        self == other
    }
}

impl BatchEvent for Event {
    type Record = EventRecord;
    type Response = DynamoDbEventResponse;

    fn into_records(self) -> Vec<EventRecord> {
        self.records
    }

    /// Always in order: the records of one invocation come from one shard.
    fn ordering(_records: &[EventRecord]) -> Ordering {
        Ordering::InOrder
    }

    fn item_identifier(record: &EventRecord) -> Option<String> {
        record
            .change
            .sequence_number
            .clone()
            .filter(|sequence| !sequence.is_empty())
    }

    fn response(failures: Vec<String>) -> DynamoDbEventResponse {
        let mut response = DynamoDbEventResponse::default();
        for sequence_number in failures {
            let mut failure = DynamoDbBatchItemFailure::default();
            failure.item_identifier = Some(sequence_number);
            response.batch_item_failures.push(failure);
        }
        response
    }
}
