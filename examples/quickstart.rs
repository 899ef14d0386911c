//! The Quickstart's main job: runs the sample events in `events/` through the idempotency
//! wrapper on the embedded store and prints each record's outcome and the batch response.
//!
//! ```sh
//! cargo run --example quickstart
//! RUST_LOG=info cargo run --example quickstart   # also show the per-record log lines
//! ```

use std::time::{Duration, SystemTime};

use lambda_idempotency::aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::clock::epoch_ms;
use lambda_idempotency::key::PayloadValidation;
use lambda_idempotency::key::{JsonPointer, MessageAttribute};
use lambda_idempotency::lambda_runtime::{Context, LambdaEvent};
use lambda_idempotency::store::InMemoryStore;
use lambda_idempotency::{Config, IdempotencyLayer};
use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Order {
    event_id: String,
    account: String,
    amount: i64,
}

#[derive(Debug, Serialize, Deserialize)]
struct Applied {
    account: String,
    amount: i64,
}

/// The business handler: parse the order and "apply" it.
async fn apply_order(message: SqsMessage) -> Result<Applied, serde_json::Error> {
    let order: Order = serde_json::from_str(message.body.as_deref().unwrap_or_default())?;
    println!(
        "    handler ran: {} {:+} on {}",
        order.event_id, order.amount, order.account
    );
    Ok(Applied {
        account: order.account,
        amount: order.amount,
    })
}

/// The error and its causes, `: `-separated.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text = format!("{text}: {cause}");
        source = cause.source();
    }
    text
}

fn load(name: &str) -> Result<SqsEvent, Box<dyn std::error::Error>> {
    let path = format!("{}/events/{name}", env!("CARGO_MANIFEST_DIR"));
    Ok(serde_json::from_str(&std::fs::read_to_string(path)?)?)
}

fn invocation(event: SqsEvent) -> LambdaEvent<SqsEvent> {
    let mut context = Context::default();
    context.request_id = format!("quickstart-{}", epoch_ms(SystemTime::now()));
    context.deadline = epoch_ms(SystemTime::now() + Duration::from_secs(30));
    LambdaEvent::new(event, context)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();

    // One embedded store for the whole run, as one warm container would have.
    let layer = IdempotencyLayer::new(InMemoryStore::new())
        .with_key(MessageAttribute::new("Idempotency-Key").or(JsonPointer::new("/eventId")))
        .with_config(
            Config::new()
                .with_key_prefix("order-consumer")
                .with_payload_validation(PayloadValidation::Body),
        );
    // `Scheduling::Auto` (the default) runs a standard queue's records concurrently and a FIFO
    // queue's in order, a failure stopping only its message group.
    let standard = BatchProcessor::new(layer.handler(apply_order));

    let runs = [
        ("batch.json", "a fresh batch", &standard),
        ("batch.json", "the same batch redelivered", &standard),
        ("poison.json", "a poison record among good ones", &standard),
        (
            "same_key_in_batch.json",
            "one key twice in a batch",
            &standard,
        ),
        ("fifo.json", "a FIFO batch with a failure", &standard),
    ];
    for (file, what, processor) in runs {
        println!("== events/{file}: {what}");
        let report = processor.process(invocation(load(file)?)).await;
        for record in &report.records {
            let detail = match (&record.value, &record.error) {
                (Some(applied), _) => format!("{} {:+}", applied.account, applied.amount),
                (None, Some(error)) => error_chain(error),
                (None, None) => "not started".to_string(),
            };
            println!(
                "  {:<38} {:<14} {detail}",
                record
                    .item_identifier
                    .as_deref()
                    .unwrap_or("<no messageId>"),
                record.outcome.as_str(),
            );
        }
        println!("  response: {}", serde_json::to_string(&report.response)?);
    }
    Ok(())
}
