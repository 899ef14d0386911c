//! SQS messages as [`Input`]: the `messageId`, the body and the message attributes; and
//! their FIFO message group.

use std::borrow::Cow;

use aws_lambda_events::sqs::SqsMessage;

use crate::input::{AttributeValue, Input};

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
}

/// The FIFO message group of `message`, if it has one.
pub(crate) fn message_group(message: &SqsMessage) -> Option<String> {
    message.attributes.get("MessageGroupId").cloned()
}
