//! FIFO queues: in order by default, stopping only the failed record's message group (or, in
//! `Scheduling::Fifo { skip_failed_group_only: false }`, the whole batch); stream shards stop
//! whole.

use lambda_idempotency_test_support as support;

use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::Arc;

use aws_lambda_events::event::kinesis::KinesisEventRecord;
use lambda_idempotency::batch::{BatchProcessor, Scheduling};
use lambda_idempotency::clock::{Clock, ManualClock};
use lambda_idempotency::key::JsonPointer;
use lambda_idempotency::store::InMemoryStore;
use lambda_idempotency::testing::events::{
    kinesis_event, kinesis_record, sqs_event, sqs_fifo_message,
};
use lambda_idempotency::testing::invocation_at;
use lambda_idempotency::{BoxError, IdempotencyLayer, Outcome};
use support::{load_event, outcomes, reported};

use crate::{ids, Setup, REMAINING};

#[tokio::test]
async fn fifo_stops_at_the_first_failure_and_reports_every_later_record() {
    let mut setup = Setup::new();
    setup.mode = Scheduling::Fifo {
        skip_failed_group_only: false,
    };
    let event = load_event("fifo.json");
    let report = setup.run(event.clone()).await;
    assert_eq!(
        outcomes(&report),
        [
            Outcome::Executed,
            Outcome::Rejected,
            Outcome::FifoSkipped,
            Outcome::FifoSkipped
        ]
    );
    assert_eq!(reported(&report), ids(&event, &[1, 2, 3]));
    assert_eq!(setup.effects.total(), 1);
}

#[tokio::test]
async fn events_from_a_fifo_queue_are_processed_in_order_by_default() {
    // The default mode sees the `.fifo` source and keeps each group's order: no opt-in
    // needed. Records 0, 1 and 3 are group acct-dave; record 2 is group acct-erin, which
    // runs past acct-dave's poison record.
    let setup = Setup::new();
    let event = load_event("fifo.json");
    let report = setup.run(event.clone()).await;
    assert_eq!(
        outcomes(&report),
        [
            Outcome::Executed,
            Outcome::Rejected,
            Outcome::Executed,
            Outcome::FifoSkipped
        ]
    );
    assert_eq!(reported(&report), ids(&event, &[1, 3]));
    // A standard queue's batch runs concurrently: the poison record fails alone.
    let report = setup.run(load_event("poison.json")).await;
    assert_eq!(
        outcomes(&report),
        [Outcome::Executed, Outcome::Rejected, Outcome::Executed]
    );
}

#[tokio::test]
async fn fifo_can_stop_only_the_failed_message_group() {
    let mut setup = Setup::new();
    setup.mode = Scheduling::Fifo {
        skip_failed_group_only: true,
    };
    let event = load_event("fifo.json");
    let report = setup.run(event.clone()).await;
    // Records 0, 1 and 3 are group acct-dave; record 2 is group acct-erin.
    assert_eq!(
        outcomes(&report),
        [
            Outcome::Executed,
            Outcome::Rejected,
            Outcome::Executed,
            Outcome::FifoSkipped
        ]
    );
    assert_eq!(reported(&report), ids(&event, &[1, 3]));
    assert_eq!(setup.effects.count("evt-3003"), 1);
    assert_eq!(setup.effects.count("evt-3004"), 0);
}

/// An order of `account` as a message body.
fn order(event_id: &str, account: &str) -> String {
    serde_json::json!({"eventId": event_id, "account": account, "amount": 1}).to_string()
}

/// On SQS FIFO every returned message counts toward the queue's maximum receives, also one
/// reported without being started: stopping other groups behind a poison message would take
/// their messages to the dead-letter queue with it, and buys no order (FIFO orders a group).
#[tokio::test]
async fn by_default_a_fifo_failure_stops_only_its_message_group() {
    for mode in [
        Scheduling::default(),
        // A batch that must run in order resolves the same way under `Concurrent`.
        Scheduling::Concurrent { limit: 10 },
    ] {
        let mut setup = Setup::new();
        setup.mode = mode;
        let event = sqs_event([
            sqs_fifo_message("m-1", "not json", "g1"),
            sqs_fifo_message("m-2", &order("evt-2", "acct-2"), "g2"),
            sqs_fifo_message("m-3", &order("evt-3", "acct-1"), "g1"),
            sqs_fifo_message("m-4", &order("evt-4", "acct-2"), "g2"),
        ]);
        let report = setup.run(event).await;
        assert_eq!(
            outcomes(&report),
            [
                Outcome::Rejected,
                Outcome::Executed,
                Outcome::FifoSkipped,
                Outcome::Executed
            ],
            "{mode:?}"
        );
        assert_eq!(reported(&report), ["m-1", "m-3"], "{mode:?}");
        assert_eq!(setup.effects.total(), 2, "{mode:?}: g2's two records ran");
        assert_eq!(setup.effects.count("evt-2"), 1, "{mode:?}");
        assert_eq!(setup.effects.count("evt-4"), 1, "{mode:?}");
        assert_eq!(setup.effects.count("evt-3"), 0, "{mode:?}: g1 waits");
    }
}

/// A record without a message group waits behind any failure, as a shard's records do.
#[tokio::test]
async fn by_default_a_fifo_record_without_a_group_waits_behind_any_failure() {
    let setup = Setup::new();
    let mut ungrouped = sqs_fifo_message("m-2", &order("evt-2", "acct-2"), "unused");
    ungrouped.attributes.remove("MessageGroupId");
    let event = sqs_event([
        sqs_fifo_message("m-1", "not json", "g1"),
        ungrouped,
        sqs_fifo_message("m-3", &order("evt-3", "acct-3"), "g3"),
    ]);
    let report = setup.run(event).await;
    assert_eq!(
        outcomes(&report),
        [Outcome::Rejected, Outcome::FifoSkipped, Outcome::Executed]
    );
    assert_eq!(reported(&report), ["m-1", "m-2"]);
    assert_eq!(setup.effects.total(), 1);
}

/// A shard has no message groups: by default its batch still stops whole at the first
/// failure, whatever the records' partition keys.
#[tokio::test]
async fn by_default_a_kinesis_batch_still_stops_whole() {
    let clock = ManualClock::starting_now();
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let handler = IdempotencyLayer::new(InMemoryStore::new())
        .with_key(JsonPointer::new("/eventId"))
        .with_clock(clock.clone())
        .handler(move |record: KinesisEventRecord| {
            counted.fetch_add(1, AtomicOrdering::SeqCst);
            async move { Ok::<_, BoxError>(record.kinesis.data.len()) }
        });
    let processor = BatchProcessor::kinesis(handler).with_clock(clock.clone());
    let record = |sequence: &str, data: &[u8], partition: &str| {
        let mut record = kinesis_record(sequence, data);
        record.kinesis.partition_key = partition.to_string();
        record
    };
    let event = kinesis_event([
        record("101", b"not json", "g1"),
        record("102", br#"{"eventId":"e-2"}"#, "g2"),
        record("103", br#"{"eventId":"e-3"}"#, "g1"),
        record("104", br#"{"eventId":"e-4"}"#, "g2"),
    ]);
    let report = processor
        .process(invocation_at(event, clock.now(), REMAINING))
        .await;
    let got: Vec<_> = report.records.iter().map(|r| r.outcome).collect();
    assert_eq!(
        got,
        [
            Outcome::Rejected,
            Outcome::FifoSkipped,
            Outcome::FifoSkipped,
            Outcome::FifoSkipped
        ]
    );
    let failures: Vec<_> = report
        .response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone().unwrap_or_default())
        .collect();
    assert_eq!(failures, ["101", "102", "103", "104"]);
    assert_eq!(runs.load(AtomicOrdering::SeqCst), 0, "no record started");
}
