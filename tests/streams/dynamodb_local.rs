//! Both streams on DynamoDB Local, in lease and optimistic mode: the shard stops at the
//! failed record, a redelivery replays the completed record and runs the rest, and the
//! ledger is credited exactly once.

use lambda_idempotency::key::MessageId;
use lambda_idempotency::{CommitStrategy, Outcome};
use lambda_idempotency_test_support::dynamodb::fresh_store;

use aws_lambda_events::event::dynamodb::Event;
use aws_lambda_events::event::kinesis::KinesisEvent;

use super::{outcomes, records, sample, Rig, Stream, STOPPED};

const MODES: [CommitStrategy; 2] = [CommitStrategy::Lease, CommitStrategy::Optimistic];

/// The sample batch (a good record, a bad one, a good one), then records 0 and 2 twice.
async fn stops_then_replays<E: Stream + Clone>(sample: E, redelivery: impl Fn() -> E) {
    for mode in MODES {
        let Some(store) = fresh_store().await else {
            return;
        };
        let rig = Rig::on(store, mode).await;
        let first = rig.deliver(MessageId, sample.clone()).await;
        assert_eq!(outcomes(&first), STOPPED, "{mode:?}");
        assert_eq!(first.records.len(), 3);
        assert_eq!(rig.runs(), 2, "{mode:?}: the third record never started");
        assert_eq!(rig.balance("acct-alice").await, 10, "{mode:?}");
        assert_eq!(rig.balance("acct-bob").await, 0, "{mode:?}");

        let second = rig.deliver(MessageId, redelivery()).await;
        assert_eq!(
            outcomes(&second),
            [Outcome::Replayed, Outcome::Executed],
            "{mode:?}"
        );
        // Lease mode answers the duplicate from its record; optimistic mode runs the
        // handler and learns from the refused commit.
        let after_second = if mode == CommitStrategy::Lease { 3 } else { 4 };
        assert_eq!(rig.runs(), after_second, "{mode:?}");

        let third = rig.deliver(MessageId, redelivery()).await;
        assert_eq!(
            outcomes(&third),
            [Outcome::Replayed, Outcome::Replayed],
            "{mode:?}"
        );
        let after_third = if mode == CommitStrategy::Lease { 3 } else { 6 };
        assert_eq!(rig.runs(), after_third, "{mode:?}");
        assert_eq!(
            rig.balance("acct-alice").await,
            10,
            "{mode:?}: credited once"
        );
        assert_eq!(rig.balance("acct-bob").await, 5, "{mode:?}: credited once");
    }
}

#[tokio::test]
async fn kinesis_on_dynamodb_local_credits_exactly_once() {
    stops_then_replays(sample::<KinesisEvent>(), || {
        records::<KinesisEvent>(&[0, 2])
    })
    .await;
}

#[tokio::test]
async fn dynamodb_streams_on_dynamodb_local_credit_exactly_once() {
    stops_then_replays(sample::<Event>(), || records::<Event>(&[0, 2])).await;
}
