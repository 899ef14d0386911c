//! [`Input`]: what key extractors and payload validation read from an event.

use std::borrow::Cow;

/// A value of a named attribute (an SQS message attribute, an HTTP header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AttributeValue<'a> {
    /// A text value.
    Text(&'a str),
    /// A binary value.
    Binary(&'a [u8]),
}

/// An event (or one record of a batch) that idempotency keys and payload hashes are derived
/// from: its own id, its body, and its named attributes.
///
/// Implemented for SQS messages, Kinesis records and DynamoDB stream records. The key
/// extractors ([`MessageId`](crate::key::MessageId),
/// [`MessageAttribute`](crate::key::MessageAttribute),
/// [`JsonPointer`](crate::key::JsonPointer), [`BodyHash`](crate::key::BodyHash)) and
/// [`PayloadValidation`](crate::validation::PayloadValidation) work on any `Input`.
pub trait Input {
    /// The event's own id, unique per event as its source sees it (SQS `messageId`).
    fn id(&self) -> Option<&str>;

    /// The body, as its bytes (SQS: the message body, which is text).
    fn body(&self) -> Option<Cow<'_, [u8]>>;

    /// The attribute called `name`, if the event has it with a value.
    fn attribute(&self, name: &str) -> Option<AttributeValue<'_>>;
}
