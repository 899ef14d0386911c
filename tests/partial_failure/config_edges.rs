//! Configuration and invocation edges: a constant request id, durations that saturate.

use lambda_idempotency_test_support as support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use aws_lambda_events::sqs::SqsEvent;
use lambda_idempotency::clock::Clock;
use lambda_idempotency::Outcome;
use lambda_runtime::{Context, LambdaEvent};
use support::outcomes;

use crate::{batch, config, counting, message, Rig, REMAINING};

#[tokio::test]
async fn a_key_that_failed_runs_again_in_the_next_batch_even_with_a_constant_request_id() {
    let rig = Rig::new();
    let with_fixed_id = |event: SqsEvent| {
        let mut context = Context::default();
        context.request_id = "always-the-same".into();
        context.deadline = lambda_idempotency::clock::epoch_ms(rig.clock.now() + REMAINING);
        LambdaEvent::new(event, context)
    };
    let processor = counting(
        rig.store.clone(),
        &rig.clock,
        config(),
        rig.runs.clone(),
        rig.fail.clone(),
    );
    rig.fail.store(true, Ordering::SeqCst);
    let first = processor
        .process(with_fixed_id(batch([message("m-1", "{}")])))
        .await;
    assert_eq!(outcomes(&first), [Outcome::Failed]);
    rig.fail.store(false, Ordering::SeqCst);
    let second = processor
        .process(with_fixed_id(batch([message("m-1", "{}")])))
        .await;
    assert_eq!(outcomes(&second), [Outcome::Executed]);
    assert_eq!(rig.runs(), 2);
}

#[tokio::test]
async fn huge_durations_saturate_instead_of_panicking() {
    let rig = Rig::new();
    let config = config()
        .with_expires_after(Duration::MAX)
        .with_max_lease(Duration::MAX);
    let first = rig
        .deliver(config.clone(), batch([message("m-1", "{}")]))
        .await;
    assert_eq!(outcomes(&first), [Outcome::Executed]);
    let again = rig.deliver(config, batch([message("m-1", "{}")])).await;
    assert_eq!(outcomes(&again), [Outcome::Replayed]);
    assert_eq!(rig.runs(), 1);
}
