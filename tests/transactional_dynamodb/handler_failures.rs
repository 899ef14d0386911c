//! Commits failing by the handler's doing: a failed condition, over the limits, permanent errors.

use lambda_idempotency_test_support as support;

use std::sync::Arc;

use aws_lambda_events::sqs::SqsMessage;
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::clock::Clock;
use lambda_idempotency::key::IdempotencyKey;
use lambda_idempotency::store::{Attr, Store, StoreError, Write};
use lambda_idempotency::{
    CommitStrategy, Completion, Config, Error, IdempotencyLayer, Outcome, Permanent,
};
use order_consumer::Order;
use support::{invocation, load_event, outcomes};

use crate::{one_record, Hook, Ledger, MODES, REMAINING};

#[tokio::test]
async fn a_failed_business_condition_applies_nothing_and_is_not_retried_blindly() {
    for mode in MODES {
        let Some(ledger) = Ledger::new().await else {
            return;
        };
        let layer = IdempotencyLayer::new(ledger.store.clone())
            .with_clock(ledger.clock.clone())
            .with_config(Config::new());
        let table = ledger.ledger_table.clone();
        let processor = BatchProcessor::new(layer.clone().with_writes().with_commit(mode).handler(
            move |_m: SqsMessage| {
                let table = table.clone();
                async move {
                    // Debit an account only if it exists: here it does not.
                    let debit =
                        Write::update(table, [("account", Attr::s("acct-ghost"))], "ADD #b :a")
                            .condition("attribute_exists(account)")
                            .name("#b", "balance")
                            .value(":a", Attr::n(-10));
                    Ok::<_, std::io::Error>(Completion::new(()).with_write(debit))
                }
            },
        ))
        .with_clock(ledger.clock.clone());
        let report = processor
            .process(invocation(
                one_record("batch.json", 0),
                ledger.clock.now(),
                REMAINING,
            ))
            .await;
        assert_eq!(outcomes(&report), [Outcome::Rejected], "{mode:?}");
        assert!(
            matches!(
                report.records[0].error,
                Some(Error::ConditionFailed { write_index: 0, .. })
            ),
            "{mode:?}: {:?}",
            report.records[0].error
        );
        assert_eq!(ledger.balance("acct-ghost").await, 0);
        // No record was left behind: the lease (lease mode) was released.
        let key = IdempotencyKey::derive(
            lambda_idempotency::idempotent::FALLBACK_KEY_PREFIX,
            b"0b1f5a52-7d3e-4c1a-9f60-2a51c1d0e001",
        );
        assert_eq!(
            ledger.store.inner.get(&key).await.unwrap(),
            None,
            "{mode:?}"
        );
    }
}

#[tokio::test]
async fn transactions_over_dynamodb_limits_fail_with_a_clear_error() {
    let Some(ledger) = Ledger::new().await else {
        return;
    };
    let layer = IdempotencyLayer::new(ledger.store.clone()).with_clock(ledger.clock.clone());
    let table = ledger.ledger_table.clone();
    let processor =
        BatchProcessor::new(layer.clone().with_writes().handler(move |_m: SqsMessage| {
            let table = table.clone();
            async move {
                // 100 writes plus the record: one over the limit.
                let writes = (0..100)
                    .map(|i| Write::put(table.clone(), [("account", Attr::s(format!("a{i}")))]));
                Ok::<_, std::io::Error>(writes.fold(Completion::new(()), Completion::with_write))
            }
        }))
        .with_clock(ledger.clock.clone());
    let report = processor
        .process(invocation(
            one_record("batch.json", 0),
            ledger.clock.now(),
            REMAINING,
        ))
        .await;
    // The handler's fault, not an outage: rejected, not retried.
    assert_eq!(outcomes(&report), [Outcome::Rejected]);
    let error = report.records[0].error.as_ref().unwrap();
    assert_eq!(error.error_type(), "Idempotency.TransactionTooLarge");
    assert!(
        matches!(
            error,
            Error::Store(StoreError::TransactionTooLarge {
                items: 101,
                item_limit: 100,
                ..
            })
        ),
        "{error:?}"
    );
    assert_eq!(ledger.balance("a0").await, 0);
}

#[tokio::test]
async fn a_permanent_failure_is_stored_acknowledged_and_replayed() {
    for mode in MODES {
        let Some(ledger) = Ledger::new().await else {
            return;
        };
        let hook: Hook = Arc::new(|order: &Order| {
            if order.amount < 0 {
                return Err(Permanent::new(format!(
                    "refunds are not allowed: {}",
                    order.amount
                )));
            }
            Ok(())
        });
        let event = load_event("batch.json");
        let report = ledger
            .container(mode, hook.clone())
            .process(invocation(event.clone(), ledger.clock.now(), REMAINING))
            .await;
        assert_eq!(
            outcomes(&report),
            [
                Outcome::Executed,
                Outcome::Executed,
                Outcome::FailedPermanently
            ],
            "{mode:?}"
        );
        assert!(
            report.response.batch_item_failures.is_empty(),
            "acknowledged"
        );
        let runs = *ledger.handler_runs.lock().unwrap();
        let again = ledger
            .container(mode, hook)
            .process(invocation(event, ledger.clock.now(), REMAINING))
            .await;
        assert_eq!(outcomes(&again)[2], Outcome::FailedPermanently, "{mode:?}");
        match &again.records[2].error {
            Some(Error::Permanent { message, replayed }) => {
                // The stored text, not the message (which may quote the input).
                assert_eq!(
                    message,
                    lambda_idempotency::idempotent::UNSTORED_FAILURE_MESSAGE
                );
                assert!(*replayed);
            }
            other => panic!("{mode:?}: {other:?}"),
        }
        if mode == CommitStrategy::Lease {
            assert_eq!(*ledger.handler_runs.lock().unwrap(), runs, "not run again");
        }
        assert_eq!(ledger.balance("acct-alice").await, 25, "{mode:?}");
    }
}
