//! Many containers process the same batch at once against DynamoDB Local: every record's
//! handler runs exactly once, and every container ends with every record acknowledged.
use lambda_idempotency_test_support as support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::store::DynamoDbStore;
use lambda_idempotency::{IdempotencyLayer, Outcome};
use order_consumer::{order_key, Order};
use support::{invocation, load_event, reported};

const CONTAINERS: usize = 6;
const RECORDS: usize = 24;
const MAX_DELIVERIES: usize = 200;

/// A batch of `RECORDS` distinct orders, in the shape of `events/batch.json`.
fn big_batch() -> SqsEvent {
    let template = load_event("batch.json").records.remove(0);
    let mut event = SqsEvent::default();
    for i in 0..RECORDS {
        let mut record = template.clone();
        record.message_id = Some(format!("3f0c7a1e-0000-4000-8000-{i:012}"));
        record.body = Some(
            serde_json::json!({"eventId": format!("evt-c-{i}"), "account": format!("acct-{}", i % 5), "amount": i})
                .to_string(),
        );
        event.records.push(record);
    }
    event
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_containers_run_each_handler_exactly_once() {
    let Some(store) = support::dynamodb::fresh_store().await else {
        return;
    };
    let effects: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let executed = Arc::new(Mutex::new(0usize));
    let mut containers = Vec::new();
    for container in 0..CONTAINERS {
        let store: DynamoDbStore = store.clone();
        let effects = effects.clone();
        let executed = executed.clone();
        containers.push(tokio::spawn(async move {
            // Each container has its own layer: no shared cache or single flight.
            let layer = IdempotencyLayer::new(store).with_key(order_key());
            let processor = BatchProcessor::new(layer.handler(move |message: SqsMessage| {
                let effects = effects.clone();
                async move {
                    let order: Order = serde_json::from_str(message.body.as_deref().unwrap())?;
                    // Hold the lease a while, so the other containers meet it in progress.
                    let pause = 5 + (order.amount as u64 * 7 + container as u64 * 3) % 20;
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                    *effects
                        .lock()
                        .unwrap()
                        .entry(order.event_id.clone())
                        .or_default() += 1;
                    Ok::<_, serde_json::Error>(order.amount)
                }
            }));
            // At-least-once delivery: records reported as failures come back until done.
            let mut pending = big_batch();
            for delivery in 0..MAX_DELIVERIES {
                let report = processor
                    .process(invocation(
                        pending.clone(),
                        SystemTime::now(),
                        Duration::from_secs(60),
                    ))
                    .await;
                *executed.lock().unwrap() += report.count(Outcome::Executed);
                for record in &report.records {
                    assert!(
                        matches!(
                            record.outcome,
                            Outcome::Executed | Outcome::Replayed | Outcome::Locked
                        ),
                        "container {container}: unexpected {:?} ({:?})",
                        record.outcome,
                        record.error
                    );
                }
                let retry = reported(&report);
                if retry.is_empty() {
                    return delivery + 1;
                }
                pending
                    .records
                    .retain(|r| retry.contains(r.message_id.as_ref().unwrap()));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("container {container} still had records after {MAX_DELIVERIES} deliveries");
        }));
    }
    let mut deliveries = Vec::new();
    for container in containers {
        deliveries.push(container.await.expect("container task"));
    }
    let effects = effects.lock().unwrap();
    assert_eq!(effects.len(), RECORDS, "every record ran");
    for (event_id, count) in effects.iter() {
        assert_eq!(*count, 1, "{event_id} ran {count} times");
    }
    assert_eq!(*executed.lock().unwrap(), RECORDS);
    assert!(
        deliveries.iter().any(|&d| d > 1),
        "the containers never met each other's leases: the test proved nothing"
    );
    eprintln!(
        "{CONTAINERS} containers x {RECORDS} records on DynamoDB Local: each handler ran once; deliveries per container {deliveries:?}"
    );
}
