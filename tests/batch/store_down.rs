//! An unavailable store: fail closed then recover; duplicates with and without the local cache.

use lambda_idempotency_test_support as support;

use std::time::Duration;

use lambda_idempotency::clock::Clock;
use lambda_idempotency::Outcome;
use support::{invocation, load_event, outcomes, reported};

use crate::{ids, Setup, REMAINING};

#[tokio::test]
async fn store_down_fails_closed_then_recovers() {
    let setup = Setup::new();
    setup.store.set_unavailable(true);
    let event = load_event("batch.json");
    let report = setup.run(event.clone()).await;
    assert_eq!(outcomes(&report), [Outcome::StoreUnavailable; 3]);
    assert_eq!(reported(&report), ids(&event, &[0, 1, 2]));
    assert_eq!(setup.effects.total(), 0, "no handler runs without a lease");
    setup.store.set_unavailable(false);
    let report = setup.run(event).await;
    assert_eq!(outcomes(&report), [Outcome::Executed; 3]);
}

#[tokio::test]
async fn local_cache_answers_duplicates_without_the_store() {
    let mut setup = Setup::new();
    setup.config = setup.config.clone().with_local_cache(16);
    let processor = setup.processor();
    let run = |event| processor.process(invocation(event, setup.clock.now(), REMAINING));
    run(load_event("batch.json")).await;
    setup.store.set_unavailable(true);
    let report = run(load_event("batch.json")).await;
    assert_eq!(outcomes(&report), [Outcome::Replayed; 3]);
    // Past the record window the cache no longer answers.
    setup
        .clock
        .advance(lambda_idempotency::DEFAULT_EXPIRES_AFTER + Duration::from_secs(1));
    let report = run(load_event("batch.json")).await;
    assert_eq!(outcomes(&report), [Outcome::StoreUnavailable; 3]);
}

#[tokio::test]
async fn without_the_cache_duplicates_need_the_store() {
    let setup = Setup::new();
    setup.run(load_event("batch.json")).await;
    setup.store.set_unavailable(true);
    let report = setup.run(load_event("batch.json")).await;
    assert_eq!(outcomes(&report), [Outcome::StoreUnavailable; 3]);
}
