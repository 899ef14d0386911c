//! DynamoDB Streams: `events/dynamodb_stream.json`, records keyed by `eventID`, by a field
//! of the new image, or by the item's key.

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use aws_lambda_events::event::streams::DynamoDbEventResponse;
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::clock::SystemClock;
use lambda_idempotency::key::{BodyHash, JsonPointer, KeyExtractor, MessageAttribute, MessageId};
use lambda_idempotency::validation::PayloadValidation;
use lambda_idempotency::Outcome;
use lambda_idempotency_test_support::load_event_json;

use super::{outcomes, values, Order, Rig, Stream, STOPPED};

impl Stream for Event {
    fn processor<S>(service: S) -> BatchProcessor<S, SystemClock, Self> {
        BatchProcessor::dynamodb_streams(service)
    }

    fn order(record: &EventRecord) -> Result<Order, lambda_runtime::Error> {
        Ok(serde_dynamo::from_item(record.change.new_image.clone())?)
    }
}

pub(super) fn sample() -> Event {
    serde_json::from_value(load_event_json("dynamodb_stream.json")).unwrap()
}

pub(super) fn records(indexes: &[usize]) -> Event {
    let all = sample().records;
    let mut event = sample();
    event.records = indexes.iter().map(|&i| all[i].clone()).collect();
    event
}

fn reported(response: &DynamoDbEventResponse) -> Vec<String> {
    let failures = &response.batch_item_failures;
    failures
        .iter()
        .filter_map(|f| f.item_identifier.clone())
        .collect()
}

fn sequence(n: u8) -> String {
    format!("1000000000000000000{n:02}")
}

#[tokio::test]
async fn a_shard_runs_in_order_and_stops_at_the_first_failure() {
    let rig = Rig::new().await;
    let report = rig.deliver(MessageId, sample()).await;
    assert_eq!(outcomes(&report), STOPPED);
    assert_eq!(reported(&report.response), [sequence(2), sequence(3)]);
    assert_eq!(rig.runs(), 2, "the third record never started");
    assert_eq!(rig.balance("acct-alice").await, 10);
    assert_eq!(rig.balance("acct-bob").await, 0);
}

#[tokio::test]
async fn a_redelivered_batch_replays_and_credits_once() {
    let rig = Rig::new().await;
    let first = rig.deliver(MessageId, records(&[0, 2])).await;
    assert_eq!(outcomes(&first), [Outcome::Executed, Outcome::Executed]);
    let again = rig.deliver(MessageId, records(&[0, 2])).await;
    assert_eq!(outcomes(&again), [Outcome::Replayed, Outcome::Replayed]);
    assert!(reported(&again.response).is_empty());
    assert_eq!(values(&again), [Some(10), Some(5)]);
    assert_eq!(rig.runs(), 2);
    assert_eq!(rig.balance("acct-bob").await, 5);
}

#[tokio::test]
async fn the_same_order_written_twice_is_caught_by_a_key_from_the_new_image() {
    let rig = Rig::new().await;
    // Two changes (two eventIDs and sequence numbers) that carry one eventId.
    let mut event = records(&[0, 0]);
    event.records[1].event_id = "another-change".into();
    event.records[1].change.sequence_number = Some(sequence(9));
    let report = rig.deliver(JsonPointer::new("/eventId"), event).await;
    assert_eq!(outcomes(&report), [Outcome::Executed, Outcome::Replayed]);
    assert_eq!(rig.runs(), 1);
    assert_eq!(rig.balance("acct-alice").await, 10);
}

#[test]
fn a_record_reads_as_its_event_id_new_image_and_keys() {
    let record = &sample().records[0];
    assert_eq!(
        MessageId.key_material(record).unwrap(),
        record.event_id.as_bytes()
    );
    assert_eq!(
        BodyHash.key_material(record).unwrap(),
        br#"{"account":"acct-alice","amount":10,"eventId":"evt-d1"}"#
    );
    assert_eq!(
        MessageAttribute::new("eventId")
            .key_material(record)
            .unwrap(),
        b"evt-d1"
    );
    // Payload validation reads the new image too: another amount is another payload.
    let mut changed = record.clone();
    let amount = serde_dynamo::AttributeValue::N("11".into());
    changed.change.new_image = serde_dynamo::Item::from(
        [
            (
                "eventId".to_string(),
                serde_dynamo::AttributeValue::S("evt-d1".into()),
            ),
            (
                "account".to_string(),
                serde_dynamo::AttributeValue::S("acct-alice".into()),
            ),
            ("amount".to_string(), amount),
        ]
        .into_iter()
        .collect::<std::collections::HashMap<_, _>>(),
    );
    let validation = PayloadValidation::Body;
    assert_ne!(
        validation.hash(record).unwrap(),
        validation.hash(&changed).unwrap()
    );
}
