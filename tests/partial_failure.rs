//! Per-delivery behaviour under partial failure, on the embedded store: how many times the
//! handler ran, each record's outcome, the stored record, what `batchItemFailures` held.
//! Each test pins one defect of the record protocol that an earlier version had.
use lambda_idempotency_test_support as support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage, SqsMessageAttribute};
use lambda_idempotency::clock::{Clock, ManualClock};
use lambda_idempotency::key::{IdempotencyKey, JsonPointer, KeyExtractor, MessageAttribute};
use lambda_idempotency::record::{OwnerToken, Status};
use lambda_idempotency::sqs::{BatchProcessor, BatchReport};
use lambda_idempotency::store::{InMemoryStore, Store};
use lambda_idempotency::validation::PayloadValidation;
use lambda_idempotency::{Config, Error, IdempotencyLayer, Outcome, Permanent};
use lambda_runtime::{Context, LambdaEvent};
use support::faulty_store::{FaultyStore, Inject};
use support::{invocation, outcomes, reported};

const REMAINING: Duration = Duration::from_secs(30);

fn message(id: &str, body: &str) -> SqsMessage {
    let mut m = SqsMessage::default();
    m.message_id = Some(id.into());
    m.body = Some(body.into());
    m.event_source_arn = Some("arn:aws:sqs:eu-west-1:123456789012:orders".into());
    m
}

fn batch(messages: impl IntoIterator<Item = SqsMessage>) -> SqsEvent {
    let mut event = SqsEvent::default();
    event.records.extend(messages);
    event
}

/// The stored record of a message keyed on its `messageId` under the prefix `t`.
async fn stored<S: Store>(
    store: &S,
    message_id: &str,
) -> Option<lambda_idempotency::record::Record> {
    store
        .get(&IdempotencyKey::derive("t", message_id.as_bytes()))
        .await
        .unwrap()
}

fn config() -> Config {
    Config::new().with_key_prefix("t")
}

/// Random letters and digits: they do not compress below 400 KB at this length.
fn incompressible(len: usize) -> String {
    let mut rng = fastrand::Rng::with_seed(42);
    (0..len).map(|_| rng.alphanumeric()).collect()
}

#[tokio::test]
async fn a_result_that_does_not_fit_never_runs_the_handler_again() {
    for (name, result) in [
        ("compressible", "ab".repeat(300_000)),
        ("incompressible", incompressible(700_000)),
    ] {
        let store = InMemoryStore::new();
        let clock = ManualClock::starting_now();
        let runs = Arc::new(AtomicUsize::new(0));
        let layer = IdempotencyLayer::new(store.clone())
            .with_clock(clock.clone())
            .with_config(config());
        let handler = {
            let (runs, result) = (runs.clone(), result.clone());
            move |_m: SqsMessage| {
                let (runs, result) = (runs.clone(), result.clone());
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, std::io::Error>(result)
                }
            }
        };
        let processor = BatchProcessor::new(layer.handler(handler)).with_clock(clock.clone());
        let first = processor
            .process(invocation(
                batch([message("m-1", "{}")]),
                clock.now(),
                REMAINING,
            ))
            .await;
        assert_eq!(outcomes(&first), [Outcome::Executed], "{name}");
        let record = stored(&store, "m-1").await.expect("record");
        assert_eq!(record.status, Status::Completed, "{name}");
        // Redelivered after the lease would have ended: a duplicate, never run again.
        clock.advance(REMAINING + Duration::from_secs(1));
        let second = processor
            .process(invocation(
                batch([message("m-1", "{}")]),
                clock.now(),
                REMAINING,
            ))
            .await;
        assert_eq!(outcomes(&second), [Outcome::Replayed], "{name}");
        assert!(reported(&second).is_empty(), "{name}");
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "{name}: the handler ran again"
        );
        let replayed = second.records[0].value.as_ref();
        if name == "compressible" {
            assert_eq!(
                replayed,
                Some(&result),
                "a compressed result replays in full"
            );
        } else {
            assert_eq!(
                replayed, None,
                "too large even compressed: acknowledged without it"
            );
        }
    }
}

#[derive(Debug, serde::Deserialize)]
struct Unserializable;

impl serde::Serialize for Unserializable {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        Err(serde::ser::Error::custom("no JSON form"))
    }
}

/// A result whose `Serialize` panics (user code, outside the handler).
#[derive(Debug, serde::Deserialize)]
struct PanicsOnSerialize;

impl serde::Serialize for PanicsOnSerialize {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        panic!("cannot serialize")
    }
}

async fn runs_once_with_result<T>(result: fn() -> T)
where
    T: serde::Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    let store = InMemoryStore::new();
    let clock = ManualClock::starting_now();
    let runs = Arc::new(AtomicUsize::new(0));
    let layer = IdempotencyLayer::new(store.clone())
        .with_clock(clock.clone())
        .with_config(config());
    let counter = runs.clone();
    let processor = BatchProcessor::new(layer.handler(move |_m: SqsMessage| {
        let runs = counter.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::io::Error>(result())
        }
    }))
    .with_clock(clock.clone());
    for expected in [Outcome::Executed, Outcome::Replayed] {
        let report = processor
            .process(invocation(
                batch([message("m-1", "{}")]),
                clock.now(),
                REMAINING,
            ))
            .await;
        assert_eq!(outcomes(&report), [expected]);
        clock.advance(REMAINING + Duration::from_secs(1));
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the handler ran again");
    assert_eq!(
        stored(&store, "m-1").await.unwrap().status,
        Status::Completed
    );
}

#[tokio::test]
async fn a_result_that_cannot_be_serialized_never_runs_the_handler_again() {
    runs_once_with_result(|| Unserializable).await;
    // Found in review: a panicking serializer ran outside the handler's panic catch.
    runs_once_with_result(|| PanicsOnSerialize).await;
}

/// A plain handler over `store` that counts its runs and, while `fail` is set, fails.
fn counting<S: Store + Clone>(
    store: S,
    clock: &ManualClock,
    config: Config,
    runs: Arc<AtomicUsize>,
    fail: Arc<AtomicBool>,
) -> BatchProcessor<
    impl tower::Service<
            LambdaEvent<SqsMessage>,
            Response = lambda_idempotency::Processed<String>,
            Error = Error,
        > + Clone,
    ManualClock,
> {
    let layer = IdempotencyLayer::new(store)
        .with_clock(clock.clone())
        .with_config(config);
    BatchProcessor::new(layer.handler(move |m: SqsMessage| {
        let (runs, fail) = (runs.clone(), fail.clone());
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            if fail.load(Ordering::SeqCst) {
                return Err(std::io::Error::other("declined"));
            }
            Ok(m.message_id.unwrap_or_default())
        }
    }))
    .with_clock(clock.clone())
}

struct Rig {
    store: FaultyStore<InMemoryStore>,
    clock: ManualClock,
    runs: Arc<AtomicUsize>,
    fail: Arc<AtomicBool>,
}

impl Rig {
    fn new() -> Self {
        Self {
            store: FaultyStore::new(InMemoryStore::new()),
            clock: ManualClock::starting_now(),
            runs: Arc::default(),
            fail: Arc::default(),
        }
    }

    async fn deliver(&self, config: Config, event: SqsEvent) -> BatchReport<String> {
        counting(
            self.store.clone(),
            &self.clock,
            config,
            self.runs.clone(),
            self.fail.clone(),
        )
        .process(invocation(event, self.clock.now(), REMAINING))
        .await
    }

    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}

#[tokio::test]
async fn a_completion_that_fails_once_is_retried_and_the_handler_runs_once() {
    let rig = Rig::new();
    rig.store.inject(Inject::CompleteFails);
    let first = rig.deliver(config(), batch([message("m-1", "{}")])).await;
    assert_eq!(outcomes(&first), [Outcome::Executed]);
    assert!(reported(&first).is_empty());
    assert_eq!(rig.store.calls.complete.load(Ordering::SeqCst), 2);
    let record = stored(&rig.store, "m-1").await.unwrap();
    assert_eq!(record.status, Status::Completed);
    rig.clock.advance(REMAINING + Duration::from_secs(1));
    let again = rig.deliver(config(), batch([message("m-1", "{}")])).await;
    assert_eq!(outcomes(&again), [Outcome::Replayed]);
    assert_eq!(rig.runs(), 1);
}

#[tokio::test]
async fn a_completion_whose_answer_was_lost_is_recognised_as_ours() {
    let rig = Rig::new();
    rig.store.inject(Inject::CompleteResent);
    let first = rig.deliver(config(), batch([message("m-1", "{}")])).await;
    assert_eq!(outcomes(&first), [Outcome::Executed]);
    assert!(reported(&first).is_empty());
    assert_eq!(rig.runs(), 1);
    assert_eq!(
        stored(&rig.store, "m-1").await.unwrap().status,
        Status::Completed
    );
}

#[tokio::test]
async fn an_acquire_whose_answer_was_lost_holds_our_lease() {
    let rig = Rig::new();
    rig.store.inject(Inject::AcquireResent);
    let first = rig.deliver(config(), batch([message("m-1", "{}")])).await;
    assert_eq!(
        outcomes(&first),
        [Outcome::Executed],
        "not locked by ourselves"
    );
    assert_eq!(rig.runs(), 1);
    let record = stored(&rig.store, "m-1").await.unwrap();
    assert_eq!(record.status, Status::Completed);
}

#[tokio::test]
async fn an_acquire_that_failed_after_it_was_applied_is_released() {
    let rig = Rig::new();
    rig.store.inject(Inject::AcquireFailsAfterApply);
    let first = rig.deliver(config(), batch([message("m-1", "{}")])).await;
    assert_eq!(outcomes(&first), [Outcome::StoreUnavailable]);
    assert_eq!(reported(&first), ["m-1"]);
    assert_eq!(rig.runs(), 0, "no handler without its lease");
    assert_eq!(rig.store.calls.release.load(Ordering::SeqCst), 1);
    assert!(
        stored(&rig.store, "m-1").await.is_none(),
        "no lease held by nobody"
    );
    // Redelivered at once (no waiting for the deadline): it runs.
    let again = rig.deliver(config(), batch([message("m-1", "{}")])).await;
    assert_eq!(outcomes(&again), [Outcome::Executed]);
    assert_eq!(rig.runs(), 1);
}

#[tokio::test]
async fn a_permanent_failure_with_a_huge_message_is_stored_cut_to_fit() {
    let store = InMemoryStore::new();
    let clock = ManualClock::starting_now();
    let runs = Arc::new(AtomicUsize::new(0));
    let layer = IdempotencyLayer::new(store.clone())
        .with_clock(clock.clone())
        .with_config(config().with_stored_failure_messages(true));
    let counter = runs.clone();
    let processor = BatchProcessor::new(layer.handler(move |_m: SqsMessage| {
        let runs = counter.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>(Permanent::new("x".repeat(500 * 1024)))
        }
    }))
    .with_clock(clock.clone());
    for replayed in [false, true] {
        let report = processor
            .process(invocation(
                batch([message("m-1", "{}")]),
                clock.now(),
                REMAINING,
            ))
            .await;
        assert_eq!(outcomes(&report), [Outcome::FailedPermanently]);
        assert!(reported(&report).is_empty());
        match report.records[0].error.as_ref() {
            Some(Error::Permanent {
                message,
                replayed: r,
            }) => {
                assert_eq!(*r, replayed);
                // This delivery's own error has the whole message; the stored one is cut.
                if replayed {
                    assert!(
                        message.len() <= lambda_idempotency::idempotent::MAX_STORED_FAILURE_BYTES
                    );
                } else {
                    assert_eq!(message.len(), 500 * 1024);
                }
            }
            other => panic!("unexpected {other:?}"),
        }
        clock.advance(REMAINING + Duration::from_secs(1));
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let record = stored(&store, "m-1").await.unwrap();
    assert_eq!(record.status, Status::Failed);
    let data = record.data.unwrap_or_default();
    assert!(
        data.len() <= lambda_idempotency::idempotent::MAX_STORED_FAILURE_BYTES + 2,
        "{}",
        data.len()
    );
}

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

#[tokio::test]
async fn json_types_and_big_numbers_are_different_keys() {
    let rig = Rig::new();
    let bodies = [
        r#"{"id":"1"}"#,
        r#"{"id":1}"#,
        r#"{"id":"true"}"#,
        r#"{"id":true}"#,
        r#"{"id":"[1,2]"}"#,
        r#"{"id":[1,2]}"#,
        r#"{"id":18446744073709551616}"#,
        r#"{"id":18446744073709551617}"#,
    ];
    let layer = IdempotencyLayer::new(rig.store.clone())
        .with_clock(rig.clock.clone())
        .with_config(config())
        .with_key(JsonPointer::new("/id"));
    let runs = rig.runs.clone();
    let keyed = BatchProcessor::new(layer.handler(move |_m: SqsMessage| {
        let runs = runs.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::io::Error>(())
        }
    }))
    .with_clock(rig.clock.clone());
    for (i, body) in bodies.iter().enumerate() {
        let report = keyed
            .process(invocation(
                batch([message(&format!("m-{i}"), body)]),
                rig.clock.now(),
                REMAINING,
            ))
            .await;
        assert_eq!(outcomes(&report), [Outcome::Executed], "{body}");
    }
    assert_eq!(rig.runs(), bodies.len());
}

#[tokio::test]
async fn an_attribute_and_a_body_field_with_the_same_text_are_one_key() {
    let store = InMemoryStore::new();
    let clock = ManualClock::starting_now();
    let runs = Arc::new(AtomicUsize::new(0));
    let key = MessageAttribute::new("Idempotency-Key").or(JsonPointer::new("/eventId"));
    let layer = IdempotencyLayer::new(store)
        .with_clock(clock.clone())
        .with_config(config())
        .with_key(key);
    let counter = runs.clone();
    let processor = BatchProcessor::new(layer.handler(move |_m: SqsMessage| {
        let runs = counter.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::io::Error>(())
        }
    }))
    .with_clock(clock.clone());
    let mut by_attribute = message("m-1", "{}");
    let mut attribute = SqsMessageAttribute::default();
    attribute.string_value = Some("evt-9".into());
    attribute.data_type = Some("String".into());
    by_attribute
        .message_attributes
        .insert("Idempotency-Key".into(), attribute);
    let by_field = message("m-2", r#"{"eventId":"evt-9"}"#);
    let report = processor
        .process(invocation(batch([by_attribute]), clock.now(), REMAINING))
        .await;
    assert_eq!(outcomes(&report), [Outcome::Executed]);
    let report = processor
        .process(invocation(batch([by_field]), clock.now(), REMAINING))
        .await;
    assert_eq!(outcomes(&report), [Outcome::Replayed]);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn tampered_numbers_past_f64_precision_are_rejected() {
    for (original, tampered) in [
        (
            r#"{"id":"e-1","amount":0.1}"#,
            r#"{"id":"e-1","amount":0.10000000000000000001}"#,
        ),
        (
            r#"{"id":"e-2","amount":18446744073709551616}"#,
            r#"{"id":"e-2","amount":18446744073709551617}"#,
        ),
        (
            r#"{"id":"e-3","amount":123456789012345678901}"#,
            r#"{"id":"e-3","amount":123456789012345678902}"#,
        ),
    ] {
        let store = InMemoryStore::new();
        let clock = ManualClock::starting_now();
        let layer = IdempotencyLayer::new(store)
            .with_clock(clock.clone())
            .with_key(JsonPointer::new("/id"))
            .with_config(config().with_payload_validation(PayloadValidation::Body));
        let processor = BatchProcessor::new(
            layer.handler(|_m: SqsMessage| async { Ok::<_, std::io::Error>(()) }),
        )
        .with_clock(clock.clone());
        let first = processor
            .process(invocation(
                batch([message("m-1", original)]),
                clock.now(),
                REMAINING,
            ))
            .await;
        assert_eq!(outcomes(&first), [Outcome::Executed]);
        let second = processor
            .process(invocation(
                batch([message("m-2", tampered)]),
                clock.now(),
                REMAINING,
            ))
            .await;
        assert_eq!(outcomes(&second), [Outcome::Rejected], "{tampered}");
    }
}

#[tokio::test]
async fn a_record_hashed_in_the_old_format_still_replays_its_own_payload() {
    use lambda_idempotency::store::{AcquireRequest, CompleteRequest};
    let store = InMemoryStore::new();
    let clock = ManualClock::starting_now();
    let body = r#"{"id":"e-1","amount":25}"#;
    // What an earlier version stored: SHA-256 of the sorted JSON, without the `v2:` prefix.
    let legacy = sha256_hex(br#"{"amount":25,"id":"e-1"}"#);
    let key = IdempotencyKey::derive("t", b"e-1");
    let owner = OwnerToken::generate();
    let now = clock.now();
    store
        .acquire(&AcquireRequest {
            key: key.clone(),
            owner: owner.clone(),
            now,
            lease_expiration_ms: lambda_idempotency::clock::epoch_ms(now + REMAINING),
            expiration_secs: lambda_idempotency::clock::epoch_secs(now + Duration::from_secs(3600)),
            validation: Some(legacy),
        })
        .await
        .unwrap();
    store
        .complete(&CompleteRequest {
            key,
            owner,
            status: Status::Completed,
            data: "null".into(),
            expiration_secs: lambda_idempotency::clock::epoch_secs(now + Duration::from_secs(3600)),
        })
        .await
        .unwrap();
    let layer = IdempotencyLayer::new(store)
        .with_clock(clock.clone())
        .with_key(JsonPointer::new("/id"))
        .with_config(config().with_payload_validation(PayloadValidation::Body));
    let processor =
        BatchProcessor::new(layer.handler(|_m: SqsMessage| async { Ok::<_, std::io::Error>(()) }))
            .with_clock(clock.clone());
    let same = processor
        .process(invocation(
            batch([message("m-1", body)]),
            clock.now(),
            REMAINING,
        ))
        .await;
    assert_eq!(outcomes(&same), [Outcome::Replayed]);
    let other = processor
        .process(invocation(
            batch([message("m-2", r#"{"id":"e-1","amount":26}"#)]),
            clock.now(),
            REMAINING,
        ))
        .await;
    assert_eq!(outcomes(&other), [Outcome::Rejected]);
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[tokio::test]
async fn a_second_record_with_the_same_key_and_another_payload_is_rejected() {
    let rig = Rig::new();
    rig.fail.store(true, Ordering::SeqCst);
    let layer = IdempotencyLayer::new(rig.store.clone())
        .with_clock(rig.clock.clone())
        .with_key(JsonPointer::new("/id"))
        .with_config(config().with_payload_validation(PayloadValidation::Body));
    let (runs, fail) = (rig.runs.clone(), rig.fail.clone());
    let processor = BatchProcessor::new(layer.handler(move |_m: SqsMessage| {
        let (runs, fail) = (runs.clone(), fail.clone());
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            if fail.load(Ordering::SeqCst) {
                return Err(std::io::Error::other("declined"));
            }
            Ok(())
        }
    }))
    .with_clock(rig.clock.clone());
    let report = processor
        .process(invocation(
            batch([
                message("m-1", r#"{"id":"e-1","amount":1}"#),
                message("m-2", r#"{"id":"e-1","amount":1}"#),
                message("m-3", r#"{"id":"e-1","amount":2}"#),
            ]),
            rig.clock.now(),
            REMAINING,
        ))
        .await;
    assert_eq!(
        outcomes(&report),
        [Outcome::Failed, Outcome::Failed, Outcome::Rejected]
    );
    assert!(matches!(
        report.records[1].error,
        Some(Error::SameKeyFailed { .. })
    ));
    assert!(matches!(
        report.records[2].error,
        Some(Error::PayloadMismatch { .. })
    ));
    assert_eq!(rig.runs(), 1);
}

#[tokio::test]
async fn a_heartbeat_that_finds_the_lease_lost_cancels_the_handler() {
    let rig = Rig::new();
    rig.store.inject(Inject::ExtendLeaseLost);
    let finished = Arc::new(AtomicBool::new(false));
    let layer = IdempotencyLayer::new(rig.store.clone())
        .with_clock(rig.clock.clone())
        .with_config(config().with_heartbeat(Duration::from_secs(3), Duration::from_millis(20)));
    let done = finished.clone();
    let processor = BatchProcessor::new(layer.handler(move |_m: SqsMessage| {
        let done = done.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            done.store(true, Ordering::SeqCst);
            Ok::<_, std::io::Error>(())
        }
    }))
    .with_clock(rig.clock.clone());
    let report = processor
        .process(invocation(
            batch([message("m-1", "{}")]),
            rig.clock.now(),
            REMAINING,
        ))
        .await;
    assert_eq!(outcomes(&report), [Outcome::LeaseLost]);
    assert_eq!(reported(&report), ["m-1"]);
    assert!(
        !finished.load(Ordering::SeqCst),
        "the handler ran on without its lease"
    );
    assert_eq!(rig.store.calls.complete.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_slow_heartbeat_does_not_hold_the_handler_back() {
    let rig = Rig::new();
    rig.store.inject(Inject::ExtendSlow(Duration::from_secs(2)));
    let layer = IdempotencyLayer::new(rig.store.clone())
        .with_clock(rig.clock.clone())
        .with_config(config().with_heartbeat(Duration::from_secs(3), Duration::from_millis(50)));
    let processor = BatchProcessor::new(layer.handler(|_m: SqsMessage| async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        Ok::<_, std::io::Error>(())
    }))
    .with_clock(rig.clock.clone());
    let started = Instant::now();
    let report = processor
        .process(invocation(
            batch([message("m-1", "{}")]),
            rig.clock.now(),
            REMAINING,
        ))
        .await;
    let took = started.elapsed();
    assert_eq!(outcomes(&report), [Outcome::Executed]);
    assert!(took < Duration::from_secs(1), "took {took:?}");
    assert!(rig.store.calls.extend.load(Ordering::SeqCst) >= 1);
}

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

#[test]
fn keys_are_derived_the_same_way_as_documented() {
    // The stored key is the prefix and the SHA-256 of the material: the material of a
    // string field is its text, so the two extractors above agree.
    let material = JsonPointer::new("/eventId")
        .key_material(&message("m", r#"{"eventId":"evt-9"}"#))
        .unwrap();
    assert_eq!(material, b"evt-9");
}

/// A transactional handler over the embedded store crediting `acct-1` with 5 in `ledger`.
fn ledger_credit(
    store: &InMemoryStore,
    clock: &ManualClock,
    mode: lambda_idempotency::IdempotencyMode,
    runs: Arc<AtomicUsize>,
    broken: Arc<AtomicBool>,
) -> BatchProcessor<
    impl tower::Service<
            LambdaEvent<SqsMessage>,
            Response = lambda_idempotency::Processed<u32>,
            Error = Error,
        > + Clone,
    ManualClock,
> {
    use lambda_idempotency::store::{Attr, Write};
    use lambda_idempotency::Completion;
    let layer = IdempotencyLayer::new(store.clone())
        .with_clock(clock.clone())
        .with_config(config().with_mode(mode));
    BatchProcessor::new(layer.clone().with_writes().handler(move |_m: SqsMessage| {
        let (runs, broken) = (runs.clone(), broken.clone());
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            if broken.load(Ordering::SeqCst) {
                return Err(std::io::Error::other("downstream is down"));
            }
            let credit = Write::update("ledger", [("account", Attr::s("acct-1"))], "ADD #b :a")
                .name("#b", "balance")
                .value(":a", Attr::n(5));
            Ok(Completion::new(5u32).with_write(credit))
        }
    }))
    .with_clock(clock.clone())
}

fn balance(store: &InMemoryStore) -> String {
    use lambda_idempotency::store::Attr;
    let key = [("account".to_string(), Attr::s("acct-1"))].into();
    match store
        .item("ledger", &key)
        .and_then(|i| i.get("balance").cloned())
    {
        Some(Attr::N(n)) => n,
        other => format!("{other:?}"),
    }
}

#[tokio::test]
async fn transactional_handlers_commit_once_on_the_embedded_store_in_both_modes() {
    use lambda_idempotency::IdempotencyMode;
    for mode in [IdempotencyMode::Lease, IdempotencyMode::Optimistic] {
        let store = InMemoryStore::new();
        store.define_table("ledger", &["account"]);
        let clock = ManualClock::starting_now();
        let (runs, broken) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let processor = ledger_credit(&store, &clock, mode, runs.clone(), broken.clone());
        let deliver = || {
            processor.process(invocation(
                batch([message("m-1", "{}")]),
                clock.now(),
                REMAINING,
            ))
        };
        assert_eq!(outcomes(&deliver().await), [Outcome::Executed], "{mode:?}");
        assert_eq!(balance(&store), "5", "{mode:?}");
        // A redelivered duplicate whose handler now fails is still a duplicate.
        broken.store(true, Ordering::SeqCst);
        let again = deliver().await;
        assert_eq!(outcomes(&again), [Outcome::Replayed], "{mode:?}");
        assert!(reported(&again).is_empty(), "{mode:?}");
        assert_eq!(balance(&store), "5", "{mode:?}");
        let expected_runs = if mode == IdempotencyMode::Lease { 1 } else { 2 };
        assert_eq!(runs.load(Ordering::SeqCst), expected_runs, "{mode:?}");
    }
}

#[tokio::test]
async fn a_heartbeat_that_cannot_confirm_the_lease_before_it_ends_cancels_the_handler() {
    // Real time here: the lease lapses by the wall clock while the extension hangs.
    let store = FaultyStore::new(InMemoryStore::new());
    store.inject(Inject::ExtendSlow(Duration::from_secs(5)));
    let finished = Arc::new(AtomicBool::new(false));
    let layer = IdempotencyLayer::new(store.clone()).with_config(
        config().with_heartbeat(Duration::from_millis(300), Duration::from_millis(50)),
    );
    let done = finished.clone();
    let processor = BatchProcessor::new(layer.handler(move |_m: SqsMessage| {
        let done = done.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            done.store(true, Ordering::SeqCst);
            Ok::<_, std::io::Error>(())
        }
    }));
    let started = Instant::now();
    let report = processor
        .process(invocation(
            batch([message("m-1", "{}")]),
            std::time::SystemTime::now(),
            REMAINING,
        ))
        .await;
    assert_eq!(outcomes(&report), [Outcome::LeaseLost]);
    assert!(
        !finished.load(Ordering::SeqCst),
        "the handler ran on unleased"
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(store.calls.complete.load(Ordering::SeqCst), 0);
}
