//! The stream-consumer's DynamoDB Streams keys: an order's `eventId` and another change's
//! stream `eventID` never give the same key, whatever text the order's `eventId` holds.

use lambda_idempotency::aws_lambda_events::event::dynamodb::EventRecord;
use lambda_idempotency_test_support::load_event_json;
use stream_consumer::dynamodb_key;

/// The sample INSERT, as `event_name` with stream id `event_id` and order `order_id`.
fn record(event_name: &str, event_id: &str, order_id: &str) -> EventRecord {
    let mut json = load_event_json("dynamodb_stream.json")["Records"][0].clone();
    json["eventName"] = event_name.into();
    json["eventID"] = event_id.into();
    json["dynamodb"]["NewImage"]["eventId"]["S"] = order_id.into();
    serde_json::from_value(json).expect("a stream record")
}

#[test]
fn an_order_cannot_take_the_key_of_another_change() {
    let change = dynamodb_key(&record("MODIFY", "c0ffee", "o-1")).unwrap();
    for order_id in ["change:c0ffee", "c0ffee"] {
        let order = dynamodb_key(&record("INSERT", "beef", order_id)).unwrap();
        assert_ne!(order, change, "order {order_id:?}");
    }
    // Two changes with the same stream id are one; an INSERT is keyed by its order.
    assert_eq!(
        dynamodb_key(&record("REMOVE", "c0ffee", "o-2")).unwrap(),
        change
    );
    assert_eq!(
        dynamodb_key(&record("INSERT", "a", "evt-1")).unwrap(),
        dynamodb_key(&record("INSERT", "b", "evt-1")).unwrap()
    );
}
