//! Kinesis: `events/kinesis.json`, records keyed by `eventID` or by a field of the data.

use aws_lambda_events::event::kinesis::{KinesisEvent, KinesisEventRecord};
use lambda_idempotency::batch::{BatchProcessor, Scheduling};
use lambda_idempotency::clock::SystemClock;
use lambda_idempotency::key::{JsonPointer, KeyExtractor, MessageAttribute, MessageId};
use lambda_idempotency::Outcome;

use super::{outcomes, records, reported, sample, values, Order, Rig, Stream, STOPPED};

const SEQUENCE: &str = "495903382714902566085596925383615710959215759891365888";

impl Stream for KinesisEvent {
    const SAMPLE: &'static str = "kinesis.json";

    fn with_records(mut self, records: Vec<KinesisEventRecord>) -> Self {
        self.records = records;
        self
    }

    fn processor<S>(service: S) -> BatchProcessor<S, SystemClock, Self> {
        BatchProcessor::kinesis(service)
    }

    fn order(record: &KinesisEventRecord) -> Result<Option<Order>, lambda_runtime::Error> {
        Ok(Some(serde_json::from_slice(&record.kinesis.data.0)?))
    }
}

fn sequence(n: u8) -> String {
    format!("{SEQUENCE}{n:02}")
}

#[tokio::test]
async fn a_shard_runs_in_order_and_stops_at_the_first_failure() {
    let rig = Rig::new().await;
    let report = rig.deliver(MessageId, sample::<KinesisEvent>()).await;
    assert_eq!(outcomes(&report), STOPPED);
    assert_eq!(reported(&report.response), [sequence(2), sequence(3)]);
    assert_eq!(rig.runs(), 2, "the third record never started");
    assert_eq!(rig.balance("acct-alice").await, 10);
    assert_eq!(rig.balance("acct-bob").await, 0);
    // Lambda sends the batch again from the checkpoint (the lowest reported record): the
    // failed record runs again, the skipped one is still not started.
    let again = rig
        .deliver(MessageId, records::<KinesisEvent>(&[1, 2]))
        .await;
    assert_eq!(outcomes(&again), [Outcome::Failed, Outcome::FifoSkipped]);
    assert_eq!(reported(&again.response), [sequence(2), sequence(3)]);
    assert_eq!(rig.runs(), 3);
}

/// No batch mode lets a shard's records run out of order or past a failure.
#[tokio::test]
async fn a_shard_stays_in_order_whatever_the_batch_mode() {
    for mode in [
        Scheduling::Concurrent { limit: 10 },
        Scheduling::Fifo {
            skip_failed_group_only: true,
        },
    ] {
        let rig = Rig::new().await.with_batch_mode(mode);
        let report = rig.deliver(MessageId, sample::<KinesisEvent>()).await;
        assert_eq!(outcomes(&report), STOPPED, "{mode:?}");
        assert_eq!(
            reported(&report.response),
            [sequence(2), sequence(3)],
            "{mode:?}"
        );
        assert_eq!(
            rig.runs(),
            2,
            "{mode:?}: the record behind the failure started"
        );
    }
}

#[tokio::test]
async fn a_redelivered_batch_replays_and_credits_once() {
    let rig = Rig::new().await;
    let first = rig
        .deliver(MessageId, records::<KinesisEvent>(&[0, 2]))
        .await;
    assert_eq!(outcomes(&first), [Outcome::Executed, Outcome::Executed]);
    assert!(reported(&first.response).is_empty());
    rig.clock.advance(std::time::Duration::from_secs(60));
    // The whole batch again (the invocation's answer was lost, say).
    let again = rig
        .deliver(MessageId, records::<KinesisEvent>(&[0, 2]))
        .await;
    assert_eq!(outcomes(&again), [Outcome::Replayed, Outcome::Replayed]);
    assert!(reported(&again.response).is_empty());
    assert_eq!(values(&again), [Some(10), Some(5)]);
    assert_eq!(rig.runs(), 2);
    assert_eq!(rig.balance("acct-alice").await, 10);
    assert_eq!(rig.balance("acct-bob").await, 5);
}

#[tokio::test]
async fn a_key_from_the_data_catches_a_producer_that_put_twice() {
    let rig = Rig::new().await;
    // The same order put twice: two records, two sequence numbers, one eventId.
    let mut event = records::<KinesisEvent>(&[0, 0]);
    event.records[1].kinesis.sequence_number = sequence(9);
    event.records[1].event_id = Some(format!("shardId-000000000000:{}", sequence(9)));
    let report = rig.deliver(JsonPointer::new("/eventId"), event).await;
    assert_eq!(outcomes(&report), [Outcome::Executed, Outcome::Replayed]);
    assert_eq!(rig.runs(), 1);
    assert_eq!(rig.balance("acct-alice").await, 10);
}

#[test]
fn a_record_reads_as_its_event_id_data_and_partition_key() {
    let record = &sample::<KinesisEvent>().records[0];
    assert_eq!(
        MessageId.key_material(record).unwrap(),
        format!("shardId-000000000000:{}", sequence(1)).into_bytes()
    );
    assert_eq!(
        JsonPointer::new("/account").key_material(record).unwrap(),
        b"acct-alice"
    );
    assert_eq!(
        MessageAttribute::new("partitionKey")
            .key_material(record)
            .unwrap(),
        b"acct-alice"
    );
    assert!(MessageAttribute::new("other").key_material(record).is_err());
}
