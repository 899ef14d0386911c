//! Heartbeats: a lease lost or left unconfirmed cancels the handler; slow ones do not stall it.

use lambda_idempotency_test_support as support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lambda_events::sqs::SqsMessage;
use lambda_idempotency::batch::{BatchProcessor, BatchReport};
use lambda_idempotency::clock::Clock;
use lambda_idempotency::record::Status;
use lambda_idempotency::store::InMemoryStore;
use lambda_idempotency::{IdempotencyLayer, Outcome};
use support::faulty_store::{FaultyStore, Inject};
use support::{invocation, outcomes, reported};

use crate::{batch, config, message, stored, Rig, REMAINING};

#[tokio::test]
async fn a_heartbeat_that_finds_the_lease_lost_cancels_the_handler() {
    let rig = Rig::new();
    rig.store.inject(Inject::ExtendLeaseLost);
    let finished = Arc::new(AtomicBool::new(false));
    let layer = IdempotencyLayer::new(rig.store.clone())
        .with_clock(rig.clock.clone())
        .with_config(config().with_heartbeat(Duration::from_secs(3), Duration::from_millis(20)));
    let done = finished.clone();
    let processor = BatchProcessor::new(layer.handler(move |_m: SqsMessage| {
        let done = done.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            done.store(true, Ordering::SeqCst);
            Ok::<_, std::io::Error>(())
        }
    }))
    .with_clock(rig.clock.clone());
    let report = processor
        .process(invocation(
            batch([message("m-1", "{}")]),
            rig.clock.now(),
            REMAINING,
        ))
        .await;
    assert_eq!(outcomes(&report), [Outcome::LeaseLost]);
    assert_eq!(reported(&report), ["m-1"]);
    assert!(
        !finished.load(Ordering::SeqCst),
        "the handler ran on without its lease"
    );
    assert_eq!(rig.store.calls.complete.load(Ordering::SeqCst), 0);
    // Cancelled at once: the record is not read back while the handler still runs (only a
    // refusal after the final write was sent can mean that write landed).
    assert_eq!(rig.store.calls.get.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_slow_heartbeat_does_not_hold_the_handler_back() {
    let rig = Rig::new();
    rig.store.inject(Inject::ExtendSlow(Duration::from_secs(2)));
    let layer = IdempotencyLayer::new(rig.store.clone())
        .with_clock(rig.clock.clone())
        .with_config(config().with_heartbeat(Duration::from_secs(3), Duration::from_millis(50)));
    let processor = BatchProcessor::new(layer.handler(|_m: SqsMessage| async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        Ok::<_, std::io::Error>(())
    }))
    .with_clock(rig.clock.clone());
    let started = Instant::now();
    let report = processor
        .process(invocation(
            batch([message("m-1", "{}")]),
            rig.clock.now(),
            REMAINING,
        ))
        .await;
    let took = started.elapsed();
    assert_eq!(outcomes(&report), [Outcome::Executed]);
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert!(rig.store.calls.extend.load(Ordering::SeqCst) >= 1);
}

#[tokio::test]
async fn a_heartbeat_that_cannot_confirm_the_lease_before_it_ends_cancels_the_handler() {
    // Real time here: the lease lapses by the wall clock while the extension hangs.
    let store = FaultyStore::new(InMemoryStore::new());
    store.inject(Inject::ExtendSlow(Duration::from_secs(5)));
    let finished = Arc::new(AtomicBool::new(false));
    let layer = IdempotencyLayer::new(store.clone()).with_config(
        config().with_heartbeat(Duration::from_millis(300), Duration::from_millis(50)),
    );
    let done = finished.clone();
    let processor = BatchProcessor::new(layer.handler(move |_m: SqsMessage| {
        let done = done.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            done.store(true, Ordering::SeqCst);
            Ok::<_, std::io::Error>(())
        }
    }));
    let started = Instant::now();
    let report = processor
        .process(invocation(
            batch([message("m-1", "{}")]),
            std::time::SystemTime::now(),
            REMAINING,
        ))
        .await;
    assert_eq!(outcomes(&report), [Outcome::LeaseLost]);
    assert!(
        !finished.load(Ordering::SeqCst),
        "the handler ran on unleased"
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(store.calls.complete.load(Ordering::SeqCst), 0);
}

/// Delivers `m-1` once, in real time, to a handler over `store` with a heartbeat of `lease`
/// every `every`, that counts its runs in `runs` and returns "done".
async fn deliver_with_heartbeat(
    store: &FaultyStore<InMemoryStore>,
    (lease, every): (Duration, Duration),
    runs: &Arc<AtomicUsize>,
) -> BatchReport<String> {
    let layer =
        IdempotencyLayer::new(store.clone()).with_config(config().with_heartbeat(lease, every));
    let counted = runs.clone();
    let processor = BatchProcessor::new(layer.handler(move |_m: SqsMessage| {
        counted.fetch_add(1, Ordering::SeqCst);
        async { Ok::<_, std::io::Error>(String::from("done")) }
    }));
    processor
        .process(invocation(
            batch([message("m-1", "{}")]),
            std::time::SystemTime::now(),
            REMAINING,
        ))
        .await
}

#[tokio::test]
async fn a_heartbeat_refused_because_our_result_is_stored_lets_the_record_finish() {
    // The completion lands, its answer is slow, and meanwhile an extension is refused: the
    // record is completed (by us), not taken over. Real time: the heartbeat fires while the
    // answer is on its way.
    let store = FaultyStore::new(InMemoryStore::new());
    store.inject(Inject::CompleteAnswerSlow(Duration::from_millis(300)));
    let runs = Arc::new(AtomicUsize::new(0));
    let heartbeat = (Duration::from_secs(3), Duration::from_millis(20));
    let report = deliver_with_heartbeat(&store, heartbeat, &runs).await;
    assert!(
        store.calls.extend.load(Ordering::SeqCst) >= 1,
        "no extension was sent while the answer was slow"
    );
    assert_eq!(outcomes(&report), [Outcome::Executed]);
    assert!(reported(&report).is_empty());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let record = stored(&store, "m-1").await.expect("stored");
    assert_eq!(record.status, Status::Completed);
    assert!(record.owner.is_some());
    assert_eq!(store.calls.release.load(Ordering::SeqCst), 0);

    let again = deliver_with_heartbeat(&store, heartbeat, &runs).await;
    assert_eq!(outcomes(&again), [Outcome::Replayed]);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_stored_result_whose_answer_never_comes_is_lease_lost_when_the_lease_ends() {
    // As above, but the answer takes longer than the lease: the heartbeat waits for it only
    // until the lease it held would have ended (not until the invocation's deadline).
    let store = FaultyStore::new(InMemoryStore::new());
    store.inject(Inject::CompleteAnswerSlow(Duration::from_secs(10)));
    let runs = Arc::new(AtomicUsize::new(0));
    let heartbeat = (Duration::from_millis(400), Duration::from_millis(50));
    let started = Instant::now();
    let report = deliver_with_heartbeat(&store, heartbeat, &runs).await;
    let took = started.elapsed();
    assert_eq!(outcomes(&report), [Outcome::LeaseLost]);
    assert_eq!(reported(&report), ["m-1"]);
    assert!(took < Duration::from_secs(3), "took {took:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // The result was stored all the same: the redelivery replays it.
    let record = stored(&store, "m-1").await.expect("stored");
    assert_eq!(record.status, Status::Completed);
    let again = deliver_with_heartbeat(&store, heartbeat, &runs).await;
    assert_eq!(outcomes(&again), [Outcome::Replayed]);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
