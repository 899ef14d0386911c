//! A handler that fails, fails permanently, loses its lease or aborts its own transaction
//! applies nothing; the next delivery applies the credit once.

use std::sync::Arc;

use lambda_idempotency::record::Status;
use lambda_idempotency::{CommitStrategy, Outcome};
use lambda_idempotency_test_support::outcomes;
use tokio::sync::Notify;

use crate::{ids, FirstRun, Rig};

const MODES: [CommitStrategy; 2] = [CommitStrategy::Lease, CommitStrategy::Optimistic];

fn alice(balance: i64) -> Vec<(String, i64)> {
    vec![("acct-alice".to_string(), balance)]
}

/// The first run credits, then `first` goes wrong with `outcome`: nothing is applied and no
/// record holds the key; the redelivery runs the handler again and credits once.
async fn nothing_applied_then_once(first: FirstRun, outcome: Outcome) {
    for mode in MODES {
        let Some(rig) = Rig::new().await else {
            return;
        };
        let ready = Arc::new(Notify::new());
        let report = rig.process(mode, first, Arc::clone(&ready)).await;
        assert_eq!(outcomes(&report), [outcome], "{mode:?}");
        assert_eq!(report.response.batch_item_failures.len(), 1, "{mode:?}");
        assert_eq!(
            rig.balances().await,
            [],
            "{mode:?}: the credit was rolled back"
        );
        let id = &ids("batch.json")[0];
        assert_eq!(rig.record(id).await, None, "{mode:?}: the key is free");
        let again = rig.process(mode, first, ready).await;
        assert_eq!(outcomes(&again), [Outcome::Executed], "{mode:?}");
        assert_eq!(rig.runs(), 2, "{mode:?}");
        assert_eq!(rig.balances().await, alice(25), "{mode:?}");
    }
}

#[tokio::test]
async fn a_failed_handler_applies_nothing() {
    nothing_applied_then_once(FirstRun::CreditsThenFails, Outcome::Failed).await;
}

#[tokio::test]
async fn a_handler_that_aborts_its_transaction_applies_nothing() {
    nothing_applied_then_once(FirstRun::AbortsItsTransaction, Outcome::Failed).await;
}

/// A permanent failure is stored (FAILED) without the handler's writes, and replayed.
#[tokio::test]
async fn a_permanent_failure_is_stored_without_the_handlers_writes() {
    for mode in MODES {
        let Some(rig) = Rig::new().await else {
            return;
        };
        let ready = Arc::new(Notify::new());
        let first = FirstRun::CreditsThenFailsPermanently;
        let report = rig.process(mode, first, Arc::clone(&ready)).await;
        assert_eq!(outcomes(&report), [Outcome::FailedPermanently], "{mode:?}");
        assert!(report.response.batch_item_failures.is_empty(), "{mode:?}");
        assert_eq!(rig.balances().await, [], "{mode:?}");
        let record = rig.record(&ids("batch.json")[0]).await.expect("the record");
        assert_eq!(record.status, Status::Failed, "{mode:?}");
        let again = rig.process(mode, first, ready).await;
        assert_eq!(outcomes(&again), [Outcome::FailedPermanently], "{mode:?}");
        assert_eq!(rig.runs(), 1, "{mode:?}: replayed, not run again");
        assert_eq!(rig.balances().await, [], "{mode:?}");
    }
}

/// Lease mode: another owner takes the record over while the handler runs: the commit is
/// refused, the credit rolled back, and the record left to its new owner.
#[tokio::test]
async fn a_lost_lease_rolls_the_credit_back() {
    let Some(rig) = Rig::new().await else {
        return;
    };
    let first = FirstRun::CreditsThenLosesTheLease;
    let report = rig
        .process(CommitStrategy::Lease, first, Arc::new(Notify::new()))
        .await;
    assert_eq!(outcomes(&report), [Outcome::LeaseLost]);
    assert_eq!(report.response.batch_item_failures.len(), 1);
    assert_eq!(rig.balances().await, []);
    let record = rig.record(&ids("batch.json")[0]).await.expect("the record");
    assert_eq!(record.status, Status::InProgress);
    assert_eq!(
        record.owner.map(|o| o.as_str().to_string()).as_deref(),
        Some("thief")
    );
}
