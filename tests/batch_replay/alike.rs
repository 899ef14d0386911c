//! Cases an adversarial review found ending differently with batch replay than without it
//! (each failed before its fix): every record must end, and the store be read, as without
//! it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use aws_lambda_events::sqs::SqsMessage;
use lambda_idempotency::batch::{Precheck, Scheduling};
use lambda_idempotency::hooks::ReplaySource;
use lambda_idempotency::key::JsonPointer;
use lambda_idempotency::key::PayloadValidation;
use lambda_idempotency::{Config, IdempotencyLayer, Outcome};
use lambda_idempotency_test_support::{outcomes, reported};
use tower::Layer;

use super::{batch, body_len, both_ways, message, Readiness, Rig, FIFO};

/// The cache answers m-1 (a payload mismatch) without a read on the record's own path; the
/// batch's replay must not read for it either.
#[tokio::test]
async fn a_batch_the_cache_rejects_reads_nothing() {
    for together in [false, true] {
        let rig = Rig::new();
        let processor = rig.processor(together, 100, Scheduling::default());
        rig.run(&processor, batch(vec![message("m-1", "{}", 1, false)]))
            .await;
        let report = rig
            .run(
                &processor,
                batch(vec![message("m-1", "{\"x\":1}", 2, false)]),
            )
            .await;
        assert_eq!(
            outcomes(&report),
            [Outcome::Rejected],
            "together: {together}"
        );
        assert_eq!(rig.calls(), (0, 1), "no lookup: together: {together}");
    }
}

/// A FIFO record skipped after a failure in its group: its own call would never happen, so
/// its response hook should not be called either.
#[tokio::test]
async fn a_skipped_fifo_record_calls_no_response_hook() {
    for together in [false, true] {
        let rig = Rig::new();
        let (_, report) = rig.fifo_failure_between_duplicates(together).await;
        assert_eq!(
            outcomes(&report),
            [Outcome::Replayed, Outcome::Failed, Outcome::FifoSkipped]
        );
        assert_eq!(
            *rig.hooked.lock().unwrap(),
            [ReplaySource::Store],
            "only m-2's hook: together: {together}"
        );
    }
}

/// Two messages with one key (a body field) and different payloads: a redelivered one (a,
/// not found in the store: its earlier attempt did not complete) and a first delivery (b).
/// a, first in the batch, runs and b is rejected, with batch replay too (the records start
/// in the event's order).
#[tokio::test]
async fn a_record_not_replayed_ends_as_without_batch_replay() {
    both_ways(|together| async move {
        let rig = Rig::new();
        let layer = IdempotencyLayer::new(rig.store.clone())
            .with_clock(rig.clock.clone())
            .with_key(JsonPointer::new("/k"))
            .with_config(
                Config::new()
                    .with_key_prefix("replay")
                    .with_payload_validation(PayloadValidation::Body),
            );
        let handler = layer.handler(body_len);
        let processor = rig.over_with(handler, together, |processor| {
            processor.with_precheck(Precheck::Redelivered)
        });
        let report = rig
            .run(
                &processor,
                batch(vec![
                    message("a", r#"{"k":1,"v":"aa"}"#, 2, false),
                    message("b", r#"{"k":1,"v":"b"}"#, 1, false),
                ]),
            )
            .await;
        (outcomes(&report), reported(&report))
    })
    .await;
}

/// A FIFO batch whose first record's handler takes the batch past its deadline margin: the
/// records after it end DeadlineNear (reported), with batch replay too (nothing is replayed
/// ahead of a FIFO record's turn).
#[tokio::test]
async fn a_fifo_replay_after_the_deadline_margin() {
    both_ways(|together| async move {
        let rig = Rig::new();
        let layer = rig.layer();
        let clock = rig.clock.clone();
        let slow = Arc::new(AtomicBool::new(false));
        let is_slow = slow.clone();
        let handler = layer.handler(move |m: SqsMessage| {
            if is_slow.load(Ordering::SeqCst) && m.message_id.as_deref() == Some("m-1") {
                // 800 ms left: within the 1 s deadline margin, beyond the answer margin.
                clock.advance(Duration::from_millis(29_200));
            }
            body_len(m)
        });
        let processor = rig.over_with(handler, together, |p| p.with_scheduling(FIFO));
        rig.run(&processor, batch(vec![message("m-2", "{}", 1, true)]))
            .await;
        slow.store(true, Ordering::SeqCst);
        let report = rig
            .run(
                &processor,
                batch(vec![
                    message("m-1", "{}", 1, true),
                    message("m-2", "{}", 2, true),
                ]),
            )
            .await;
        (outcomes(&report), reported(&report))
    })
    .await;
}

/// Each record's own call asks the Idempotent service (and so its handler) whether it is
/// ready; so does the batch's replay, once.
#[tokio::test]
async fn a_replay_asks_the_handler_whether_it_is_ready() {
    both_ways(|together| async move {
        let rig = Rig::new();
        let layer = rig.layer();
        let open = Arc::new(AtomicBool::new(true));
        let gate = open.clone();
        // Not ready: a load shedder's answer.
        let service = layer.layer(Readiness::new(move |_cx| {
            Poll::Ready(match gate.load(Ordering::SeqCst) {
                true => Ok(()),
                false => Err(std::io::Error::other("overloaded")),
            })
        }));
        let processor = rig.over(service, together);
        rig.run(&processor, batch(vec![message("m-1", "{}", 1, false)]))
            .await;
        open.store(false, Ordering::SeqCst);
        let report = rig
            .run(&processor, batch(vec![message("m-1", "{}", 2, false)]))
            .await;
        (outcomes(&report), reported(&report))
    })
    .await;
}

/// A FIFO batch: m-2 is held by another invocation's live lease when the batch begins, and
/// that invocation completes it while m-1 (a first delivery, before it in the group) runs.
/// m-2 is looked up at its turn, finds it completed and replays, with batch replay too (a
/// lookup at the batch's start would have found the lease, "in progress").
#[tokio::test]
async fn a_fifo_record_decides_on_the_lookup_of_its_turn() {
    use lambda_idempotency::record::{Record, Status};
    both_ways(|together| async move {
        let rig = Rig::new();
        let held = rig.held_elsewhere("m-2");
        let layer = rig.layer();
        let (clock, store) = (rig.clock.clone(), rig.store.inner.clone());
        let handler = layer.handler(move |m: SqsMessage| {
            if m.message_id.as_deref() == Some("m-1") {
                // m-1 takes 5 s, while the other invocation completes m-2.
                clock.advance(Duration::from_secs(5));
                store.insert_record(Record {
                    status: Status::Completed,
                    lease_expiration_ms: None,
                    owner: None,
                    data: Some("2".into()),
                    ..held.clone()
                });
            }
            body_len(m)
        });
        let processor = rig.over_with(handler, together, |p| p.with_scheduling(FIFO));
        let report = rig
            .run(
                &processor,
                batch(vec![
                    message("m-1", "{}", 1, true),
                    message("m-2", "{}", 2, true),
                    message("m-3", "{}", 1, true),
                ]),
            )
            .await;
        (outcomes(&report), reported(&report))
    })
    .await;
}

/// Duplicates within one batch (the same message twice; two messages of one key), the store
/// holding the key completed or not: the same ends both ways.
#[tokio::test]
async fn duplicates_within_a_batch_end_alike() {
    for limit in [1, 10] {
        for seeded in [false, true] {
            both_ways(|together| async move {
                let rig = Rig::new();
                let processor = rig.processor(together, 0, Scheduling::Concurrent { limit });
                if seeded {
                    rig.run(&processor, batch(vec![message("m-1", "{}", 1, false)]))
                        .await;
                }
                let report = rig
                    .run(
                        &processor,
                        batch(vec![
                            message("m-1", "{}", 2, false),
                            message("m-2", "{}", 1, false),
                            message("m-1", "{}", 2, false),
                            message("m-1", "{\"x\":1}", 2, false),
                        ]),
                    )
                    .await;
                (
                    outcomes(&report),
                    reported(&report),
                    super::values(&report),
                    rig.runs(),
                    rig.calls(),
                )
            })
            .await;
        }
    }
}
