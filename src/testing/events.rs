//! Event builders for each supported trigger: the records your handler receives, with the
//! fields the idempotency layer reads (ids, bodies, attributes, sequence numbers) filled in
//! as Lambda fills them. Wrap a record or an event in an invocation with
//! [`invocation`](super::invocation).

use aws_lambda_events::sqs::{SqsEvent, SqsMessage, SqsMessageAttribute};

/// An SQS message with `message_id` and `body`, from a standard queue.
pub fn sqs_message(message_id: &str, body: &str) -> SqsMessage {
    let mut message = SqsMessage::default();
    message.message_id = Some(message_id.to_string());
    message.body = Some(body.to_string());
    message.event_source = Some("aws:sqs".to_string());
    message.event_source_arn = Some("arn:aws:sqs:us-east-1:123456789012:orders".to_string());
    message.aws_region = Some("us-east-1".to_string());
    message
}

/// An SQS message from a FIFO queue (`orders.fifo`), in the message group `group`.
pub fn sqs_fifo_message(message_id: &str, body: &str, group: &str) -> SqsMessage {
    let mut message = sqs_message(message_id, body);
    message.event_source_arn = Some("arn:aws:sqs:us-east-1:123456789012:orders.fifo".to_string());
    message
        .attributes
        .insert("MessageGroupId".to_string(), group.to_string());
    message
}

/// `message` with the string message attribute `name` set to `value` (an
/// `Idempotency-Key`, say).
pub fn with_string_attribute(mut message: SqsMessage, name: &str, value: &str) -> SqsMessage {
    let mut attribute = SqsMessageAttribute::default();
    attribute.string_value = Some(value.to_string());
    attribute.data_type = Some("String".to_string());
    message
        .message_attributes
        .insert(name.to_string(), attribute);
    message
}

/// An SQS event of `messages`, in order.
pub fn sqs_event(messages: impl IntoIterator<Item = SqsMessage>) -> SqsEvent {
    let mut event = SqsEvent::default();
    event.records = messages.into_iter().collect();
    event
}

/// A Kinesis record of shard `shardId-000000000000` with `sequence_number` and `data` (raw
/// bytes: the event carries them base64-encoded, the record decoded).
#[cfg(feature = "kinesis")]
#[cfg_attr(docsrs, doc(cfg(feature = "kinesis")))]
pub fn kinesis_record(
    sequence_number: &str,
    data: &[u8],
) -> aws_lambda_events::event::kinesis::KinesisEventRecord {
    let mut record = aws_lambda_events::event::kinesis::KinesisEventRecord::default();
    record.event_id = Some(format!("shardId-000000000000:{sequence_number}"));
    record.event_source = Some("aws:kinesis".to_string());
    record.event_name = Some("aws:kinesis:record".to_string());
    record.event_source_arn = Some("arn:aws:kinesis:us-east-1:123456789012:stream/orders".into());
    record.kinesis.sequence_number = sequence_number.to_string();
    record.kinesis.partition_key = "partition-1".to_string();
    *record.kinesis.data = data.to_vec();
    record
}

/// A Kinesis event of `records`, in order.
#[cfg(feature = "kinesis")]
#[cfg_attr(docsrs, doc(cfg(feature = "kinesis")))]
pub fn kinesis_event(
    records: impl IntoIterator<Item = aws_lambda_events::event::kinesis::KinesisEventRecord>,
) -> aws_lambda_events::event::kinesis::KinesisEvent {
    let mut event = aws_lambda_events::event::kinesis::KinesisEvent::default();
    event.records = records.into_iter().collect();
    event
}

/// A DynamoDB Streams `INSERT` of the item `new_image`.
///
/// `new_image` is plain JSON (an object, converted to DynamoDB's attribute values); its key
/// attributes are `keys` (an object of the table's key
/// attributes, e.g. `{"orderId": "o-1"}`), with `sequence_number`; its `eventID` is derived
/// from the sequence number. Panics when `keys` or `new_image` is not a JSON object.
#[cfg(feature = "dynamodb-streams")]
#[cfg_attr(docsrs, doc(cfg(feature = "dynamodb-streams")))]
pub fn dynamodb_insert(
    sequence_number: &str,
    keys: serde_json::Value,
    new_image: serde_json::Value,
) -> aws_lambda_events::event::dynamodb::EventRecord {
    dynamodb_change("INSERT", sequence_number, keys, new_image)
}

/// A DynamoDB Streams change (`event_name`: `INSERT`, `MODIFY` or `REMOVE`) of the item with
/// key attributes `keys`, as a `NEW_AND_OLD_IMAGES` stream sends it with one image. `image`
/// (plain JSON) is the new image of an `INSERT` or `MODIFY` and the old image of a `REMOVE`.
/// Like Lambda, the record always has `Keys` (the layer reads them as the record's
/// attributes, and as its body when there is no image).
#[cfg(feature = "dynamodb-streams")]
#[cfg_attr(docsrs, doc(cfg(feature = "dynamodb-streams")))]
pub fn dynamodb_change(
    event_name: &str,
    sequence_number: &str,
    keys: serde_json::Value,
    image: serde_json::Value,
) -> aws_lambda_events::event::dynamodb::EventRecord {
    use aws_lambda_events::event::dynamodb::{EventRecord, StreamViewType};
    let item = |json: serde_json::Value| -> serde_dynamo::Item {
        serde_dynamo::to_item(json).expect("a JSON object")
    };
    let mut record = EventRecord::default();
    record.event_id = format!("event-{sequence_number}");
    record.event_name = event_name.to_string();
    record.event_source = Some("aws:dynamodb".to_string());
    record.event_version = Some("1.1".to_string());
    record.aws_region = "us-east-1".to_string();
    record.event_source_arn =
        Some("arn:aws:dynamodb:us-east-1:123456789012:table/orders/stream/2026-01-01".into());
    record.change.sequence_number = Some(sequence_number.to_string());
    record.change.stream_view_type = Some(StreamViewType::NewAndOldImages);
    record.change.keys = item(keys);
    if event_name == "REMOVE" {
        record.change.old_image = item(image);
    } else {
        record.change.new_image = item(image);
    }
    record
}

/// A DynamoDB Streams event of `records`, in order.
#[cfg(feature = "dynamodb-streams")]
#[cfg_attr(docsrs, doc(cfg(feature = "dynamodb-streams")))]
pub fn dynamodb_event(
    records: impl IntoIterator<Item = aws_lambda_events::event::dynamodb::EventRecord>,
) -> aws_lambda_events::event::dynamodb::Event {
    let mut event = aws_lambda_events::event::dynamodb::Event::default();
    event.records = records.into_iter().collect();
    event
}

/// An HTTP request as `lambda_http` hands it to a handler. It has `method` on `path` with
/// `body`, the `Idempotency-Key` header when `key` is given, a JSON content type, and an invocation
/// context whose deadline is 30 s away (the HTTP layer's lease follows it).
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub fn http_request(
    method: &str,
    path: &str,
    key: Option<&str>,
    body: &str,
) -> lambda_http::Request {
    use lambda_http::RequestExt;
    let mut builder = lambda_http::http::Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json");
    if let Some(key) = key {
        builder = builder.header("idempotency-key", key);
    }
    builder
        .body(lambda_http::Body::from(body))
        .expect("a valid method and path")
        .with_lambda_context(super::context(std::time::Duration::from_secs(30)))
}
