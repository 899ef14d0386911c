//! The batch runner and its deadlines: a slow record does not hold back the others, a
//! started record is bounded by the invocation deadline, followers of a same-key leader wait
//! no longer than their own deadline.
use lambda_idempotency_test_support as support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::batch::{BatchProcessor, Scheduling};
use lambda_idempotency::store::InMemoryStore;
use lambda_idempotency::{Config, IdempotencyLayer, Outcome};
use support::invocation;

fn batch(count: usize) -> SqsEvent {
    let mut event = SqsEvent::default();
    for i in 0..count {
        let mut m = SqsMessage::default();
        m.message_id = Some(format!("m-{i}"));
        m.body = Some(i.to_string());
        event.records.push(m);
    }
    event
}

#[tokio::test]
async fn a_slow_record_does_not_stall_the_concurrent_batch() {
    let runs = Arc::new(AtomicUsize::new(0));
    let layer =
        IdempotencyLayer::new(InMemoryStore::new()).with_config(Config::new().with_key_prefix("t"));
    let counter = runs.clone();
    let processor = BatchProcessor::new(layer.handler(move |m: SqsMessage| {
        let runs = counter.clone();
        async move {
            let slow = m.body.as_deref() == Some("0");
            tokio::time::sleep(Duration::from_millis(if slow { 2_000 } else { 10 })).await;
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::io::Error>(())
        }
    }))
    .with_scheduling(Scheduling::Concurrent { limit: 10 });
    let report = processor
        .process(invocation(
            batch(30),
            SystemTime::now(),
            Duration::from_secs(3),
        ))
        .await;
    let executed = report.count(Outcome::Executed);
    assert_eq!(
        executed,
        30,
        "{:?}",
        report.records.iter().map(|r| r.outcome).collect::<Vec<_>>()
    );
    // Reports keep the event's order.
    let ids: Vec<String> = report
        .records
        .iter()
        .map(|r| r.item_identifier.clone().unwrap())
        .collect();
    assert_eq!(ids, (0..30).map(|i| format!("m-{i}")).collect::<Vec<_>>());
    assert_eq!(runs.load(Ordering::SeqCst), 30);
}

#[tokio::test]
async fn a_started_record_is_stopped_before_the_deadline_so_the_batch_answers_in_time() {
    let layer =
        IdempotencyLayer::new(InMemoryStore::new()).with_config(Config::new().with_key_prefix("t"));
    let finished = Arc::new(AtomicUsize::new(0));
    let done = finished.clone();
    let processor = BatchProcessor::new(layer.handler(move |m: SqsMessage| {
        let done = done.clone();
        async move {
            if m.body.as_deref() == Some("0") {
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
            done.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::io::Error>(())
        }
    }));
    let started = std::time::Instant::now();
    let report = processor
        .process(invocation(
            batch(2),
            SystemTime::now(),
            Duration::from_secs(2),
        ))
        .await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "answered after {took:?}");
    assert_eq!(
        report.records.iter().map(|r| r.outcome).collect::<Vec<_>>(),
        [Outcome::DeadlineNear, Outcome::Executed]
    );
    assert!(matches!(
        report.records[0].error,
        Some(lambda_idempotency::Error::DeadlineReached)
    ));
    assert_eq!(report.response.batch_item_failures.len(), 1);
    assert_eq!(finished.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_same_key_follower_waits_no_longer_than_its_own_deadline() {
    use lambda_runtime::LambdaEvent;
    use tower::ServiceExt;
    let layer =
        IdempotencyLayer::new(InMemoryStore::new()).with_config(Config::new().with_key_prefix("t"));
    let service = layer.handler(|_m: SqsMessage| async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        Ok::<_, std::io::Error>(())
    });
    let record = batch(1).records.remove(0);
    let leader = invocation(
        SqsEvent::default(),
        SystemTime::now(),
        Duration::from_secs(10),
    );
    let follower = invocation(
        SqsEvent::default(),
        SystemTime::now(),
        Duration::from_millis(1_500),
    );
    let leading = tokio::spawn(
        service
            .clone()
            .oneshot(LambdaEvent::new(record.clone(), leader.context)),
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    let answer = service
        .oneshot(LambdaEvent::new(record, follower.context))
        .await;
    let waited = started.elapsed();
    assert!(
        matches!(answer, Err(lambda_idempotency::Error::InProgress { .. })),
        "{answer:?}"
    );
    assert!(waited < Duration::from_millis(1_700), "waited {waited:?}");
    assert!(leading.await.unwrap().is_ok());
}

#[tokio::test]
async fn an_optimistic_permanent_failure_is_shared_with_same_key_records() {
    use lambda_idempotency::{CommitStrategy, Completion, Permanent};
    let runs = Arc::new(AtomicUsize::new(0));
    let layer =
        IdempotencyLayer::new(InMemoryStore::new()).with_config(Config::new().with_key_prefix("t"));
    let counter = runs.clone();
    let processor = BatchProcessor::new(
        layer
            .clone()
            .with_writes()
            .with_commit(CommitStrategy::Optimistic)
            .handler(move |_m: SqsMessage| {
                let runs = counter.clone();
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    Err::<Completion<()>, _>(Permanent::new("declined"))
                }
            }),
    );
    let mut event = batch(1);
    event.records.push(event.records[0].clone());
    let report = processor
        .process(invocation(
            event,
            SystemTime::now(),
            Duration::from_secs(10),
        ))
        .await;
    assert_eq!(
        report.records.iter().map(|r| r.outcome).collect::<Vec<_>>(),
        [Outcome::FailedPermanently, Outcome::FailedPermanently]
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the follower ran the handler again"
    );
}
