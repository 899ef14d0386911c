//! Each record's turn, with the replay phase shared: cases a second adversarial review found
//! ending differently with batch replay (each failed on fe91d8a). Each test runs one delivery
//! without and with batch replay and expects the same ends.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use aws_lambda_events::sqs::SqsMessage;
use futures_util::FutureExt;
use lambda_idempotency::batch::{Precheck, Scheduling};
use lambda_idempotency::clock::{epoch_ms, Clock};
use lambda_idempotency::hooks::ReplaySource;
use lambda_idempotency::record::Status;
use lambda_idempotency::{Config, IdempotencyLayer, Outcome};
use lambda_idempotency_test_support::{error_types, outcomes, reported};
use tower::{Layer, Service};

use super::{batch, both_ways, message, Readiness, Replaying, Rig, Ticking, REMAINING};

/// A panic in the handler's readiness fails each record alone (the per-record panic guard
/// around `oneshot`), with batch replay too (the replay phase asks readiness under a guard).
#[tokio::test]
async fn a_panicking_readiness_fails_each_record_alone() {
    let end = both_ways(|together| async move {
        let rig = Rig::new();
        let layer = rig.layer();
        let armed = Arc::new(AtomicBool::new(false));
        let bug = armed.clone();
        // A user's service with a bug in its readiness.
        let service = layer.layer(Readiness::new(move |_cx| {
            assert!(!bug.load(Ordering::SeqCst), "the handler's readiness bug");
            Poll::Ready(Ok(()))
        }));
        let processor = rig.over(service, together);
        rig.run(&processor, batch(vec![message("m-1", "{}", 1, false)]))
            .await;
        armed.store(true, Ordering::SeqCst);
        let again = batch(vec![
            message("m-1", "{}", 2, false),
            message("m-2", "{}", 1, false),
        ]);
        let end = AssertUnwindSafe(rig.run(&processor, again))
            .catch_unwind()
            .await
            .map(|report| (outcomes(&report), reported(&report)))
            .map_err(|_| "the whole batch panicked");
        end
    })
    .await;
    assert_eq!(
        end,
        Ok((
            vec![Outcome::Failed; 2],
            vec!["m-1".to_string(), "m-2".to_string()]
        ))
    );
}

/// A handler not ready until 2 s after the invocation's deadline: each record's call is
/// stopped at the answer margin (DeadlineReached) and the batch answers in time, with batch
/// replay too (the replay phase, readiness included, is stopped there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_not_ready_does_not_hold_the_batch_past_its_deadline() {
    let end = both_ways(|together| async move {
        let rig = Rig::new();
        let layer = rig.layer();
        let ready_at_ms = Arc::new(AtomicU64::new(0));
        let (clock, ready_at) = (rig.clock.clone(), ready_at_ms.clone());
        // A limiter whose permits another invocation of the process holds.
        let service = layer.layer(Readiness::new(move |cx| {
            if epoch_ms(clock.now()) >= ready_at.load(Ordering::SeqCst) {
                Poll::Ready(Ok(()))
            } else {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }));
        let processor = rig.over(service, together);
        rig.run(&processor, batch(vec![message("m-1", "{}", 1, false)]))
            .await;
        let deadline_ms = epoch_ms(rig.clock.now()) + REMAINING.as_millis() as u64;
        ready_at_ms.store(deadline_ms + 2_000, Ordering::SeqCst);
        // Time passes: 10 ms of the clock per real millisecond.
        let ticking = Ticking::start(&rig.clock);
        let report = rig
            .run(
                &processor,
                batch(vec![
                    message("m-1", "{}", 2, false),
                    message("m-2", "{}", 1, false),
                ]),
            )
            .await;
        let answered_ms = epoch_ms(rig.clock.now());
        drop(ticking);
        (
            outcomes(&report),
            error_types(&report),
            reported(&report),
            answered_ms < deadline_ms,
        )
    })
    .await;
    assert_eq!(
        end,
        (
            vec![Outcome::DeadlineNear; 2],
            vec![Some("Idempotency.DeadlineReached"); 2],
            vec!["m-1".to_string(), "m-2".to_string()],
            true
        )
    );
}

/// A processor over a new layer (nothing cached locally), with `limit` records at once. The
/// handler answers the body's length; a body of "slow:<ms>" advances the clock by <ms> first.
fn slow_processor(
    rig: &Rig,
    together: bool,
    limit: usize,
) -> Replaying<
    impl Service<
            lambda_idempotency::batch::BatchRecord<SqsMessage>,
            Response = lambda_idempotency::Processed<usize>,
            Error = lambda_idempotency::Error,
        > + Clone,
> {
    let hooked = rig.hooked.clone();
    let layer = IdempotencyLayer::new(rig.store.clone())
        .with_clock(rig.clock.clone())
        .with_config(Config::new().with_key_prefix("replay").with_response_hook(
            move |value, replay| {
                hooked.lock().unwrap().push(replay.source);
                value
            },
        ));
    let (clock, runs) = (rig.clock.clone(), rig.runs.clone());
    let handler = layer.handler(move |m: SqsMessage| {
        runs.fetch_add(1, Ordering::SeqCst);
        let body = m.body.unwrap_or_default();
        if let Some(ms) = body.strip_prefix("slow:") {
            clock.advance(Duration::from_millis(ms.parse().unwrap()));
        }
        std::future::ready(Ok::<_, std::io::Error>(body.len()))
    });
    rig.over_with(handler, together, |processor| {
        processor
            .with_precheck(Precheck::Redelivered)
            .with_scheduling(Scheduling::Concurrent { limit })
    })
}

/// A rig whose store holds m-1 and m-3 completed (first deliveries through
/// [`slow_processor`]).
async fn completed_m1_m3(together: bool) -> Rig {
    let rig = Rig::new();
    let first = slow_processor(&rig, together, 1);
    let firsts = vec![
        message("m-1", "{}", 1, false),
        message("m-3", "{}", 1, false),
    ];
    rig.run(&first, batch(firsts)).await;
    rig
}

/// Limit 1: m-3's record expires while m-2 runs. Its own call decides at its start (the
/// lookup's record, expired: taken over, the handler runs again); so does its replay
/// candidate, at its turn.
#[tokio::test]
async fn a_record_that_expires_before_its_turn_is_decided_at_its_turn() {
    let end = both_ways(|together| async move {
        let rig = completed_m1_m3(together).await;
        // m-3's record ends within the next second.
        let now_secs = epoch_ms(rig.clock.now()) / 1000;
        let mut m3 = rig
            .store
            .inner
            .records()
            .into_iter()
            .find(|r| r.key == lambda_idempotency::key::IdempotencyKey::derive("replay", b"m-3"))
            .unwrap();
        assert_eq!(m3.status, Status::Completed);
        m3.expiration_secs = now_secs;
        rig.store.inner.insert_record(m3);
        let runs_before = rig.runs();
        let processor = slow_processor(&rig, together, 1);
        let report = rig
            .run(
                &processor,
                batch(vec![
                    message("m-1", "{}", 2, false),
                    message("m-2", "slow:5000", 1, false),
                    message("m-3", "{}", 2, false),
                ]),
            )
            .await;
        (outcomes(&report), rig.runs() - runs_before)
    })
    .await;
    assert_eq!(
        end,
        (
            vec![Outcome::Replayed, Outcome::Executed, Outcome::Executed],
            2
        )
    );
}

/// Limit 1: m-2 takes the batch within the deadline margin, so m-3 (completed, redelivered)
/// is not started: DeadlineNear both ways, and its response hook is never called (a
/// candidate calls it at the record's turn only).
#[tokio::test]
async fn a_record_not_started_calls_no_response_hook() {
    let end = both_ways(|together| async move {
        let rig = completed_m1_m3(together).await;
        let processor = slow_processor(&rig, together, 1);
        let report = rig
            .run(
                &processor,
                batch(vec![
                    message("m-1", "{}", 2, false),
                    // 800 ms left after it: within the 1 s margin.
                    message("m-2", "slow:29200", 1, false),
                    message("m-3", "{}", 2, false),
                ]),
            )
            .await;
        let hooked = rig.hooked.lock().unwrap().clone();
        (outcomes(&report), reported(&report), hooked)
    })
    .await;
    assert_eq!(
        end,
        (
            vec![Outcome::Replayed, Outcome::Executed, Outcome::DeadlineNear],
            vec!["m-3".to_string()],
            vec![ReplaySource::Store]
        )
    );
}

/// The pre-check's read hangs past the answer margin: the record's own call is stopped there
/// (DeadlineReached), and so is the replay phase, the records waiting for it answering the
/// same, with no second read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_read_ends_the_record_as_without_batch_replay() {
    use lambda_idempotency_test_support::faulty_store::Inject;
    both_ways(|together| async move {
        let rig = Rig::new();
        rig.deliver(together, vec![message("m-1", "{}", 1, false)])
            .await;
        rig.store
            .inject(Inject::GetManySlow(Duration::from_secs(20)));
        let ticking = Ticking::start(&rig.clock);
        let report = rig
            .deliver(together, vec![message("m-1", "{}", 2, false)])
            .await;
        drop(ticking);
        (outcomes(&report), error_types(&report), rig.calls())
    })
    .await;
}
