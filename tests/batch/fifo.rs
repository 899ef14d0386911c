//! FIFO queues: in order by default, stopping at the first failure or only its message group.

use lambda_idempotency_test_support as support;

use lambda_idempotency::batch::BatchMode;
use lambda_idempotency::Outcome;
use support::{load_event, outcomes, reported};

use crate::{ids, Setup};

#[tokio::test]
async fn fifo_stops_at_the_first_failure_and_reports_every_later_record() {
    let mut setup = Setup::new();
    setup.mode = BatchMode::Fifo {
        skip_failed_group_only: false,
    };
    let event = load_event("fifo.json");
    let report = setup.run(event.clone()).await;
    assert_eq!(
        outcomes(&report),
        [
            Outcome::Executed,
            Outcome::Rejected,
            Outcome::FifoSkipped,
            Outcome::FifoSkipped
        ]
    );
    assert_eq!(reported(&report), ids(&event, &[1, 2, 3]));
    assert_eq!(setup.effects.total(), 1);
}

#[tokio::test]
async fn events_from_a_fifo_queue_are_processed_in_order_by_default() {
    // The default mode sees the `.fifo` source and keeps the order: no opt-in needed.
    let setup = Setup::new();
    let event = load_event("fifo.json");
    let report = setup.run(event.clone()).await;
    assert_eq!(
        outcomes(&report),
        [
            Outcome::Executed,
            Outcome::Rejected,
            Outcome::FifoSkipped,
            Outcome::FifoSkipped
        ]
    );
    assert_eq!(reported(&report), ids(&event, &[1, 2, 3]));
    // A standard queue's batch runs concurrently: the poison record fails alone.
    let report = setup.run(load_event("poison.json")).await;
    assert_eq!(
        outcomes(&report),
        [Outcome::Executed, Outcome::Rejected, Outcome::Executed]
    );
}

#[tokio::test]
async fn fifo_can_stop_only_the_failed_message_group() {
    let mut setup = Setup::new();
    setup.mode = BatchMode::Fifo {
        skip_failed_group_only: true,
    };
    let event = load_event("fifo.json");
    let report = setup.run(event.clone()).await;
    // Records 0, 1 and 3 are group acct-dave; record 2 is group acct-erin.
    assert_eq!(
        outcomes(&report),
        [
            Outcome::Executed,
            Outcome::Rejected,
            Outcome::Executed,
            Outcome::FifoSkipped
        ]
    );
    assert_eq!(reported(&report), ids(&event, &[1, 3]));
    assert_eq!(setup.effects.count("evt-3003"), 1);
    assert_eq!(setup.effects.count("evt-3004"), 0);
}
