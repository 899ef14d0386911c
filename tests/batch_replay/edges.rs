//! Batch replay at its edges: the local cache, the deadline, a hook or a clock with a bug,
//! and a service that is either of two.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::sqs::SqsMessage;
use lambda_idempotency::batch::{BatchProcessor, Scheduling};
use lambda_idempotency::clock::{Clock, ManualClock};
use lambda_idempotency::hooks::ReplaySource;
use lambda_idempotency::{Config, IdempotencyLayer, Outcome};
use lambda_idempotency_test_support::{outcomes, reported};

use super::{batch, message, values, Rig};

#[tokio::test]
async fn the_local_cache_answers_before_the_store_is_read() {
    for together in [false, true] {
        let rig = Rig::new();
        // One process for both deliveries: the first fills its cache.
        let processor = rig.processor(together, 100, Scheduling::default());
        let ids = ["m-1", "m-2"];
        let report = rig
            .run(
                &processor,
                batch(ids.map(|id| message(id, "{}", 1, false)).to_vec()),
            )
            .await;
        assert_eq!(outcomes(&report), [Outcome::Executed; 2]);
        let report = rig
            .run(
                &processor,
                batch(ids.map(|id| message(id, "{}", 2, false)).to_vec()),
            )
            .await;
        assert_eq!(outcomes(&report), [Outcome::Replayed; 2]);
        assert_eq!(values(&report), [Some(2); 2]);
        assert_eq!(
            (rig.runs(), rig.calls()),
            (2, (0, 2)),
            "no lookup: together: {together}"
        );
        assert_eq!(*rig.hooked.lock().unwrap(), [ReplaySource::LocalCache; 2]);
        assert_eq!(rig.logs.processed("m-1"), [true, !together]);
    }
}

#[tokio::test]
async fn a_batch_near_its_deadline_reads_and_replays_nothing() {
    for together in [false, true] {
        let rig = Rig::new();
        let processor = rig.processor(together, 0, Scheduling::default());
        rig.run(&processor, batch(vec![message("m-1", "{}", 1, false)]))
            .await;
        let event = batch(vec![message("m-1", "{}", 2, false)]);
        let report = rig
            .run_with(&processor, event, Duration::from_millis(900))
            .await;
        assert_eq!(outcomes(&report), [Outcome::DeadlineNear]);
        assert_eq!(reported(&report), ["m-1"]);
        assert_eq!(
            (rig.runs(), rig.calls()),
            (1, (0, 1)),
            "together: {together}"
        );
    }
}

#[tokio::test]
async fn a_panicking_response_hook_replays_the_stored_result_as_it_is() {
    for together in [false, true] {
        let rig = Rig::new();
        let processor = rig.processor(together, 0, Scheduling::default());
        // The result of m-2 is 13: the hook panics on it.
        let bodies = [("m-1", "{}"), ("m-2", "{\"panic\":111}"), ("m-3", "{}")];
        let first = bodies
            .map(|(id, body)| message(id, body, 1, false))
            .to_vec();
        rig.run(&processor, batch(first)).await;
        let again = bodies
            .map(|(id, body)| message(id, body, 2, false))
            .to_vec();
        let report = rig.run(&processor, batch(again)).await;
        assert_eq!(
            outcomes(&report),
            [Outcome::Replayed; 3],
            "together: {together}"
        );
        assert_eq!(values(&report), [Some(2), Some(13), Some(2)]);
        assert!(reported(&report).is_empty());
        assert_eq!(
            (rig.runs(), rig.calls()),
            (3, (1, 3)),
            "together: {together}"
        );
        assert_eq!(rig.logs.processed("m-2"), [true, !together]);
    }
}

/// A clock with a bug: it panics when `broken` is set.
#[derive(Clone)]
struct BrokenClock {
    inner: ManualClock,
    broken: Arc<std::sync::atomic::AtomicBool>,
}

impl Clock for BrokenClock {
    fn now(&self) -> std::time::SystemTime {
        assert!(!self.broken.load(Ordering::SeqCst), "the clock's bug");
        self.inner.now()
    }
}

#[tokio::test]
async fn a_replay_that_panics_fails_each_record_alone() {
    for together in [false, true] {
        let rig = Rig::new();
        let clock = BrokenClock {
            inner: rig.clock.clone(),
            broken: Arc::default(),
        };
        // The protocol's clock breaks; the processor's does not.
        let layer = IdempotencyLayer::new(rig.store.clone())
            .with_clock(clock.clone())
            .with_config(Config::new().with_key_prefix("replay"));
        let handler = layer.handler(|message: SqsMessage| {
            std::future::ready(Ok::<_, std::io::Error>(
                message.body.unwrap_or_default().len(),
            ))
        });
        let processor = rig.over(handler, together);
        let ids = ["m-1", "m-2"];
        let deliver = |count| batch(ids.map(|id| message(id, "{}", count, false)).to_vec());
        let report = rig.run(&processor, deliver(1)).await;
        assert_eq!(outcomes(&report), [Outcome::Executed; 2]);
        clock.broken.store(true, Ordering::SeqCst);
        let report = rig.run(&processor, deliver(2)).await;
        assert_eq!(
            outcomes(&report),
            [Outcome::Failed; 2],
            "together: {together}"
        );
        assert_eq!(reported(&report), ids);
        assert!(report.records.iter().all(|r| r
            .error
            .as_ref()
            .is_some_and(|e| e.error_type() == "Idempotency.HandlerPanic")));
        assert_eq!(rig.calls(), (0, 2), "together: {together}");
    }
}

#[tokio::test]
async fn either_of_two_idempotent_services_replays_together() {
    let rig = Rig::new();
    rig.deliver(true, vec![message("m-1", "{}", 1, false)])
        .await;
    let layer = rig.layer();
    let runs = rig.runs.clone();
    let handler = layer.handler(move |_message: SqsMessage| {
        runs.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Ok::<usize, std::io::Error>(0))
    });
    // The right of two services of one type, as order-consumer picks its handler.
    fn right<A>(a: A) -> tower::util::Either<A, A> {
        tower::util::Either::Right(a)
    }
    let processor = BatchProcessor::new(right(handler))
        .with_clock(rig.clock.clone())
        .with_batch_replay(true);
    let report = rig
        .run(&processor, batch(vec![message("m-1", "{}", 2, false)]))
        .await;
    assert_eq!(outcomes(&report), [Outcome::Replayed]);
    assert_eq!(values(&report), [Some(2)]);
    assert_eq!((rig.runs(), rig.calls()), (1, (1, 1)));
    assert_eq!(rig.logs.processed("m-1"), [true, false]);
}

/// A closure's key is a function of the event, as every key is: its records replay
/// together. (Before the batch scope travelled in the request, a closure's key was taken to
/// depend on more than the event, and each record went through its own call.)
#[tokio::test]
async fn a_closure_key_replays_together_too() {
    let rig = Rig::new();
    rig.deliver(true, vec![message("m-1", "{}", 1, false)])
        .await;
    let layer = IdempotencyLayer::new(rig.store.clone())
        .with_clock(rig.clock.clone())
        .with_key(|m: &SqsMessage| {
            m.message_id
                .clone()
                .ok_or(lambda_idempotency::key::KeyError::MissingMessageId)
        })
        .with_config(Config::new().with_key_prefix("replay"));
    let handler =
        layer.handler(|_m: SqsMessage| std::future::ready(Ok::<usize, std::io::Error>(0)));
    let processor = BatchProcessor::new(handler)
        .with_clock(rig.clock.clone())
        .with_batch_replay(true);
    let report = rig
        .run(&processor, batch(vec![message("m-1", "{}", 2, false)]))
        .await;
    assert_eq!(outcomes(&report), [Outcome::Replayed]);
    assert_eq!(values(&report), [Some(2)]);
    assert_eq!((rig.runs(), rig.calls()), (1, (1, 1)));
    assert_eq!(
        rig.logs.processed("m-1"),
        [true, false],
        "replayed together"
    );
}
