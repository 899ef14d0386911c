//! A DynamoDB stream `EventRecord` as [`Input`] and the stream `Event` as [`BatchEvent`].

use std::borrow::Cow;

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use serde_dynamo::AttributeValue as DynamoValue;

use super::image;
use crate::batch::{BatchEvent, Ordering};
use crate::input::{AttributeValue, Input};

impl Input for EventRecord {
    /// The `eventID`, unique per change.
    fn id(&self) -> Option<&str> {
        Some(self.event_id.as_str()).filter(|id| !id.is_empty())
    }

    /// The `NewImage` (the item after the change) as plain JSON; none for a record without
    /// one (a `REMOVE`, or a stream that does not carry new images).
    fn body(&self) -> Option<Cow<'_, [u8]>> {
        let new_image = self.change.new_image.inner();
        (!new_image.is_empty()).then(|| Cow::Owned(image::to_json(new_image).into_bytes()))
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
