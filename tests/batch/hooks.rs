//! Hooks and the replay flag: the response hook rewrites what a duplicate gets (from the
//! store, the local cache or a record of the same batch), the created hook sees each record
//! this process writes, and the report tells a replayed record from one that ran.

use lambda_idempotency_test_support as support;

use std::sync::{Arc, Mutex};

use aws_lambda_events::sqs::SqsMessage;
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::clock::Clock;
use lambda_idempotency::hooks::ReplaySource;
use lambda_idempotency::record::Status;
use lambda_idempotency::{CommitStrategy, Completion, Error, IdempotencyLayer, Outcome, Permanent};
use serde_json::json;
use support::{invocation, load_event, outcomes};

use crate::{Receipt, Setup, REMAINING};

/// Sources the response hook was called with, in order.
type Calls = Arc<Mutex<Vec<ReplaySource>>>;

/// A setup whose response hook records its calls and marks the result it hands back.
fn marking(setup: &mut Setup) -> Calls {
    let calls = Calls::default();
    let seen = Arc::clone(&calls);
    setup.config = setup
        .config
        .clone()
        .with_response_hook(move |mut stored, replay| {
            seen.lock().unwrap().push(replay.source);
            assert!(replay.key.as_str().starts_with("orders#"));
            stored["event_id"] =
                json!(format!("replayed:{}", stored["event_id"].as_str().unwrap()));
            stored
        });
    calls
}

fn event_ids(report: &lambda_idempotency::batch::BatchReport<Receipt>) -> Vec<String> {
    report
        .records
        .iter()
        .map(|r| r.value.as_ref().map_or("-".into(), |v| v.event_id.clone()))
        .collect()
}

#[tokio::test]
async fn the_response_hook_rewrites_every_replay_and_never_an_execution() {
    let mut setup = Setup::new();
    let calls = marking(&mut setup);
    let first = setup.run(load_event("same_key_in_batch.json")).await;
    assert_eq!(
        outcomes(&first),
        [Outcome::Executed, Outcome::Replayed, Outcome::Executed]
    );
    // The same-batch duplicate gets the first copy's result through the hook (shared while
    // it runs, or read from the store once it completed).
    assert_eq!(
        event_ids(&first),
        ["evt-4001", "replayed:evt-4001", "evt-4002"]
    );
    let replayed: Vec<bool> = first.records.iter().map(|r| r.replayed).collect();
    assert_eq!(replayed, [false, true, false]);
    let sources = calls.lock().unwrap().clone();
    assert!(
        matches!(
            sources[..],
            [ReplaySource::SameProcess] | [ReplaySource::Store]
        ),
        "{sources:?}"
    );
    assert_eq!(setup.effects.total(), 2);

    // Redelivered to a fresh process: answered from the store.
    calls.lock().unwrap().clear();
    let again = setup.run(load_event("same_key_in_batch.json")).await;
    assert_eq!(outcomes(&again), [Outcome::Replayed; 3]);
    assert!(again.records.iter().all(|r| r.replayed));
    assert_eq!(
        event_ids(&again),
        [
            "replayed:evt-4001",
            "replayed:evt-4001",
            "replayed:evt-4002"
        ]
    );
    let sources = calls.lock().unwrap().clone();
    assert_eq!(sources.len(), 3, "{sources:?}");
    assert!(sources.contains(&ReplaySource::Store), "{sources:?}");
    assert_eq!(setup.effects.total(), 2, "nothing ran again");
}

#[tokio::test]
async fn the_response_hook_sees_local_cache_replays() {
    let mut setup = Setup::new();
    setup.config = setup.config.clone().with_local_cache(16);
    let calls = marking(&mut setup);
    let processor = setup.processor();
    let event = || invocation(load_event("batch.json"), setup.clock.now(), REMAINING);
    let first = processor.process(event()).await;
    assert!(first.records.iter().all(|r| !r.replayed));
    let again = processor.process(event()).await;
    assert!(again.records.iter().all(|r| r.replayed));
    assert!(calls
        .lock()
        .unwrap()
        .iter()
        .all(|s| *s == ReplaySource::LocalCache));
    assert_eq!(calls.lock().unwrap().len(), again.records.len());
}

#[tokio::test]
async fn a_hook_answer_that_does_not_decode_is_acknowledged_without_a_result() {
    let mut setup = Setup::new();
    setup.config = setup
        .config
        .clone()
        .with_response_hook(|_, _| json!("not a receipt"));
    setup.run(load_event("batch.json")).await;
    let again = setup.run(load_event("batch.json")).await;
    assert!(again.records.iter().all(|r| r.outcome == Outcome::Replayed));
    assert!(again
        .records
        .iter()
        .all(|r| r.value.is_none() && r.replayed));
    assert!(again.response.batch_item_failures.is_empty());
}

#[tokio::test]
async fn a_panicking_response_hook_replays_the_stored_result_unchanged() {
    let mut setup = Setup::new();
    setup.config = setup
        .config
        .clone()
        .with_response_hook(|_, _| panic!("the hook is broken"));
    let first = setup.run(load_event("batch.json")).await;
    let again = setup.run(load_event("batch.json")).await;
    assert!(again.records.iter().all(|r| r.outcome == Outcome::Replayed));
    assert_eq!(event_ids(&again), event_ids(&first));
    assert_eq!(setup.effects.total(), first.records.len());
}

/// Keys and statuses the created hook saw.
type Created = Arc<Mutex<Vec<(String, Status)>>>;

fn created_hook(setup: &mut Setup) -> Created {
    let created = Created::default();
    let seen = Arc::clone(&created);
    setup.config = setup
        .config
        .clone()
        .with_record_created_hook(move |record| {
            assert!(record.expiration_secs > 0);
            seen.lock()
                .unwrap()
                .push((record.key.to_string(), record.status));
        });
    created
}

#[tokio::test]
async fn the_created_hook_sees_each_lease_once_and_no_duplicate() {
    let mut setup = Setup::new();
    let created = created_hook(&mut setup);
    setup.run(load_event("same_key_in_batch.json")).await;
    let seen = created.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "two keys, one lease each: {seen:?}");
    assert!(seen.iter().all(|(_, status)| *status == Status::InProgress));
    assert_ne!(seen[0].0, seen[1].0);
    setup.run(load_event("same_key_in_batch.json")).await;
    assert_eq!(created.lock().unwrap().len(), 2, "replays write no record");
}

#[tokio::test]
async fn the_created_hook_sees_optimistic_records_with_their_final_status() {
    let mut setup = Setup::new();
    let created = created_hook(&mut setup);
    let layer = IdempotencyLayer::new(setup.store.clone())
        .with_key(order_consumer::order_key())
        .with_clock(setup.clock.clone())
        .with_config(setup.config.clone())
        .with_writes()
        .with_commit(CommitStrategy::Optimistic);
    let handler = layer.handler(|message: SqsMessage| async move {
        let order: order_consumer::Order = serde_json::from_str(message.body.as_deref().unwrap())?;
        if order.event_id == "evt-4002" {
            return Err(Permanent::new("declined").into());
        }
        Ok::<_, lambda_idempotency::BoxError>(Completion::new(order.amount))
    });
    let processor = BatchProcessor::new(handler).with_clock(setup.clock.clone());
    let event = || {
        invocation(
            load_event("same_key_in_batch.json"),
            setup.clock.now(),
            REMAINING,
        )
    };
    let report = processor.process(event()).await;
    assert_eq!(
        outcomes(&report),
        [
            Outcome::Executed,
            Outcome::Replayed,
            Outcome::FailedPermanently
        ]
    );
    let statuses: Vec<Status> = created.lock().unwrap().iter().map(|c| c.1).collect();
    assert_eq!(statuses, [Status::Completed, Status::Failed]);
    // The permanent failure is not a replay now; redelivered, it is.
    assert!(!report.records[2].replayed);
    let again = processor.process(event()).await;
    assert_eq!(outcomes(&again)[2], Outcome::FailedPermanently);
    assert!(again.records[2].replayed);
    assert!(matches!(
        again.records[2].error,
        Some(Error::Permanent { replayed: true, .. })
    ));
    assert_eq!(created.lock().unwrap().len(), 2, "replays write no record");
}

#[tokio::test]
async fn an_unchanged_answer_replays_the_stored_result_exactly() {
    // Past u64: serde_json::Value holds such a number as f64, so the hook's JSON cannot carry
    // it; a hook that hands the JSON back unchanged must not lose the result.
    let replayed = |config: lambda_idempotency::Config| async move {
        let clock = lambda_idempotency::clock::ManualClock::starting_now();
        let handler = IdempotencyLayer::new(lambda_idempotency::store::InMemoryStore::new())
            .with_clock(clock.clone())
            .with_config(config.with_key_prefix("p"))
            .handler(|_: SqsMessage| async { Ok::<u128, lambda_idempotency::BoxError>(u128::MAX) });
        let processor = BatchProcessor::new(handler).with_clock(clock.clone());
        let event = || invocation(load_event("producer_retry.json"), clock.now(), REMAINING);
        assert_eq!(
            processor.process(event()).await.records[0].outcome,
            Outcome::Executed
        );
        let again = processor.process(event()).await;
        assert_eq!(again.records[0].outcome, Outcome::Replayed);
        again.records[0].value
    };
    assert_eq!(
        replayed(lambda_idempotency::Config::new()).await,
        Some(u128::MAX)
    );
    let identity = lambda_idempotency::Config::new().with_response_hook(|json, _| json);
    assert_eq!(replayed(identity).await, Some(u128::MAX));
}

#[tokio::test]
async fn a_duplicate_waiting_on_the_running_copy_is_hooked_as_same_process() {
    let calls = Calls::default();
    let seen = Arc::clone(&calls);
    let clock = lambda_idempotency::clock::ManualClock::starting_now();
    let handler = IdempotencyLayer::new(lambda_idempotency::store::InMemoryStore::new())
        .with_key(order_consumer::order_key())
        .with_clock(clock.clone())
        .with_config(
            lambda_idempotency::Config::new()
                .with_key_prefix("orders")
                .with_response_hook(move |json, replay| {
                    seen.lock().unwrap().push(replay.source);
                    json
                }),
        )
        .handler(|_: SqsMessage| async {
            // Still running when its duplicate arrives.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            Ok::<u32, lambda_idempotency::BoxError>(7)
        });
    let processor = BatchProcessor::new(handler).with_clock(clock.clone());
    let report = processor
        .process(invocation(
            load_event("same_key_in_batch.json"),
            clock.now(),
            REMAINING,
        ))
        .await;
    assert_eq!(
        outcomes(&report),
        [Outcome::Executed, Outcome::Replayed, Outcome::Executed]
    );
    assert_eq!(report.records[1].value, Some(7));
    assert_eq!(*calls.lock().unwrap(), [ReplaySource::SameProcess]);
}
