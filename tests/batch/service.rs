//! The processor as a Lambda-ready tower `Service` over tower-composed handlers.

use lambda_idempotency_test_support as support;

use std::sync::{Arc, Mutex};

use aws_lambda_events::sqs::SqsMessage;
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::store::InMemoryStore;
use lambda_idempotency::IdempotencyLayer;
use lambda_runtime::LambdaEvent;
use order_consumer::order_key;
use support::{invocation, load_event};
use tower::{Service, ServiceExt};

use crate::REMAINING;

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
