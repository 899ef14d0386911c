//! The batch runner and its deadlines: a slow record does not hold back the others, a
//! started record is bounded by the invocation deadline, followers of a same-key leader wait
//! no longer than their own deadline.
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use common::invocation;
use lambda_idempotency::{
    BatchMode, BatchProcessor, Config, IdempotencyLayer, InMemoryStore, Outcome,
};

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
    .with_mode(BatchMode::Concurrent { limit: 10 });
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
        .map(|r| r.message_id.clone().unwrap())
        .collect();
    assert_eq!(ids, (0..30).map(|i| format!("m-{i}")).collect::<Vec<_>>());
    assert_eq!(runs.load(Ordering::SeqCst), 30);
}
