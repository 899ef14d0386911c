//! Faults at the commit: kills before and after, a lost response, a lost lease, conflicts.

use lambda_idempotency_test_support as support;

use std::sync::Arc;
use std::time::Duration;

use lambda_idempotency::clock::{epoch_ms, epoch_secs, Clock};
use lambda_idempotency::key::IdempotencyKey;
use lambda_idempotency::record::OwnerToken;
use lambda_idempotency::store::{Acquire, AcquireRequest, Store};
use lambda_idempotency::{Error, IdempotencyMode, Outcome};
use order_consumer::{Order, KEY_PREFIX};
use support::{invocation, outcomes};

use crate::{one_record, Fault, Hook, Ledger, LEASE_CAP, MODES, REMAINING};

#[tokio::test]
async fn a_kill_before_the_commit_applies_the_effect_once_after_redelivery() {
    for mode in MODES {
        let Some(ledger) = Ledger::new().await else {
            return;
        };
        ledger.inject(Fault::DieBeforeCommit);
        ledger
            .deliver_and_die(mode, one_record("batch.json", 0))
            .await;
        assert_eq!(ledger.balance("acct-alice").await, 0, "{mode:?}");
        // SQS redelivers after the visibility timeout; by then the dead lease has elapsed.
        ledger.clock.advance(REMAINING + Duration::from_secs(1));
        let report = ledger.deliver(mode, one_record("batch.json", 0)).await;
        assert_eq!(outcomes(&report), [Outcome::Executed], "{mode:?}");
        assert_eq!(ledger.balance("acct-alice").await, 25, "{mode:?}");
    }
}

#[tokio::test]
async fn a_kill_after_the_commit_replays_after_redelivery() {
    for mode in MODES {
        let Some(ledger) = Ledger::new().await else {
            return;
        };
        ledger.inject(Fault::DieAfterCommit);
        ledger
            .deliver_and_die(mode, one_record("batch.json", 0))
            .await;
        assert_eq!(ledger.balance("acct-alice").await, 25, "{mode:?}");
        ledger.clock.advance(REMAINING + Duration::from_secs(1));
        let report = ledger.deliver(mode, one_record("batch.json", 0)).await;
        assert_eq!(outcomes(&report), [Outcome::Replayed], "{mode:?}");
        assert_eq!(ledger.balance("acct-alice").await, 25, "{mode:?}");
        if mode == IdempotencyMode::Lease {
            assert_eq!(*ledger.handler_runs.lock().unwrap(), 1);
        }
    }
}

#[tokio::test]
async fn a_commit_whose_response_was_lost_is_recognised_not_applied_twice() {
    for mode in MODES {
        let Some(ledger) = Ledger::new().await else {
            return;
        };
        ledger.inject(Fault::LoseResponse);
        let report = ledger.deliver(mode, one_record("batch.json", 0)).await;
        assert_eq!(outcomes(&report), [Outcome::Executed], "{mode:?}");
        assert_eq!(ledger.balance("acct-alice").await, 25, "{mode:?}");
        let again = ledger.deliver(mode, one_record("batch.json", 0)).await;
        assert_eq!(outcomes(&again), [Outcome::Replayed], "{mode:?}");
        assert_eq!(ledger.balance("acct-alice").await, 25, "{mode:?}");
    }
}

#[tokio::test]
async fn a_lease_lost_to_another_invocation_applies_nothing() {
    let Some(ledger) = Ledger::new().await else {
        return;
    };
    let (store, clock) = (ledger.store.inner.clone(), ledger.clock.clone());
    let hook: Hook = Arc::new(move |order: &Order| {
        // The handler outlives its lease (not the invocation); another invocation takes the
        // key over.
        clock.advance(LEASE_CAP + Duration::from_secs(1));
        let now = clock.now();
        let request = AcquireRequest {
            key: IdempotencyKey::derive(KEY_PREFIX, order.event_id.as_bytes()),
            owner: OwnerToken::generate(),
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
        .container(IdempotencyMode::Lease, hook)
        .process(invocation(
            one_record("batch.json", 0),
            ledger.clock.now(),
            REMAINING,
        ))
        .await;
    assert_eq!(outcomes(&report), [Outcome::LeaseLost]);
    assert_eq!(report.response.batch_item_failures.len(), 1);
    assert_eq!(ledger.balance("acct-alice").await, 0, "nothing applied");
}

#[tokio::test]
async fn a_transaction_conflict_is_retried_then_reported_without_applying_anything() {
    for mode in MODES {
        let Some(ledger) = Ledger::new().await else {
            return;
        };
        // A passing conflict: retried at once with the same request token, applied once.
        ledger.inject(Fault::Conflicts(1));
        let report = ledger.deliver(mode, one_record("batch.json", 0)).await;
        assert_eq!(outcomes(&report), [Outcome::Executed], "{mode:?}");
        assert_eq!(ledger.balance("acct-alice").await, 25, "{mode:?}");
        // A lasting one: after the commit attempts (3), reported for retry, nothing applied,
        // and nothing left locked: the next delivery commits.
        ledger.inject(Fault::Conflicts(3));
        let report = ledger.deliver(mode, one_record("batch.json", 1)).await;
        assert_eq!(outcomes(&report), [Outcome::Locked], "{mode:?}");
        assert!(matches!(
            report.records[0].error,
            Some(Error::Conflict { .. })
        ));
        assert_eq!(ledger.balance("acct-bob").await, 0, "{mode:?}");
        let report = ledger.deliver(mode, one_record("batch.json", 1)).await;
        assert_eq!(outcomes(&report), [Outcome::Executed], "{mode:?}");
        assert_eq!(ledger.balance("acct-bob").await, 40, "{mode:?}");
    }
}
