//! `SqsMessage` as [`Input`] and `SqsEvent` as [`BatchEvent`].

use std::borrow::Cow;

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};

use crate::batch::{BatchEvent, Ordering};
use crate::input::{AttributeValue, Input};

impl crate::input::Identified for SqsMessage {}

impl Input for SqsMessage {
    fn id(&self) -> Option<&str> {
        self.message_id.as_deref()
    }

    fn body(&self) -> Option<Cow<'_, [u8]>> {
        self.body
            .as_deref()
            .map(|body| Cow::Borrowed(body.as_bytes()))
    }

    /// A message attribute: its string value when it has one (even empty), else its binary
    /// value.
    fn attribute(&self, name: &str) -> Option<AttributeValue<'_>> {
        let attribute = self.message_attributes.get(name)?;
        match (&attribute.string_value, &attribute.binary_value) {
            (Some(text), _) => Some(AttributeValue::Text(text)),
            (None, Some(binary)) => Some(AttributeValue::Binary(&binary.0)),
            (None, None) => None,
        }
    }

    fn delivered_before(&self) -> bool {
        self.attributes
            .get("ApproximateReceiveCount")
            .and_then(|count| count.trim().parse::<u64>().ok())
            .is_some_and(|count| count > 1)
    }

    fn same_event(&self, other: &Self) -> bool {
        self == other
    }
}

impl BatchEvent for SqsEvent {
    type Record = SqsMessage;
    type Response = SqsBatchResponse;

    fn into_records(self) -> Vec<SqsMessage> {
        self.records
    }

    /// In order when any record comes from a FIFO queue.
    fn ordering(records: &[SqsMessage]) -> Ordering {
        let fifo = records.iter().any(|r| {
            r.event_source_arn
                .as_deref()
                .is_some_and(|arn| arn.ends_with(".fifo"))
        });
        if fifo {
            Ordering::InOrder
        } else {
            Ordering::Unordered
        }
    }

    fn item_identifier(record: &SqsMessage) -> Option<String> {
        record.message_id.clone().filter(|id| !id.is_empty())
    }

    fn group(record: &SqsMessage) -> Option<String> {
        record.attributes.get("MessageGroupId").cloned()
    }

    fn response(failures: Vec<String>) -> SqsBatchResponse {
        let mut response = SqsBatchResponse::default();
        for id in failures {
            response.add_failure(id);
        }
        response
    }
}
