//! Security: keys are hashed and namespaced per function, so two functions sharing a table
//! cannot collide (raw key material stays out of the table and the logs: `tests/key_secrecy_dynamodb.rs`).
use lambda_idempotency_test_support as support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use aws_lambda_events::sqs::SqsMessage;
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::key::JsonPointer;
use lambda_idempotency::store::DynamoDbStore;
use lambda_idempotency::{Config, IdempotencyLayer, Outcome};
use support::dynamodb::create_table;
use support::{invocation, load_event};

#[tokio::test]
async fn two_functions_sharing_a_table_do_not_collide() {
    let Some(client) = support::dynamodb::client().await else {
        return;
    };
    let table = create_table(&client).await;
    let runs = Arc::new(Mutex::new(Vec::new()));
    let mut reports = Vec::new();
    for function in ["billing", "shipping"] {
        let runs = runs.clone();
        let layer = IdempotencyLayer::new(DynamoDbStore::new(client.clone(), &table))
            .with_key(JsonPointer::new("/eventId"))
            .with_config(Config::new().with_key_prefix(function));
        let processor = BatchProcessor::new(layer.handler(move |_m: SqsMessage| {
            let runs = runs.clone();
            async move {
                runs.lock().unwrap().push(function);
                Ok::<_, std::io::Error>(function.to_string())
            }
        }));
        let report = processor
            .process(invocation(
                load_event("batch.json"),
                SystemTime::now(),
                Duration::from_secs(30),
            ))
            .await;
        reports.push(report.records.iter().map(|r| r.outcome).collect::<Vec<_>>());
    }
    // The same events, keyed alike, run once in each function: no replay across functions.
    assert_eq!(
        reports,
        vec![vec![Outcome::Executed; 3], vec![Outcome::Executed; 3]]
    );
    assert_eq!(runs.lock().unwrap().len(), 6);
    let items = client.scan().table_name(&table).send().await.unwrap();
    let prefixes: Vec<String> = items
        .items()
        .iter()
        .map(|i| {
            i["id"]
                .as_s()
                .unwrap()
                .split('#')
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(prefixes.iter().filter(|p| *p == "billing").count(), 3);
    assert_eq!(prefixes.iter().filter(|p| *p == "shipping").count(), 3);
}
