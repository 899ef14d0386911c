//! Batch behaviour on the embedded store, driven by the sample events in `events/`.
use lambda_idempotency_test_support as support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::clock::{epoch_ms, epoch_secs, Clock, ManualClock};
use lambda_idempotency::key::{IdempotencyKey, JsonPointer};
use lambda_idempotency::record::{OwnerToken, Status};
use lambda_idempotency::sqs::{BatchError, BatchMode, BatchProcessor, BatchReport};
use lambda_idempotency::store::{AcquireRequest, InMemoryStore, Store};
use lambda_idempotency::validation::PayloadValidation;
use lambda_idempotency::{Config, Error, IdempotencyLayer, MissingKey, Outcome, Processed};
use lambda_runtime::LambdaEvent;
use order_consumer::{order_key, Order};
use serde::{Deserialize, Serialize};
use support::{invocation, load_event, outcomes, reported};
use tower::{Service, ServiceExt};

const EVENTS: [&str; 7] = [
    "batch_redelivered.json",
    "producer_retry.json",
    "tampered.json",
    "batch.json",
    "poison.json",
    "fifo.json",
    "same_key_in_batch.json",
];
const REMAINING: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Receipt {
    event_id: String,
    applied: i64,
}

/// Counts how often the handler applied each event: the side effect under test.
#[derive(Debug, Clone, Default)]
struct Effects {
    applied: Arc<Mutex<HashMap<String, usize>>>,
}

impl Effects {
    fn count(&self, event_id: &str) -> usize {
        self.applied
            .lock()
            .unwrap()
            .get(event_id)
            .copied()
            .unwrap_or(0)
    }
    fn total(&self) -> usize {
        self.applied.lock().unwrap().values().sum()
    }
}

/// What the handler does besides applying the order.
type Hook = Arc<dyn Fn(&Order) + Send + Sync>;

struct Setup {
    store: InMemoryStore,
    clock: ManualClock,
    effects: Effects,
    config: Config,
    mode: BatchMode,
    hook: Hook,
}

impl Setup {
    fn new() -> Self {
        Self {
            store: InMemoryStore::new(),
            clock: ManualClock::starting_now(),
            effects: Effects::default(),
            config: Config::new().with_key_prefix("orders"),
            mode: BatchMode::default(),
            hook: Arc::new(|_| {}),
        }
    }

    fn processor(
        &self,
    ) -> BatchProcessor<
        impl Service<LambdaEvent<SqsMessage>, Response = Processed<Receipt>, Error = Error>
            + Clone
            + Send
            + Sync
            + 'static,
        ManualClock,
    > {
        let effects = self.effects.clone();
        let hook = self.hook.clone();
        let layer = IdempotencyLayer::new(self.store.clone())
            .with_key(order_key())
            .with_clock(self.clock.clone())
            .with_config(self.config.clone());
        let handler = layer.handler(move |message: SqsMessage| {
            let effects = effects.clone();
            let hook = hook.clone();
            async move {
                let order: Order = serde_json::from_str(message.body.as_deref().unwrap_or(""))?;
                hook(&order);
                *effects
                    .applied
                    .lock()
                    .unwrap()
                    .entry(order.event_id.clone())
                    .or_default() += 1;
                Ok::<_, serde_json::Error>(Receipt {
                    event_id: order.event_id,
                    applied: order.amount,
                })
            }
        });
        BatchProcessor::new(handler)
            .with_mode(self.mode)
            .with_clock(self.clock.clone())
    }

    async fn run(&self, event: SqsEvent) -> BatchReport<Receipt> {
        self.processor()
            .process(invocation(event, self.clock.now(), REMAINING))
            .await
    }
}

fn ids(event: &SqsEvent, indexes: &[usize]) -> Vec<String> {
    indexes
        .iter()
        .map(|&i| event.records[i].message_id.clone().unwrap())
        .collect()
}

#[test]
fn sample_events_round_trip_through_the_lambda_types() {
    for name in EVENTS {
        let path = format!("{}/events/{name}", env!("CARGO_MANIFEST_DIR"));
        let original: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let event = load_event(name);
        assert!(!event.records.is_empty(), "{name}");
        let mut round_trip = serde_json::to_value(&event).unwrap();
        strip_nulls(&mut round_trip);
        assert_eq!(round_trip, original, "{name} must use only known fields");
    }
}

/// Drops `null` object members (absent optional fields serialize as null).
fn strip_nulls(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(strip_nulls);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

#[tokio::test]
async fn fresh_batch_executes_every_record_and_reports_none() {
    let setup = Setup::new();
    let report = setup.run(load_event("batch.json")).await;
    assert_eq!(outcomes(&report), [Outcome::Executed; 3]);
    assert!(report.response.batch_item_failures.is_empty());
    assert_eq!(
        serde_json::to_value(report.into_response().unwrap()).unwrap(),
        serde_json::json!({"batchItemFailures": []})
    );
    assert_eq!(setup.effects.total(), 3);
}

#[tokio::test]
async fn redelivered_batch_replays_without_running_the_handler() {
    let setup = Setup::new();
    let first = setup.run(load_event("batch.json")).await;
    setup.clock.advance(Duration::from_secs(120));
    let second = setup.run(load_event("batch.json")).await;
    assert_eq!(outcomes(&second), [Outcome::Replayed; 3]);
    assert_eq!(setup.effects.total(), 3);
    let values = |r: &BatchReport<Receipt>| -> Vec<Receipt> {
        r.records.iter().map(|r| r.value.clone().unwrap()).collect()
    };
    assert_eq!(values(&first), values(&second));
}

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

#[tokio::test]
async fn same_key_twice_in_one_batch_runs_the_handler_once() {
    for mode in [
        BatchMode::Concurrent { limit: 10 },
        BatchMode::Fifo {
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
async fn a_key_prefix_too_long_for_dynamodb_is_a_typed_rejection() {
    let mut setup = Setup::new();
    setup.config = Config::new().with_key_prefix("p".repeat(2000));
    let mut event = load_event("batch.json");
    event.records.truncate(1);
    let report = setup.run(event).await;
    assert_eq!(outcomes(&report), [Outcome::Rejected]);
    assert!(matches!(
        report.records[0].error,
        Some(Error::Key(
            lambda_idempotency::key::KeyError::KeyTooLong { .. }
        ))
    ));
    assert_eq!(setup.effects.total(), 0);
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
    setup.clock.advance(Duration::from_secs(3601));
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

#[tokio::test]
async fn record_without_message_id_never_yields_an_empty_identifier() {
    let setup = Setup::new();
    let layer = IdempotencyLayer::new(setup.store.clone()).with_clock(setup.clock.clone());
    let processor =
        BatchProcessor::new(layer.handler(|_m: SqsMessage| async { Ok::<_, std::io::Error>(()) }))
            .with_clock(setup.clock.clone());
    let mut event = load_event("batch.json");
    event.records[1].message_id = None;
    event.records[2].message_id = Some(String::new());
    let report = processor
        .process(invocation(event, setup.clock.now(), REMAINING))
        .await;
    // Keyed by messageId, both are rejected, but neither can be reported.
    assert_eq!(
        outcomes(&report),
        [Outcome::Executed, Outcome::Rejected, Outcome::Rejected]
    );
    assert!(report.response.batch_item_failures.is_empty());
    assert_eq!(report.unreportable, 2);
    // So the invocation fails and SQS retries the whole batch.
    match report.into_response() {
        Err(err @ BatchError::UnreportableFailures { count: 2 }) => {
            let diagnostic: lambda_runtime::Diagnostic = err.into();
            assert_eq!(diagnostic.error_type, "Idempotency.UnreportableFailures");
        }
        other => panic!("expected UnreportableFailures, got {other:?}"),
    }
}

#[tokio::test]
async fn record_without_message_id_that_succeeds_needs_no_identifier() {
    let setup = Setup::new();
    let mut event = load_event("batch.json");
    event.records[0].message_id = None;
    let report = setup.run(event).await;
    assert_eq!(outcomes(&report), [Outcome::Executed; 3]);
    assert!(report.into_response().is_ok());
}

#[tokio::test]
async fn missing_key_fails_the_record_unless_unprotected_processing_is_chosen() {
    let mut event = load_event("batch.json");
    event.records.truncate(1);
    event.records[0].body = Some(r#"{"account":"acct-alice","amount":1}"#.into());
    for policy in [MissingKey::Fail, MissingKey::ProcessUnprotected] {
        let store = InMemoryStore::new();
        let calls = Arc::new(Mutex::new(0));
        let counted = calls.clone();
        let layer = IdempotencyLayer::new(store.clone())
            .with_key(JsonPointer::new("/eventId"))
            .with_config(Config::new().with_missing_key(policy));
        let processor = BatchProcessor::new(layer.handler(move |_m: SqsMessage| {
            let counted = counted.clone();
            async move {
                *counted.lock().unwrap() += 1;
                Ok::<_, std::io::Error>(())
            }
        }));
        let now = std::time::SystemTime::now();
        let report = processor
            .process(invocation(event.clone(), now, REMAINING))
            .await;
        match policy {
            MissingKey::Fail => {
                assert_eq!(outcomes(&report), [Outcome::Rejected]);
                assert!(matches!(
                    report.records[0].error,
                    Some(Error::Key(
                        lambda_idempotency::key::KeyError::PointerNotFound { .. }
                    ))
                ));
                assert_eq!(*calls.lock().unwrap(), 0);
            }
            _ => {
                assert_eq!(outcomes(&report), [Outcome::Unprotected]);
                assert_eq!(*calls.lock().unwrap(), 1);
            }
        }
        assert!(store.records().is_empty(), "nothing stored without a key");
    }
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

#[tokio::test]
async fn a_lost_lease_is_reported_and_does_not_overwrite_the_new_holder() {
    let mut setup = Setup::new();
    setup.config = setup.config.clone().with_max_lease(Duration::from_secs(1));
    let (store, clock) = (setup.store.clone(), setup.clock.clone());
    let intruder = OwnerToken::generate();
    let intruder_in_hook = intruder.clone();
    setup.hook = Arc::new(move |order: &Order| {
        // The handler outlives its lease and another invocation takes the key over.
        clock.advance(Duration::from_secs(2));
        let now = clock.now();
        let request = AcquireRequest {
            key: IdempotencyKey::derive("orders", order.event_id.as_bytes()),
            owner: intruder_in_hook.clone(),
            now,
            lease_expiration_ms: epoch_ms(now + Duration::from_secs(30)),
            expiration_secs: epoch_secs(now + Duration::from_secs(3600)),
            validation: None,
        };
        let taken = store.acquire(&request);
        assert_eq!(
            futures_now(taken).unwrap(),
            lambda_idempotency::store::Acquire::Acquired
        );
    });
    let mut event = load_event("batch.json");
    event.records.truncate(1);
    let report = setup.run(event).await;
    assert_eq!(outcomes(&report), [Outcome::LeaseLost]);
    assert_eq!(reported(&report).len(), 1);
    let record = &setup.store.records()[0];
    assert_eq!(record.status, Status::InProgress);
    assert_eq!(record.owner.as_ref(), Some(&intruder));
}

fn futures_now<F: std::future::Future>(future: F) -> F::Output {
    // InMemoryStore futures are ready at once.
    let mut future = std::pin::pin!(future);
    let waker = std::task::Waker::noop();
    match future
        .as_mut()
        .poll(&mut std::task::Context::from_waker(waker))
    {
        std::task::Poll::Ready(output) => output,
        std::task::Poll::Pending => panic!("InMemoryStore future was not ready"),
    }
}

#[tokio::test]
async fn a_record_locked_elsewhere_is_reported_for_retry() {
    let setup = Setup::new();
    let now = setup.clock.now();
    setup
        .store
        .acquire(&AcquireRequest {
            key: IdempotencyKey::derive("orders", b"evt-1001"),
            owner: OwnerToken::generate(),
            now,
            lease_expiration_ms: epoch_ms(now + Duration::from_secs(60)),
            expiration_secs: epoch_secs(now + Duration::from_secs(3600)),
            validation: None,
        })
        .await
        .unwrap();
    let event = load_event("batch.json");
    let report = setup.run(event.clone()).await;
    assert_eq!(
        outcomes(&report),
        [Outcome::Locked, Outcome::Executed, Outcome::Executed]
    );
    assert_eq!(reported(&report), ids(&event, &[0]));
    assert_eq!(setup.effects.count("evt-1001"), 0);
}

#[tokio::test]
async fn the_processor_is_a_lambda_ready_service_over_tower_composed_handlers() {
    let store = InMemoryStore::new();
    let calls = Arc::new(Mutex::new(0));
    let counted = calls.clone();
    let handler = tower::ServiceBuilder::new()
        .layer(IdempotencyLayer::new(store).with_key(order_key()))
        .service_fn(move |event: LambdaEvent<SqsMessage>| {
            let counted = counted.clone();
            async move {
                *counted.lock().unwrap() += 1;
                Ok::<_, std::io::Error>(event.context.request_id)
            }
        });
    let mut processor = BatchProcessor::new(handler);
    let now = std::time::SystemTime::now();
    for _ in 0..2 {
        let response = processor
            .ready()
            .await
            .unwrap()
            .call(invocation(
                load_event("same_key_in_batch.json"),
                now,
                REMAINING,
            ))
            .await
            .unwrap();
        assert!(response.batch_item_failures.is_empty());
    }
    assert_eq!(
        *calls.lock().unwrap(),
        2,
        "two distinct keys, each run once"
    );
}

/// A store whose first `contended` acquires report that the record changed underneath.
#[derive(Clone)]
struct ChangingStore {
    inner: InMemoryStore,
    contended: Arc<Mutex<usize>>,
}

impl Store for ChangingStore {
    async fn acquire(
        &self,
        request: &AcquireRequest,
    ) -> Result<lambda_idempotency::store::Acquire, lambda_idempotency::store::StoreError> {
        {
            let mut left = self.contended.lock().unwrap();
            if *left > 0 {
                *left -= 1;
                return Ok(lambda_idempotency::store::Acquire::Contended);
            }
        }
        self.inner.acquire(request).await
    }
    async fn complete(
        &self,
        request: &lambda_idempotency::store::CompleteRequest,
    ) -> Result<lambda_idempotency::store::Fenced, lambda_idempotency::store::StoreError> {
        self.inner.complete(request).await
    }
    async fn extend(
        &self,
        request: &lambda_idempotency::store::ExtendRequest,
    ) -> Result<lambda_idempotency::store::Fenced, lambda_idempotency::store::StoreError> {
        self.inner.extend(request).await
    }
    async fn release(
        &self,
        key: &IdempotencyKey,
        owner: &OwnerToken,
    ) -> Result<lambda_idempotency::store::Fenced, lambda_idempotency::store::StoreError> {
        self.inner.release(key, owner).await
    }
    async fn get(
        &self,
        key: &IdempotencyKey,
    ) -> Result<Option<lambda_idempotency::record::Record>, lambda_idempotency::store::StoreError>
    {
        self.inner.get(key).await
    }
}

#[tokio::test]
async fn a_record_changing_underneath_is_retried_a_bounded_number_of_times() {
    // Default: 3 attempts. Two contended answers are absorbed; three are not.
    for (contended, expected) in [(2, Outcome::Executed), (3, Outcome::Locked)] {
        let store = ChangingStore {
            inner: InMemoryStore::new(),
            contended: Arc::new(Mutex::new(contended)),
        };
        let layer = IdempotencyLayer::new(store.clone());
        let processor = BatchProcessor::new(
            layer.handler(|_m: SqsMessage| async { Ok::<_, std::io::Error>(1) }),
        );
        let mut event = load_event("batch.json");
        event.records.truncate(1);
        let report = processor
            .process(invocation(event, std::time::SystemTime::now(), REMAINING))
            .await;
        assert_eq!(
            outcomes(&report),
            [expected],
            "{contended} contended answers"
        );
        if expected == Outcome::Locked {
            assert!(matches!(
                report.records[0].error,
                Some(Error::Contended { .. })
            ));
            assert!(
                store.inner.records().is_empty(),
                "handler never ran unlocked"
            );
        }
    }
}

#[tokio::test]
async fn stored_keys_hold_no_raw_key_material() {
    let setup = Setup::new();
    setup.run(load_event("batch.json")).await;
    for record in setup.store.records() {
        let key = record.key.as_str();
        assert!(key.starts_with("orders#"), "{key}");
        assert!(!key.contains("evt-"), "{key}");
        assert_eq!(key.len(), "orders#".len() + 64);
    }
}

#[tokio::test]
async fn a_heartbeat_keeps_a_long_handler_protected_beyond_one_lease() {
    // Without a heartbeat a 300 ms lease elapses during a 1 s handler and a second container
    // takes the record over; with it, the lease is extended and the second one is locked out.
    for heartbeat in [false, true] {
        let store = InMemoryStore::new();
        let runs = Arc::new(Mutex::new(0));
        let config = if heartbeat {
            Config::new().with_heartbeat(Duration::from_millis(300), Duration::from_millis(50))
        } else {
            Config::new().with_max_lease(Duration::from_millis(300))
        };
        let container = |config: Config| {
            let runs = runs.clone();
            let layer = IdempotencyLayer::new(store.clone()).with_config(config);
            BatchProcessor::new(layer.handler(move |_m: SqsMessage| {
                let runs = runs.clone();
                async move {
                    *runs.lock().unwrap() += 1;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    Ok::<_, std::io::Error>(())
                }
            }))
        };
        let (slow, other) = (container(config.clone()), container(config));
        let mut event = load_event("batch.json");
        event.records.truncate(1);
        let now = std::time::SystemTime::now;
        let first = slow.process(invocation(event.clone(), now(), REMAINING));
        let second = async {
            tokio::time::sleep(Duration::from_millis(600)).await;
            other
                .process(invocation(event.clone(), now(), REMAINING))
                .await
        };
        let (first, second) = tokio::join!(first, second);
        if heartbeat {
            assert_eq!(outcomes(&first), [Outcome::Executed]);
            assert_eq!(outcomes(&second), [Outcome::Locked]);
            assert_eq!(*runs.lock().unwrap(), 1);
        } else {
            // The lease elapsed: the second container took over, and the first one's
            // completion was refused.
            assert_eq!(outcomes(&first), [Outcome::LeaseLost]);
            assert_eq!(outcomes(&second), [Outcome::Executed]);
            assert_eq!(*runs.lock().unwrap(), 2);
        }
    }
}
