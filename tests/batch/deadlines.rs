//! Deadlines: records not started near or past the deadline, and where the lease ends.

use lambda_idempotency_test_support as support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::sqs::SqsEvent;
use lambda_idempotency::clock::{epoch_ms, Clock};
use lambda_idempotency::record::Status;
use lambda_idempotency::Outcome;
use support::{invocation, load_event, outcomes, reported};

use crate::{ids, Setup, REMAINING};

#[tokio::test]
async fn records_are_not_started_when_the_deadline_is_too_near() {
    let setup = Setup::new();
    let event = load_event("batch.json");
    // 500 ms left, default margin 1 s.
    let report = setup
        .processor()
        .process(invocation(
            event.clone(),
            setup.clock.now(),
            Duration::from_millis(500),
        ))
        .await;
    assert_eq!(outcomes(&report), [Outcome::DeadlineNear; 3]);
    assert_eq!(reported(&report), ids(&event, &[0, 1, 2]));
    assert_eq!(setup.effects.total(), 0);
    assert!(setup.store.records().is_empty());
}

#[tokio::test]
async fn a_passed_deadline_takes_no_lease() {
    let setup = Setup::new();
    let processor = setup.processor().with_deadline_margin(Duration::ZERO);
    // The deadline passed 1 ms ago: that is not "unknown", it is too late.
    let mut message = load_event("batch.json").records.remove(0);
    message.message_id = Some("late".into());
    let mut event = SqsEvent::default();
    event.records.push(message);
    let late = invocation(
        event,
        setup.clock.now() - Duration::from_millis(1),
        Duration::ZERO,
    );
    let report = processor.process(late).await;
    assert_eq!(outcomes(&report), [Outcome::DeadlineNear]);
    assert!(setup.store.records().is_empty());
    assert_eq!(setup.effects.total(), 0);
}

#[tokio::test]
async fn the_lease_ends_at_the_invocation_deadline_or_the_configured_cap() {
    for cap in [None, Some(Duration::from_secs(5))] {
        let mut setup = Setup::new();
        if let Some(cap) = cap {
            setup.config = setup.config.clone().with_max_lease(cap);
        }
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (store, seen_in_handler) = (setup.store.clone(), seen.clone());
        setup.hook = Arc::new(move |_| {
            seen_in_handler.lock().unwrap().extend(store.records());
        });
        let mut event = load_event("batch.json");
        event.records.truncate(1);
        setup.run(event).await;
        let seen = seen.lock().unwrap();
        let lease = seen[0].lease_expiration_ms.unwrap();
        let now = setup.clock.now();
        assert_eq!(seen[0].status, Status::InProgress);
        assert_eq!(lease, epoch_ms(now + cap.unwrap_or(REMAINING)));
        assert!(seen[0].expiration_secs >= lease / 1000);
    }
}
