//! FIFO batches stop at a record that is locked, lost its lease, or found the store down.

use lambda_idempotency_test_support as support;

use aws_lambda_events::sqs::SqsMessage;
use lambda_idempotency::clock::Clock;
use lambda_idempotency::key::IdempotencyKey;
use lambda_idempotency::record::{OwnerToken, Status};
use lambda_idempotency::store::Store;
use lambda_idempotency::Outcome;
use support::faulty_store::Inject;
use support::{outcomes, reported};

use crate::{batch, config, message, stored, Rig, REMAINING};

fn fifo(id: &str) -> SqsMessage {
    let mut m = message(id, "{}");
    m.event_source_arn = Some("arn:aws:sqs:eu-west-1:123456789012:orders.fifo".into());
    m.attributes.insert("MessageGroupId".into(), "g".into());
    m
}

#[tokio::test]
async fn fifo_batches_stop_at_a_record_that_is_locked_lost_or_unavailable() {
    for middle in [
        Outcome::Locked,
        Outcome::LeaseLost,
        Outcome::StoreUnavailable,
    ] {
        let rig = Rig::new();
        match middle {
            Outcome::Locked => {
                let now = rig.clock.now();
                rig.store
                    .inner
                    .acquire(&lambda_idempotency::store::AcquireRequest {
                        key: IdempotencyKey::derive("t", b"f-2"),
                        owner: OwnerToken::generate(),
                        now,
                        lease_expiration_ms: lambda_idempotency::clock::epoch_ms(now + REMAINING),
                        expiration_secs: lambda_idempotency::clock::epoch_secs(now + REMAINING),
                        validation: None,
                    })
                    .await
                    .unwrap();
            }
            // The first record completes normally; the faults strike the second.
            Outcome::LeaseLost => {
                rig.store.inject(Inject::CompleteResent);
                rig.store.inject(Inject::CompleteLeaseLost);
            }
            _ => {
                rig.store.inject(Inject::AcquireResent);
                rig.store.inject(Inject::AcquireFails);
            }
        }
        let report = rig
            .deliver(config(), batch([fifo("f-1"), fifo("f-2"), fifo("f-3")]))
            .await;
        assert_eq!(
            outcomes(&report),
            [Outcome::Executed, middle, Outcome::FifoSkipped],
            "{middle:?}"
        );
        assert_eq!(reported(&report), ["f-2", "f-3"], "{middle:?}");
        let expected_runs = if middle == Outcome::LeaseLost { 2 } else { 1 };
        assert_eq!(rig.runs(), expected_runs, "{middle:?}");
        assert!(stored(&rig.store, "f-3").await.is_none(), "{middle:?}");
        assert_eq!(
            stored(&rig.store, "f-1").await.unwrap().status,
            Status::Completed
        );
    }
}
