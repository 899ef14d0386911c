//! Batches and redeliveries apply each event once, in the fewest DynamoDB calls; tampering fails.

use lambda_idempotency_test_support as support;

use lambda_idempotency::key::KeyExtractor;
use lambda_idempotency::{CommitStrategy, Error, Outcome};
use order_consumer::order_key;
use support::{load_event, outcomes};

use crate::{Ledger, MODES};

#[tokio::test]
async fn batch_and_redelivery_apply_each_event_once() {
    for mode in MODES {
        let Some(ledger) = Ledger::new().await else {
            return;
        };
        let first = ledger.deliver(mode, load_event("batch.json")).await;
        assert_eq!(outcomes(&first), [Outcome::Executed; 3], "{mode:?}");
        let again = ledger
            .deliver(mode, load_event("batch_redelivered.json"))
            .await;
        assert_eq!(outcomes(&again), [Outcome::Replayed; 3], "{mode:?}");
        let retry = ledger
            .deliver(mode, load_event("producer_retry.json"))
            .await;
        assert_eq!(outcomes(&retry), [Outcome::Replayed], "{mode:?}");
        assert_eq!(ledger.balance("acct-alice").await, 20, "{mode:?}");
        assert_eq!(ledger.balance("acct-bob").await, 40, "{mode:?}");
        // The redelivered batch (ApproximateReceiveCount 2) is answered by the pre-check in
        // both modes, without running the handler. The producer's retry is a first delivery:
        // optimistic mode computes it again and learns from the refused commit that it is a
        // duplicate; lease mode's refused acquire answers it before the handler.
        let runs = *ledger.handler_runs.lock().unwrap();
        match mode {
            CommitStrategy::Lease => assert_eq!(runs, 3),
            _ => assert_eq!(runs, 4),
        }
    }
}

#[tokio::test]
async fn dynamodb_calls_per_record_are_the_minimum_for_each_mode() {
    for (mode, fresh_calls) in [
        (CommitStrategy::Optimistic, vec![("TransactWriteItems", 3)]),
        (
            CommitStrategy::Lease,
            vec![("PutItem", 3), ("TransactWriteItems", 3)],
        ),
    ] {
        let Some(ledger) = Ledger::new().await else {
            return;
        };
        ledger.counter.reset();
        ledger.deliver(mode, load_event("batch.json")).await;
        let calls: Vec<(&str, usize)> = ledger.counter.all().into_iter().collect();
        assert_eq!(calls, fresh_calls, "{mode:?}: fresh records");
        // Duplicates SQS redelivered: one lookup for the batch (the pre-check), no write.
        ledger.counter.reset();
        ledger
            .deliver(mode, load_event("batch_redelivered.json"))
            .await;
        let calls: Vec<(&str, usize)> = ledger.counter.all().into_iter().collect();
        assert_eq!(
            calls,
            [("BatchGetItem", 1)],
            "{mode:?}: redelivered duplicates"
        );
        // A producer's retry (a first delivery): one refused call.
        ledger.counter.reset();
        ledger
            .deliver(mode, load_event("producer_retry.json"))
            .await;
        let duplicate_calls: usize = ledger.counter.all().values().sum();
        assert_eq!(duplicate_calls, 1, "{mode:?}: an unmarked duplicate");
    }
}

#[tokio::test]
async fn a_tampered_duplicate_is_rejected_and_never_applied() {
    for mode in MODES {
        let Some(ledger) = Ledger::new().await else {
            return;
        };
        ledger.deliver(mode, load_event("batch.json")).await;
        let report = ledger.deliver(mode, load_event("tampered.json")).await;
        assert_eq!(outcomes(&report), [Outcome::Rejected], "{mode:?}");
        assert!(matches!(
            report.records[0].error,
            Some(Error::PayloadMismatch { .. })
        ));
        assert_eq!(report.response.batch_item_failures.len(), 1);
        assert_eq!(ledger.balance("acct-bob").await, 40, "{mode:?}");
    }
}

#[tokio::test]
async fn the_order_key_prefers_the_attribute_then_the_event_id() {
    let key = order_key();
    let event = load_event("producer_retry.json");
    assert_eq!(key.key_material(&event.records[0]).unwrap(), b"evt-1002");
}
