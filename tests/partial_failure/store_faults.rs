//! Store faults and lost answers at acquire and completion: retried, recognised, or released.

use lambda_idempotency_test_support as support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use lambda_idempotency::record::Status;
use lambda_idempotency::Outcome;
use support::faulty_store::Inject;
use support::{outcomes, reported};

use crate::{batch, config, message, stored, Rig, REMAINING};

#[tokio::test]
async fn a_completion_that_fails_once_is_retried_and_the_handler_runs_once() {
    let rig = Rig::new();
    rig.store.inject(Inject::CompleteFails);
    let first = rig.deliver(config(), batch([message("m-1", "{}")])).await;
    assert_eq!(outcomes(&first), [Outcome::Executed]);
    assert!(reported(&first).is_empty());
    assert_eq!(rig.store.calls.complete.load(Ordering::SeqCst), 2);
    let record = stored(&rig.store, "m-1").await.unwrap();
    assert_eq!(record.status, Status::Completed);
    rig.clock.advance(REMAINING + Duration::from_secs(1));
    let again = rig.deliver(config(), batch([message("m-1", "{}")])).await;
    assert_eq!(outcomes(&again), [Outcome::Replayed]);
    assert_eq!(rig.runs(), 1);
}

#[tokio::test]
async fn a_completion_whose_answer_was_lost_is_recognised_as_ours() {
    let rig = Rig::new();
    rig.store.inject(Inject::CompleteResent);
    let first = rig.deliver(config(), batch([message("m-1", "{}")])).await;
    assert_eq!(outcomes(&first), [Outcome::Executed]);
    assert!(reported(&first).is_empty());
    assert_eq!(rig.runs(), 1);
    assert_eq!(
        stored(&rig.store, "m-1").await.unwrap().status,
        Status::Completed
    );
}

#[tokio::test]
async fn an_acquire_whose_answer_was_lost_holds_our_lease() {
    let rig = Rig::new();
    rig.store.inject(Inject::AcquireResent);
    let first = rig.deliver(config(), batch([message("m-1", "{}")])).await;
    assert_eq!(
        outcomes(&first),
        [Outcome::Executed],
        "not locked by ourselves"
    );
    assert_eq!(rig.runs(), 1);
    let record = stored(&rig.store, "m-1").await.unwrap();
    assert_eq!(record.status, Status::Completed);
}

#[tokio::test]
async fn an_acquire_that_failed_after_it_was_applied_is_released() {
    let rig = Rig::new();
    rig.store.inject(Inject::AcquireFailsAfterApply);
    let first = rig.deliver(config(), batch([message("m-1", "{}")])).await;
    assert_eq!(outcomes(&first), [Outcome::StoreUnavailable]);
    assert_eq!(reported(&first), ["m-1"]);
    assert_eq!(rig.runs(), 0, "no handler without its lease");
    assert_eq!(rig.store.calls.release.load(Ordering::SeqCst), 1);
    assert!(
        stored(&rig.store, "m-1").await.is_none(),
        "no lease held by nobody"
    );
    // Redelivered at once (no waiting for the deadline): it runs.
    let again = rig.deliver(config(), batch([message("m-1", "{}")])).await;
    assert_eq!(outcomes(&again), [Outcome::Executed]);
    assert_eq!(rig.runs(), 1);
}
