//! Faults at the commit: kills before and after, a lost response (resent with the same
//! request token or another), a lost lease, conflicts. Checked per delivery: the handler's
//! runs, the commits attempted, each outcome, `batchItemFailures`, the stored record (status
//! and lease; its owner where a delivery takes it over or must leave it) and the ledger.

use lambda_idempotency_test_support as support;

use std::sync::Arc;
use std::time::Duration;

use lambda_idempotency::batch::BatchReport;
use lambda_idempotency::clock::{epoch_ms, epoch_secs, Clock};
use lambda_idempotency::key::IdempotencyKey;
use lambda_idempotency::record::{OwnerToken, Record, Status};
use lambda_idempotency::store::{Acquire, AcquireRequest, Store};
use lambda_idempotency::{CommitStrategy, Error, Outcome};
use order_consumer::{Order, KEY_PREFIX};
use support::faulty_store::Inject;
use support::{invocation, outcomes, reported};

use crate::{one_record, Applied, Hook, Ledger, LEASE_CAP, MODES, REMAINING};

/// Alice's order of 25, the first record of `events/batch.json`.
const ALICE: &str = "evt-1001";
/// Its message.
const ALICE_MESSAGE: &str = "0b1f5a52-7d3e-4c1a-9f60-2a51c1d0e001";

/// The one record was answered `outcome` and acknowledged, and the handler's runs and the
/// commits attempted, over every delivery so far, are `(runs, commits)`.
#[track_caller]
fn acknowledged(
    ledger: &Ledger,
    mode: CommitStrategy,
    report: &BatchReport<Applied>,
    outcome: Outcome,
    runs_and_commits: (usize, usize),
) {
    assert_eq!(outcomes(report), [outcome], "{mode:?}");
    assert!(reported(report).is_empty(), "{mode:?}");
    let counted = (ledger.runs(), ledger.commits());
    assert_eq!(counted, runs_and_commits, "{mode:?}: runs and commits");
}

/// The record is completed, holds no lease, and was written by `owner` if given.
#[track_caller]
fn assert_completed(record: &Record, owner: Option<&OwnerToken>, mode: CommitStrategy) {
    assert_eq!(record.status, Status::Completed, "{mode:?}");
    assert_eq!(record.lease_expiration_ms, None, "{mode:?}: no lease");
    if let Some(owner) = owner {
        assert_eq!(record.owner.as_ref(), Some(owner), "{mode:?}");
    }
}

#[tokio::test]
async fn a_kill_before_the_commit_applies_the_effect_once_after_redelivery() {
    for mode in MODES {
        let Some(ledger) = Ledger::new().await else {
            return;
        };
        ledger.store.inject(Inject::CommitNeverSent);
        ledger
            .deliver_and_die(mode, one_record("batch.json", 0))
            .await;
        assert_eq!((ledger.runs(), ledger.commits()), (1, 1), "{mode:?}");
        assert_eq!(ledger.balance("acct-alice").await, 0, "{mode:?}");
        // Under a lease the dead invocation's lease stays until it elapses; optimistic mode
        // writes nothing before its commit.
        let dead_owner = match (mode, ledger.record(ALICE).await) {
            (CommitStrategy::Lease, Some(held)) => {
                assert_eq!(held.status, Status::InProgress);
                assert!(held.lease_expiration_ms.is_some(), "a lease");
                held.owner
            }
            (CommitStrategy::Optimistic, None) => None,
            (_, found) => panic!("{mode:?}: {found:?}"),
        };
        // SQS redelivers after the visibility timeout; by then the dead lease has elapsed.
        ledger.clock.advance(REMAINING + Duration::from_secs(1));
        let report = ledger
            .deliver(mode, one_record("batch_redelivered.json", 0))
            .await;
        acknowledged(&ledger, mode, &report, Outcome::Executed, (2, 2));
        let record = ledger.record(ALICE).await.expect("a record");
        assert_completed(&record, None, mode);
        assert!(record.owner.is_some(), "{mode:?}");
        assert_ne!(record.owner, dead_owner, "{mode:?}: the redelivery's");
        assert_eq!(ledger.balance("acct-alice").await, 25, "{mode:?}");
    }
}

#[tokio::test]
async fn a_kill_after_the_commit_replays_after_redelivery() {
    for mode in MODES {
        let Some(ledger) = Ledger::new().await else {
            return;
        };
        ledger.store.inject(Inject::CommitAppliedThenDies);
        ledger
            .deliver_and_die(mode, one_record("batch.json", 0))
            .await;
        assert_eq!((ledger.runs(), ledger.commits()), (1, 1), "{mode:?}");
        let leases = match mode {
            CommitStrategy::Lease => 1,
            _ => 0,
        };
        assert_eq!(ledger.acquires(), leases, "{mode:?}");
        assert_eq!(ledger.balance("acct-alice").await, 25, "{mode:?}");
        let committed = ledger.record(ALICE).await.expect("a record");
        assert_completed(&committed, None, mode);
        // SQS redelivers (ApproximateReceiveCount 2): the pre-check finds the record
        // completed and replays it, without running the handler or writing.
        ledger.clock.advance(REMAINING + Duration::from_secs(1));
        let report = ledger
            .deliver(mode, one_record("batch_redelivered.json", 0))
            .await;
        acknowledged(&ledger, mode, &report, Outcome::Replayed, (1, 1));
        assert_eq!(ledger.acquires(), leases, "{mode:?}: no lease asked for");
        assert_completed(
            &ledger.record(ALICE).await.expect("a record"),
            committed.owner.as_ref(),
            mode,
        );
        assert_eq!(ledger.balance("acct-alice").await, 25, "{mode:?}");
    }
}

#[tokio::test]
async fn a_commit_whose_response_was_lost_is_recognised_not_applied_twice() {
    for mode in MODES {
        let Some(ledger) = Ledger::new().await else {
            return;
        };
        ledger.store.inject(Inject::CommitAnswerLost);
        let report = ledger.deliver(mode, one_record("batch.json", 0)).await;
        // The commit is sent again after the lost answer and recognised as applied.
        acknowledged(&ledger, mode, &report, Outcome::Executed, (1, 2));
        assert_eq!(ledger.balance("acct-alice").await, 25, "{mode:?}");
        let committed = ledger.record(ALICE).await.expect("a record");
        assert_completed(&committed, None, mode);
        // The same message again, unmarked (a producer's retry): lease mode's refused
        // acquire answers it; optimistic mode computes it again and learns from its refused
        // commit that it is a duplicate.
        let again = ledger.deliver(mode, one_record("batch.json", 0)).await;
        let runs_and_commits = match mode {
            CommitStrategy::Lease => (1, 2),
            _ => (2, 3),
        };
        acknowledged(&ledger, mode, &again, Outcome::Replayed, runs_and_commits);
        assert_completed(
            &ledger.record(ALICE).await.expect("a record"),
            committed.owner.as_ref(),
            mode,
        );
        assert_eq!(ledger.balance("acct-alice").await, 25, "{mode:?}");
    }
}

#[tokio::test]
async fn a_commit_resent_with_a_fresh_token_is_recognised_by_the_record_it_wrote() {
    for mode in MODES {
        let Some(ledger) = Ledger::new().await else {
            return;
        };
        // The resend's token is not the first send's (as once DynamoDB forgets a token):
        // refused by its condition, it meets the record the first send wrote, which shows
        // it ours.
        ledger.store.inject(Inject::CommitAnswerLost);
        ledger.store.inject(Inject::CommitAtAFreshTime);
        let report = ledger.deliver(mode, one_record("batch.json", 0)).await;
        acknowledged(&ledger, mode, &report, Outcome::Executed, (1, 2));
        assert!(
            ledger.store.pending().is_empty(),
            "{mode:?}: both faults met"
        );
        assert_completed(&ledger.record(ALICE).await.expect("a record"), None, mode);
        assert_eq!(
            ledger.balance("acct-alice").await,
            25,
            "{mode:?}: applied once"
        );
    }
}

#[tokio::test]
async fn a_lease_lost_to_another_invocation_applies_nothing() {
    let Some(ledger) = Ledger::new().await else {
        return;
    };
    let (store, clock) = (ledger.store.inner.clone(), ledger.clock.clone());
    let taker = OwnerToken::generate();
    let other = taker.clone();
    let hook: Hook = Arc::new(move |order: &Order| {
        // The handler outlives its lease (not the invocation); another invocation takes the
        // key over.
        clock.advance(LEASE_CAP + Duration::from_secs(1));
        let now = clock.now();
        let request = AcquireRequest {
            key: IdempotencyKey::derive(KEY_PREFIX, order.event_id.as_bytes()),
            owner: other.clone(),
            now,
            lease_expiration_ms: epoch_ms(now + REMAINING),
            expiration_secs: epoch_secs(now + Duration::from_secs(3600)),
            validation: None,
        };
        let store = store.clone();
        let taken = std::thread::spawn(move || {
            tokio::runtime::Runtime::new()
                .unwrap()
                .block_on(store.acquire(&request))
        })
        .join()
        .unwrap();
        assert_eq!(taken.unwrap(), Acquire::Acquired);
        Ok(())
    });
    let report = ledger
        .container(CommitStrategy::Lease, hook)
        .process(invocation(
            one_record("batch.json", 0),
            ledger.clock.now(),
            REMAINING,
        ))
        .await;
    assert_eq!(outcomes(&report), [Outcome::LeaseLost]);
    assert_eq!(reported(&report), [ALICE_MESSAGE]);
    // The commit was sent once and refused by its owner fence.
    assert_eq!((ledger.runs(), ledger.commits()), (1, 1));
    let held = ledger.record(ALICE).await.expect("a record");
    assert_eq!(held.status, Status::InProgress);
    assert_eq!(
        held.owner,
        Some(taker),
        "the other invocation's lease, untouched"
    );
    assert!(held.lease_expiration_ms.is_some());
    assert_eq!(ledger.balance("acct-alice").await, 0, "nothing applied");
}

#[tokio::test]
async fn a_transaction_conflict_is_retried_then_reported_without_applying_anything() {
    for mode in MODES {
        let Some(ledger) = Ledger::new().await else {
            return;
        };
        // A passing conflict: retried at once with the same request token, applied once.
        ledger.store.inject(Inject::CommitConflicts);
        let report = ledger.deliver(mode, one_record("batch.json", 0)).await;
        acknowledged(&ledger, mode, &report, Outcome::Executed, (1, 2));
        assert_completed(&ledger.record(ALICE).await.expect("a record"), None, mode);
        assert_eq!(ledger.balance("acct-alice").await, 25, "{mode:?}");
        // A lasting one: after the commit attempts (3), reported for retry, nothing applied,
        // and nothing left locked: the next delivery commits.
        for _ in 0..3 {
            ledger.store.inject(Inject::CommitConflicts);
        }
        let report = ledger.deliver(mode, one_record("batch.json", 1)).await;
        assert_eq!(outcomes(&report), [Outcome::Locked], "{mode:?}");
        assert!(matches!(
            report.records[0].error,
            Some(Error::Conflict { .. })
        ));
        assert_eq!(
            reported(&report),
            ["0b1f5a52-7d3e-4c1a-9f60-2a51c1d0e002"],
            "{mode:?}"
        );
        assert_eq!((ledger.runs(), ledger.commits()), (2, 5), "{mode:?}");
        assert!(
            ledger.store.pending().is_empty(),
            "{mode:?}: every conflict met"
        );
        assert_eq!(
            ledger.record("evt-1002").await,
            None,
            "{mode:?}: nothing held"
        );
        assert_eq!(ledger.balance("acct-bob").await, 0, "{mode:?}");
        let report = ledger.deliver(mode, one_record("batch.json", 1)).await;
        acknowledged(&ledger, mode, &report, Outcome::Executed, (3, 6));
        assert_completed(
            &ledger.record("evt-1002").await.expect("a record"),
            None,
            mode,
        );
        assert_eq!(ledger.balance("acct-bob").await, 40, "{mode:?}");
    }
}
