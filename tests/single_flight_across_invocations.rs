//! The single flight across concurrent invocations of one process (`run_concurrent`): a
//! record waiting for another invocation's record with the same key is answered from it
//! only when that answer belongs to it, waits for a lease this process holds instead of
//! being reported `locked`, and never waits past its own answer margin or past the
//! leader's deadline. Each test failed on the code before its fix (found in review).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::batch::{BatchProcessor, BatchRecord};
use lambda_idempotency::clock::{Clock, ManualClock};
use lambda_idempotency::key::JsonPointer;
use lambda_idempotency::key::PayloadValidation;
use lambda_idempotency::record::Status;
use lambda_idempotency::store::InMemoryStore;
use lambda_idempotency::testing::{invocation, invocation_at};
use lambda_idempotency::{Config, IdempotencyLayer, Outcome};
use lambda_idempotency_test_support::{error_types, outcomes, reported};
use tower::ServiceExt;

const REMAINING: Duration = Duration::from_secs(30);

fn message(id: &str, body: &str, receives: u32) -> SqsMessage {
    let mut m = SqsMessage::default();
    m.message_id = Some(id.into());
    m.body = Some(body.into());
    m.attributes
        .insert("ApproximateReceiveCount".into(), receives.to_string());
    m
}

fn batch(messages: Vec<SqsMessage>) -> SqsEvent {
    let mut event = SqsEvent::default();
    event.records = messages;
    event
}

/// Invocation A's handler fails (retryably) for key "k" while invocation B, with a record of
/// the same key, waits for it. A's failure is A's batch's: B runs the handler itself (A
/// released its lease), rather than failing as `SameKeyFailed` (`rejected` as a payload
/// mismatch, when B's body differs) without running. Both bodies are tried.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_handler_failure_in_one_invocation_does_not_answer_another() {
    for (body_b, stored_b) in [(r#"{"key":"k","n":1}"#, 1), (r#"{"key":"k","n":2}"#, 1)] {
        let store = InMemoryStore::new();
        let calls = Arc::new(AtomicUsize::new(0));
        // Keyed by `/key`, payload hashes on; the handler's first call fails (retryably).
        let layer = IdempotencyLayer::new(store.clone())
            .with_key(JsonPointer::new("/key"))
            .with_config(
                Config::new()
                    .with_key_prefix("flight")
                    .with_payload_validation(PayloadValidation::Body),
            );
        let c = calls.clone();
        let processor = BatchProcessor::new(layer.handler(move |_m: SqsMessage| {
            let calls = c.clone();
            async move {
                let n = calls.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(300)).await;
                if n == 0 {
                    return Err(std::io::Error::other("transient: the first call fails"));
                }
                Ok::<_, std::io::Error>(1u8)
            }
        }));
        let a = tokio::spawn({
            let p = processor.clone();
            let ev = invocation(
                batch(vec![message("a-1", r#"{"key":"k","n":1}"#, 1)]),
                REMAINING,
            );
            async move { p.process(ev).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let b = processor
            .process(invocation(
                batch(vec![message("b-1", body_b, 1)]),
                REMAINING,
            ))
            .await;
        let a = a.await.unwrap();
        assert_eq!(outcomes(&a), [Outcome::Failed], "{body_b}");
        assert_eq!(reported(&a), ["a-1"]);
        assert_eq!(
            outcomes(&b),
            [Outcome::Executed],
            "{body_b}: {:?}",
            error_types(&b)
        );
        assert!(reported(&b).is_empty());
        assert_eq!(calls.load(Ordering::SeqCst), 2, "{body_b}: A once, B once");
        let records = store.records();
        assert_eq!(records.len(), stored_b);
        assert_eq!(records[0].status, Status::Completed);
    }
}

/// Invocation A is running key "k" (its lease held, its handler slow) when invocation B gets
/// the same message redelivered (`ApproximateReceiveCount` 2). The pre-check finds A's live
/// lease, but A runs in this process: B waits for it and replays its result (README), rather
/// than being reported `locked` until A's lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redelivered_record_waits_for_the_lease_of_an_invocation_in_this_process() {
    let store = InMemoryStore::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let layer = IdempotencyLayer::new(store.clone())
        .with_key(JsonPointer::new("/key"))
        .with_config(Config::new().with_key_prefix("flight").with_local_cache(16));
    let c = calls.clone();
    let processor = BatchProcessor::new(layer.handler(move |_m: SqsMessage| {
        let calls = c.clone();
        async move {
            calls.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok::<_, std::io::Error>(7u8)
        }
    }));
    let a = tokio::spawn({
        let p = processor.clone();
        let ev = invocation(batch(vec![message("m-1", r#"{"key":"k"}"#, 1)]), REMAINING);
        async move { p.process(ev).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let b = processor
        .process(invocation(
            batch(vec![message("m-1", r#"{"key":"k"}"#, 2)]),
            REMAINING,
        ))
        .await;
    let a = a.await.unwrap();
    assert_eq!(outcomes(&a), [Outcome::Executed]);
    assert_eq!(outcomes(&b), [Outcome::Replayed], "{:?}", error_types(&b));
    assert!(reported(&a).is_empty() && reported(&b).is_empty());
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(store.records()[0].status, Status::Completed);
}

/// A service keyed by `/key` on `clock`, whose handler's first call never ends; `calls`
/// counts every call.
fn first_call_hangs<C: Clock + Clone>(
    clock: &C,
    calls: &Arc<AtomicUsize>,
) -> impl tower::Service<
    BatchRecord<SqsMessage>,
    Response = lambda_idempotency::Processed<u8>,
    Error = lambda_idempotency::Error,
    Future = impl Send,
> + Clone
       + Send
       + 'static {
    let calls = calls.clone();
    IdempotencyLayer::new(InMemoryStore::new())
        .with_key(JsonPointer::new("/key"))
        .with_clock(clock.clone())
        .with_config(Config::new().with_key_prefix("flight"))
        .handler(move |_m: SqsMessage| {
            let calls = calls.clone();
            async move {
                if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                    std::future::pending::<()>().await;
                }
                Ok::<_, std::io::Error>(1u8)
            }
        })
}

/// Starts record "a" of key "k" on `service` (made by `first_call_hangs`), its deadline
/// `remaining` away, and waits until its handler runs (and hangs).
async fn hung_leader<S, C: Clock>(
    service: &S,
    clock: &C,
    calls: &AtomicUsize,
    remaining: Duration,
) -> tokio::task::JoinHandle<Result<S::Response, S::Error>>
where
    S: tower::Service<BatchRecord<SqsMessage>> + Clone + Send + 'static,
    S::Future: Send,
    S::Response: Send + 'static,
    S::Error: Send + 'static,
{
    let first = message("a", r#"{"key":"k"}"#, 1);
    let leader = tokio::spawn(service.clone().oneshot(BatchRecord::from(invocation_at(
        first,
        clock.now(),
        remaining,
    ))));
    while calls.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    leader
}

/// Outside a batch processor (a direct invocation, an HTTP request), a record waiting for
/// another of this process with the same key answers "in progress" 500 ms before its own
/// deadline, as a batch does, not at the deadline, when Lambda has timed it out already.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_outside_a_batch_answers_before_its_deadline() {
    let clock = ManualClock::at_epoch_ms(1_700_000_000_000);
    let calls = Arc::new(AtomicUsize::new(0));
    let service = first_call_hangs(&clock, &calls);
    let now: SystemTime = clock.now();
    let leader = hung_leader(&service, &clock, &calls, Duration::from_secs(60)).await;
    let follower = tokio::spawn(service.clone().oneshot(BatchRecord::from(invocation_at(
        message("b", r#"{"key":"k"}"#, 1),
        now,
        Duration::from_secs(10),
    ))));
    clock.advance(Duration::from_millis(9_000));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !follower.is_finished(),
        "answered a second before its deadline"
    );
    clock.advance(Duration::from_millis(500));
    let answer = tokio::time::timeout(Duration::from_secs(5), follower)
        .await
        .expect("answered 500 ms before its deadline")
        .unwrap();
    assert_eq!(
        answer.map(|p| p.outcome()).map_err(|e| e.error_type()),
        Err("Idempotency.InProgress")
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    leader.abort();
}

/// Outside a batch processor nothing ends a leader at its deadline. Once the deadline has
/// passed (its lease is over in the store), a new request for the key in this process does
/// not wait for that leader until its own deadline: it goes to the store, takes the lapsed
/// lease over and runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_past_its_deadline_does_not_hold_the_key_in_this_process() {
    let clock = ManualClock::at_epoch_ms(1_700_000_000_000);
    let calls = Arc::new(AtomicUsize::new(0));
    let service = first_call_hangs(&clock, &calls);
    let leader = hung_leader(&service, &clock, &calls, Duration::from_secs(10)).await;
    clock.advance(Duration::from_secs(15));
    let later = service.clone().oneshot(BatchRecord::from(invocation_at(
        message("c", r#"{"key":"k"}"#, 1),
        clock.now(),
        Duration::from_secs(10),
    )));
    let answer = tokio::time::timeout(Duration::from_secs(5), later)
        .await
        .expect("answered without waiting for its deadline");
    assert_eq!(
        answer.map(|p| p.outcome()).map_err(|e| e.error_type()),
        Ok(Outcome::Executed)
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    leader.abort();
}

/// Two records of one batch with the same key wait for another invocation's record, whose
/// handler fails (retryably): the batch still runs the key once, the other record replaying
/// it. (Found in re-review: both left for the store on their own.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn records_of_one_batch_run_their_key_once_after_another_invocations_failure() {
    let (store, runs) = (InMemoryStore::new(), Arc::new(AtomicUsize::new(0)));
    let layer = IdempotencyLayer::new(store.clone())
        .with_key(JsonPointer::new("/key"))
        .with_config(Config::new().with_key_prefix("flight"));
    let r = runs.clone();
    let processor = BatchProcessor::new(layer.handler(move |m: SqsMessage| {
        let runs = r.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(300)).await;
            match m.message_id.as_deref() {
                Some("a-1") => Err(std::io::Error::other("transient")),
                _ => Ok(1u8),
            }
        }
    }));
    key_runs_once_after_a_failure("plain handler", processor, &store, &runs).await;
}

/// Invocation A (record a-1, key "k") fails in its handler while invocation B's two records
/// with key "k" wait for it: B runs the key once, the other record replaying it.
async fn key_runs_once_after_a_failure<S>(
    label: &str,
    processor: BatchProcessor<S>,
    store: &InMemoryStore,
    runs: &AtomicUsize,
) where
    S: tower::Service<
            lambda_idempotency::batch::BatchRecord<SqsMessage>,
            Response = lambda_idempotency::Processed<u8>,
            Error = lambda_idempotency::Error,
        > + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send,
{
    let a = tokio::spawn({
        let p = processor.clone();
        let ev = invocation(batch(vec![message("a-1", r#"{"key":"k"}"#, 1)]), REMAINING);
        async move { p.process(ev).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let pair = vec![
        message("b-1", r#"{"key":"k"}"#, 1),
        message("b-2", r#"{"key":"k"}"#, 1),
    ];
    let b = processor.process(invocation(batch(pair), REMAINING)).await;
    assert_eq!(outcomes(&a.await.unwrap()), [Outcome::Failed], "{label}");
    let mut seen = outcomes(&b);
    seen.sort_by_key(|o| format!("{o:?}"));
    assert_eq!(
        seen,
        [Outcome::Executed, Outcome::Replayed],
        "{label}: {:?}",
        error_types(&b)
    );
    assert!(reported(&b).is_empty(), "{label}");
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "{label}: a-1, then the key once in B"
    );
    assert_eq!(store.records()[0].status, Status::Completed);
}

/// Two records of one batch with the same key arrive after another record of this process
/// with that key ran past its deadline (a direct call no batch cut off): one takes the lapsed
/// lease over and runs, the other replays it. A record waking at exactly that deadline does
/// not meet the still-live lease: it waits a millisecond more.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn records_of_one_batch_run_their_key_once_after_a_leader_past_its_deadline() {
    let clock = ManualClock::at_epoch_ms(1_700_000_000_000);
    let calls = Arc::new(AtomicUsize::new(0));
    let service = first_call_hangs(&clock, &calls);
    let leader = hung_leader(&service, &clock, &calls, Duration::from_secs(10)).await;
    let processor = BatchProcessor::new(service).with_clock(clock.clone());
    let pair = vec![
        message("b-1", r#"{"key":"k"}"#, 1),
        message("b-2", r#"{"key":"k"}"#, 1),
    ];
    let event = invocation_at(batch(pair), clock.now(), REMAINING);
    let b = tokio::spawn(async move { processor.process(event).await });
    clock.advance(Duration::from_secs(10));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !b.is_finished(),
        "answered at the leader's deadline, its lease still live"
    );
    clock.advance(Duration::from_millis(1));
    let b = tokio::time::timeout(Duration::from_secs(5), b)
        .await
        .unwrap()
        .unwrap();
    let mut seen = outcomes(&b);
    seen.sort_by_key(|o| format!("{o:?}"));
    assert_eq!(
        seen,
        [Outcome::Executed, Outcome::Replayed],
        "{:?}",
        error_types(&b)
    );
    assert!(reported(&b).is_empty());
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "the hung call, then the key once in B"
    );
    leader.abort();
}

/// A record that arrives within the last millisecond of a hung leader's lease (a clock with
/// sub-millisecond precision, as the system's) follows it until the lease is over, then
/// runs, rather than leading at once and meeting the live lease. (Found in review.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_record_joining_in_the_leaders_last_millisecond_waits_for_its_lease_to_end() {
    let t0_ms: u64 = 1_700_000_000_000;
    let nanos = Arc::new(std::sync::atomic::AtomicU64::new(t0_ms * 1_000_000));
    let n = nanos.clone();
    let clock = move || SystemTime::UNIX_EPOCH + Duration::from_nanos(n.load(Ordering::SeqCst));
    let calls = Arc::new(AtomicUsize::new(0));
    let service = first_call_hangs(&clock, &calls);
    let a = hung_leader(&service, &clock, &calls, Duration::from_secs(10)).await;
    // Half a millisecond past A's deadline: its lease (to the deadline's millisecond) is live.
    nanos.store((t0_ms + 10_000) * 1_000_000 + 500_000, Ordering::SeqCst);
    let second = message("b", r#"{"key":"k"}"#, 1);
    let b = tokio::spawn(service.oneshot(BatchRecord::from(invocation_at(
        second,
        clock(),
        Duration::from_secs(60),
    ))));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !b.is_finished(),
        "answered while the leader's lease was live"
    );
    nanos.store((t0_ms + 10_001) * 1_000_000, Ordering::SeqCst);
    let answer = tokio::time::timeout(Duration::from_secs(2), b)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        answer.map(|p| p.outcome()).map_err(|e| e.error_type()),
        Ok(Outcome::Executed)
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    a.abort();
}

/// The same with a handler with writes, under both commit strategies (the case the test
/// above names: in optimistic mode both records ran the handler).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn records_with_writes_of_one_batch_run_their_key_once_after_another_invocations_failure() {
    use lambda_idempotency::{CommitStrategy, Completion};
    for mode in [CommitStrategy::Optimistic, CommitStrategy::Lease] {
        let (store, runs) = (InMemoryStore::new(), Arc::new(AtomicUsize::new(0)));
        let layer = IdempotencyLayer::new(store.clone())
            .with_key(JsonPointer::new("/key"))
            .with_config(Config::new().with_key_prefix("flight"))
            .with_writes()
            .with_commit(mode);
        let r = runs.clone();
        let processor = BatchProcessor::new(layer.handler(move |m: SqsMessage| {
            let runs = r.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(300)).await;
                match m.message_id.as_deref() {
                    Some("a-1") => Err(std::io::Error::other("transient")),
                    _ => Ok(Completion::new(1u8)),
                }
            }
        }));
        key_runs_once_after_a_failure(&format!("{mode:?}"), processor, &store, &runs).await;
    }
}
