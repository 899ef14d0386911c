//! A record that fails (poison body, handler error, panic) fails alone and releases its lease.

use lambda_idempotency_test_support as support;

use std::sync::Arc;

use aws_lambda_events::sqs::SqsMessage;
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::clock::Clock;
use lambda_idempotency::record::Status;
use lambda_idempotency::{Error, IdempotencyLayer, Outcome};
use order_consumer::Order;
use support::{invocation, load_event, outcomes, reported};

use crate::{ids, Setup, REMAINING};

#[tokio::test]
async fn poison_record_fails_alone() {
    let setup = Setup::new();
    let event = load_event("poison.json");
    let report = setup.run(event.clone()).await;
    assert_eq!(
        outcomes(&report),
        [Outcome::Executed, Outcome::Rejected, Outcome::Executed]
    );
    // Its key could not be derived (the body is not JSON): a typed error, not a skip.
    assert!(matches!(report.records[1].error, Some(Error::Key(_))));
    assert_eq!(reported(&report), ids(&event, &[1]));
    assert_eq!(setup.effects.total(), 2);
}

#[tokio::test]
async fn handler_error_fails_alone_and_releases_the_lease() {
    // Keyed by messageId, the poison record gets a lease; the handler's parse error fails it.
    let setup = Setup::new();
    let layer = IdempotencyLayer::new(setup.store.clone()).with_clock(setup.clock.clone());
    let processor = BatchProcessor::new(layer.handler(|m: SqsMessage| async move {
        serde_json::from_str::<Order>(m.body.as_deref().unwrap_or(""))
    }))
    .with_clock(setup.clock.clone());
    let event = load_event("poison.json");
    let report = processor
        .process(invocation(event.clone(), setup.clock.now(), REMAINING))
        .await;
    assert_eq!(
        outcomes(&report),
        [Outcome::Executed, Outcome::Failed, Outcome::Executed]
    );
    assert!(matches!(report.records[1].error, Some(Error::Handler(_))));
    assert_eq!(reported(&report), ids(&event, &[1]));
    // The lease was released: nothing stays in progress, so a retry can run at once.
    let records = setup.store.records();
    assert_eq!(records.len(), 2);
    assert!(records.iter().all(|r| r.status == Status::Completed));
}

#[tokio::test]
async fn a_panicking_handler_fails_only_its_record_and_releases_the_lease() {
    let mut setup = Setup::new();
    setup.hook = Arc::new(|order: &Order| {
        if order.event_id == "evt-1002" {
            panic!("ledger invariant broken for {}", order.event_id);
        }
    });
    let event = load_event("batch.json");
    let report = setup.run(event.clone()).await;
    assert_eq!(
        outcomes(&report),
        [Outcome::Executed, Outcome::Failed, Outcome::Executed]
    );
    match &report.records[1].error {
        Some(Error::Panic { message }) => assert!(message.contains("ledger invariant")),
        other => panic!("expected a panic error, got {other:?}"),
    }
    assert_eq!(reported(&report), ids(&event, &[1]));
    assert_eq!(
        setup.store.records().len(),
        2,
        "the panicked lease is released"
    );
}
