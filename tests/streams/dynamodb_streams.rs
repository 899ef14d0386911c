//! DynamoDB Streams: `events/dynamodb_stream.json`, records keyed by `eventID`, by a field
//! of the new image, or by the item's key.

use aws_lambda_events::event::dynamodb::{Event, EventRecord};
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::clock::SystemClock;
use lambda_idempotency::key::PayloadValidation;
use lambda_idempotency::key::{BodyHash, JsonPointer, KeyExtractor, MessageAttribute, MessageId};
use lambda_idempotency::Outcome;

use super::{outcomes, records, reported, sample, values, Order, Rig, Stream, STOPPED};

impl Stream for Event {
    const SAMPLE: &'static str = "dynamodb_stream.json";

    fn with_records(mut self, records: Vec<EventRecord>) -> Self {
        self.records = records;
        self
    }

    fn processor<S>(service: S) -> BatchProcessor<S, SystemClock, Self> {
        BatchProcessor::dynamodb_streams(service)
    }

    /// Inserts carry orders; other changes credit nothing.
    fn order(record: &EventRecord) -> Result<Option<Order>, lambda_runtime::Error> {
        if record.event_name != "INSERT" {
            return Ok(None);
        }
        Ok(Some(serde_dynamo::from_item(
            record.change.new_image.clone(),
        )?))
    }
}

fn sequence(n: u8) -> String {
    format!("1000000000000000000{n:02}")
}

#[tokio::test]
async fn a_shard_runs_in_order_and_stops_at_the_first_failure() {
    let rig = Rig::new().await;
    let report = rig.deliver(MessageId, sample::<Event>()).await;
    assert_eq!(outcomes(&report), STOPPED);
    assert_eq!(reported(&report.response), [sequence(2), sequence(3)]);
    assert_eq!(rig.runs(), 2, "the third record never started");
    assert_eq!(rig.balance("acct-alice").await, 10);
    assert_eq!(rig.balance("acct-bob").await, 0);
}

#[tokio::test]
async fn a_redelivered_batch_replays_and_credits_once() {
    let rig = Rig::new().await;
    let first = rig.deliver(MessageId, records::<Event>(&[0, 2])).await;
    assert_eq!(outcomes(&first), [Outcome::Executed, Outcome::Executed]);
    let again = rig.deliver(MessageId, records::<Event>(&[0, 2])).await;
    assert_eq!(outcomes(&again), [Outcome::Replayed, Outcome::Replayed]);
    assert!(reported(&again.response).is_empty());
    assert_eq!(values(&again), [Some(10), Some(5)]);
    assert_eq!(rig.runs(), 2);
    assert_eq!(rig.balance("acct-bob").await, 5);
}

#[tokio::test]
async fn a_key_from_the_item_replays_later_changes_of_the_item() {
    let rig = Rig::new().await;
    // Two changes (two eventIDs and sequence numbers) of one item: keyed by the item's
    // eventId, the second replays the first (what the README warns of).
    let mut event = records::<Event>(&[0, 0]);
    event.records[1].event_id = "another-change".into();
    event.records[1].change.sequence_number = Some(sequence(9));
    let report = rig.deliver(JsonPointer::new("/eventId"), event).await;
    assert_eq!(outcomes(&report), [Outcome::Executed, Outcome::Replayed]);
    assert_eq!(rig.runs(), 1);
    assert_eq!(rig.balance("acct-alice").await, 10);
}

/// A `REMOVE` carries no new image: its body is the old image (or, on a `KEYS_ONLY` stream,
/// the keys), so payload validation and body keys never reject it, which would hold back
/// the whole shard behind it.
#[tokio::test]
async fn removes_and_keys_only_records_have_a_body_and_do_not_stall_the_shard() {
    let rig = Rig::new().await.with_validation(PayloadValidation::Body);
    let mut event = records::<Event>(&[0, 0, 2]);
    let remove = &mut event.records[1];
    remove.event_id = "remove-evt-d1".into();
    remove.event_name = "REMOVE".into();
    remove.change.sequence_number = Some(sequence(7));
    remove.change.old_image = std::mem::take(&mut remove.change.new_image);
    let report = rig.deliver(MessageId, event.clone()).await;
    assert_eq!(outcomes(&report), [Outcome::Executed; 3]);
    assert!(reported(&report.response).is_empty());
    assert_eq!(rig.runs(), 3);
    assert_eq!(rig.balance("acct-alice").await, 10);
    assert_eq!(rig.balance("acct-bob").await, 5);
    // A KEYS_ONLY stream: no images at all; the body is the item's keys.
    let mut keys_only = event.records[1].clone();
    keys_only.change.old_image = serde_dynamo::Item::default();
    assert_eq!(
        BodyHash.key_material(&keys_only).unwrap(),
        br#"{"eventId":"evt-d1"}"#
    );
    assert!(PayloadValidation::Body.hash(&keys_only).unwrap().is_some());
}

#[test]
fn a_record_reads_as_its_event_id_new_image_and_keys() {
    let record = &sample::<Event>().records[0];
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
