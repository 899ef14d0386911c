//! Duplicates: the same key twice in a batch, after a failure, and with a tampered payload.

use lambda_idempotency_test_support as support;

use std::sync::Arc;

use lambda_idempotency::batch::Scheduling;
use lambda_idempotency::key::PayloadValidation;
use lambda_idempotency::{Error, Outcome};
use order_consumer::Order;
use support::{load_event, outcomes, reported};

use crate::{ids, Setup};

#[tokio::test]
async fn same_key_twice_in_one_batch_runs_the_handler_once() {
    for mode in [
        Scheduling::Concurrent { limit: 10 },
        Scheduling::Fifo {
            skip_failed_group_only: false,
        },
    ] {
        let mut setup = Setup::new();
        setup.mode = mode;
        let report = setup.run(load_event("same_key_in_batch.json")).await;
        assert_eq!(
            outcomes(&report),
            [Outcome::Executed, Outcome::Replayed, Outcome::Executed],
            "{mode:?}"
        );
        assert_eq!(setup.effects.count("evt-4001"), 1, "{mode:?}");
        assert_eq!(report.records[0].value, report.records[1].value);
        assert!(report.response.batch_item_failures.is_empty());
        // Redelivered, both copies replay: the first one's replay is shared with the second.
        let again = setup.run(load_event("same_key_in_batch.json")).await;
        assert_eq!(outcomes(&again), [Outcome::Replayed; 3], "{mode:?}");
        assert_eq!(setup.effects.count("evt-4001"), 1, "{mode:?}");
    }
}

#[tokio::test]
async fn same_key_after_a_handler_failure_is_not_run_again_in_the_batch() {
    let mut setup = Setup::new();
    setup.hook = Arc::new(|order: &Order| {
        if order.event_id == "evt-4001" {
            panic!("downstream refused evt-4001");
        }
    });
    let event = load_event("same_key_in_batch.json");
    let report = setup.run(event.clone()).await;
    assert_eq!(
        outcomes(&report),
        [Outcome::Failed, Outcome::Failed, Outcome::Executed]
    );
    assert!(matches!(report.records[0].error, Some(Error::Panic { .. })));
    assert!(matches!(
        report.records[1].error,
        Some(Error::SameKeyFailed { .. })
    ));
    assert_eq!(reported(&report), ids(&event, &[0, 1]));
}

#[tokio::test]
async fn tampered_duplicate_is_rejected_and_never_applied() {
    let mut setup = Setup::new();
    setup.config = setup
        .config
        .clone()
        .with_payload_validation(PayloadValidation::Body);
    setup.run(load_event("batch.json")).await;
    let mut tampered = load_event("batch.json");
    tampered.records.truncate(1);
    let record = &mut tampered.records[0];
    record.message_id = Some("f00dfeed-0000-4000-8000-000000000001".into());
    record.body = Some(r#"{"eventId":"evt-1001","account":"acct-alice","amount":2500}"#.into());
    let report = setup.run(tampered).await;
    assert_eq!(outcomes(&report), [Outcome::Rejected]);
    assert!(matches!(
        report.records[0].error,
        Some(Error::PayloadMismatch { .. })
    ));
    assert_eq!(reported(&report).len(), 1);
    assert_eq!(setup.effects.count("evt-1001"), 1);
}
