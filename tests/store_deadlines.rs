//! Every store call follows the invocation deadline, whatever the store's client is
//! configured with: a call that hangs is cut at the call margin (100 ms before the deadline)
//! and treated as an answer that was lost; a call without time for an answer is not sent; a
//! handler that returns inside a batch's answer margin still stores its result when it runs
//! outside a batch; a batch whose invocation cannot fit even one record fails once, naming
//! both figures, instead of reporting every record `deadline_near` until its messages are
//! dead-lettered.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use aws_lambda_events::sqs::SqsMessage;
use lambda_idempotency::batch::{BatchError, BatchProcessor, BatchRecord};
use lambda_idempotency::clock::epoch_ms;
use lambda_idempotency::clock::CALL_MARGIN;
use lambda_idempotency::key::IdempotencyKey;
use lambda_idempotency::record::Status;
use lambda_idempotency::store::{InMemoryStore, Store};
use lambda_idempotency::testing::events::{sqs_event, sqs_message};
use lambda_idempotency::{Config, Error, IdempotencyLayer, Outcome, Processed};
use lambda_idempotency_test_support as support;
use lambda_runtime::LambdaEvent;
use support::faulty_store::{FaultyStore, Inject};
use tower::ServiceExt;

/// An idempotent handler on `store` that counts its runs, keyed by `messageId`.
fn handler(
    store: &FaultyStore<InMemoryStore>,
    runs: &Arc<AtomicUsize>,
) -> impl tower::Service<
    BatchRecord<SqsMessage>,
    Response = Processed<usize>,
    Error = Error,
    Future = impl Send,
> + Clone
       + Send
       + Sync
       + 'static {
    let runs = runs.clone();
    IdempotencyLayer::new(store.clone())
        .with_config(Config::new().with_key_prefix("deadlines"))
        .handler(move |_: SqsMessage| {
            let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
            std::future::ready(Ok::<_, std::io::Error>(run))
        })
}

/// One delivery of message `m-1` with `remaining` before its deadline, outside a batch (a
/// direct call of the per-record service, as an invocation or an HTTP request makes), bounded
/// by the test at 10 s: without the deadline's bound it would wait on the store for ever.
async fn deliver<S>(service: S, remaining: Duration) -> (Result<Processed<usize>, Error>, Duration)
where
    S: tower::Service<BatchRecord<SqsMessage>, Response = Processed<usize>, Error = Error>,
{
    let context = support::context_at(SystemTime::now(), remaining);
    // A record of no batch: the direct call.
    let event = BatchRecord::from(LambdaEvent::new(sqs_message("m-1", "1"), context));
    let started = Instant::now();
    let answer = tokio::time::timeout(Duration::from_secs(10), service.oneshot(event))
        .await
        .expect("the call must end at the invocation's call margin, not wait on the store");
    (answer, started.elapsed())
}

fn key() -> IdempotencyKey {
    IdempotencyKey::derive("deadlines", b"m-1")
}

/// (Found failing before the fix: the call waited on the hung store until the test's own
/// 10 s timeout.)
#[tokio::test]
async fn a_hung_acquire_is_cut_at_the_call_margin_and_its_lease_ends_at_the_deadline() {
    let store = FaultyStore::new(InMemoryStore::new());
    let runs = Arc::new(AtomicUsize::new(0));
    store.inject(Inject::AcquireHangs);
    let remaining = Duration::from_millis(1_500);
    let deadline_ms = epoch_ms(SystemTime::now() + remaining);
    let (answer, took) = deliver(handler(&store, &runs), remaining).await;
    let err = answer.unwrap_err();
    assert_eq!(err.error_type(), "Idempotency.DeadlineReached", "{err:?}");
    assert_eq!(err.outcome(), Outcome::DeadlineNear);
    assert!(
        took >= remaining - CALL_MARGIN - Duration::from_millis(20)
            && took < remaining - CALL_MARGIN + Duration::from_millis(90),
        "answered after {took:?}"
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "no handler without its lease"
    );
    // The acquire was applied and its answer lost: no time was left to release it, so the
    // lease is held by nobody until the deadline, then taken over.
    assert_eq!(store.calls.release.load(Ordering::SeqCst), 0);
    let held = store
        .inner
        .get(&key())
        .await
        .unwrap()
        .expect("the applied acquire");
    assert_eq!(held.status, Status::InProgress);
    assert!(held.lease_expiration_ms.unwrap() <= deadline_ms + 1);
    let (locked, _) = deliver(handler(&store, &runs), Duration::from_secs(30)).await;
    assert!(
        matches!(locked, Err(Error::InProgress { .. })),
        "{locked:?}"
    );
    tokio::time::sleep_until(tokio::time::Instant::now() + Duration::from_millis(200)).await;
    let (after, _) = deliver(handler(&store, &runs), Duration::from_secs(30)).await;
    assert_eq!(after.unwrap(), Processed::Executed(1));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// (Found failing before the fix: the completion waited on the hung store for ever.)
#[tokio::test]
async fn a_hung_completion_is_cut_as_an_answer_that_was_lost_and_replays() {
    let store = FaultyStore::new(InMemoryStore::new());
    let runs = Arc::new(AtomicUsize::new(0));
    store.inject(Inject::CompleteHangs);
    let (answer, took) = deliver(handler(&store, &runs), Duration::from_millis(1_500)).await;
    let err = answer.unwrap_err();
    assert_eq!(err.error_type(), "Idempotency.DeadlineReached", "{err:?}");
    assert!(
        took < Duration::from_millis(1_490),
        "answered after {took:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    // The completion was applied: the next delivery replays it.
    let stored = store
        .inner
        .get(&key())
        .await
        .unwrap()
        .expect("the completion");
    assert_eq!(stored.status, Status::Completed);
    let (again, _) = deliver(handler(&store, &runs), Duration::from_secs(30)).await;
    assert_eq!(again.unwrap(), Processed::Replayed(1));
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the handler ran once");
}

/// (Found failing before the fix: the acquire was sent with 5 ms left.)
#[tokio::test]
async fn a_call_without_time_for_its_answer_is_not_sent() {
    let store = FaultyStore::new(InMemoryStore::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let remaining = CALL_MARGIN + Duration::from_millis(5);
    let (answer, _) = deliver(handler(&store, &runs), remaining).await;
    let err = answer.unwrap_err();
    assert_eq!(err.error_type(), "Idempotency.DeadlineReached", "{err:?}");
    assert_eq!(store.calls.acquire.load(Ordering::SeqCst), 0, "not sent");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert!(store.inner.get(&key()).await.unwrap().is_none());
}

/// Outside a batch nothing stops the handler at the batch's answer margin: one that returns
/// with 400 ms left still stores its result, and the caller's retry replays it. (Found in
/// review, with the store calls cut at the answer margin: the completion was not sent, and
/// the retry ran the handler again.)
#[tokio::test]
async fn a_handler_that_returns_inside_the_answer_margin_still_stores_its_result() {
    let store = FaultyStore::new(InMemoryStore::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let slow = |runs: Arc<AtomicUsize>| {
        IdempotencyLayer::new(store.clone())
            .with_config(Config::new().with_key_prefix("deadlines"))
            .handler(move |_: SqsMessage| {
                let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
                async move {
                    tokio::time::sleep(Duration::from_millis(1_100)).await;
                    Ok::<_, std::io::Error>(run)
                }
            })
    };
    let (first, _) = deliver(slow(runs.clone()), Duration::from_millis(1_500)).await;
    assert_eq!(first.unwrap(), Processed::Executed(1));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (again, _) = deliver(slow(runs.clone()), Duration::from_secs(30)).await;
    assert_eq!(again.unwrap(), Processed::Replayed(1));
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the handler ran once");
}

/// (Found failing before the fix: the invocation succeeded with every record reported
/// `deadline_near`, on every delivery.)
#[tokio::test]
async fn a_batch_without_time_for_one_record_fails_the_invocation_naming_both_figures() {
    let store = FaultyStore::new(InMemoryStore::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let processor = BatchProcessor::new(handler(&store, &runs));
    let batch = || sqs_event([sqs_message("m-1", "1"), sqs_message("m-2", "2")]);
    // Less than the default margin (1 s) before the deadline.
    let short = support::invocation(batch(), SystemTime::now(), Duration::from_millis(800));
    let report = processor.process(short).await;
    assert_eq!(support::outcomes(&report), [Outcome::DeadlineNear; 2]);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(store.calls.acquire.load(Ordering::SeqCst), 0);
    match report.into_response() {
        Err(err @ BatchError::DeadlineTooShort { left_ms, margin_ms }) => {
            assert!((700..=800).contains(&left_ms), "{left_ms}");
            assert_eq!(margin_ms, 1_000);
            assert_eq!(err.error_type(), "Idempotency.DeadlineTooShort");
            let text = err.to_string();
            assert!(
                text.contains(&format!("{left_ms} ms")) && text.contains("1000 ms"),
                "{text}"
            );
        }
        other => panic!("the invocation must fail, not {other:?}"),
    }
    // Lambda's default timeout, 3 s, and the default margin: every record applies.
    let default = support::invocation(batch(), SystemTime::now(), Duration::from_secs(3));
    let report = processor.process(default).await;
    assert_eq!(support::outcomes(&report), [Outcome::Executed; 2]);
    assert!(report
        .into_response()
        .unwrap()
        .batch_item_failures
        .is_empty());
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}
