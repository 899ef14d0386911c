//! The toolkit's own work per record, without I/O: the order-consumer's key and payload hash
//! alone, and whole records through the batch processor on the in-memory store (a redelivered
//! duplicate, pre-checked and replayed; a fresh record, run and committed). It puts a number
//! on the overhead that the client CPU columns show beside the SDK's own cost.

use std::time::Duration;

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::key::PayloadValidation;
use lambda_idempotency::key::{IdempotencyKey, KeyExtractor};
use lambda_idempotency::store::InMemoryStore;
use lambda_idempotency::{CommitStrategy, Config, IdempotencyLayer};
use lambda_runtime::LambdaEvent;
use serde_json::{json, Value};

use crate::scenario::{context, order_message, process_cpu};

fn line(what: &str, mode: &str, cpu: Duration, records: usize) -> Value {
    json!({
        "scenario": "toolkit-alone",
        "what": what,
        "mode": mode,
        "records": records,
        "cpu_us_per_record": crate::run::round(cpu.as_secs_f64() * 1e6 / records as f64),
    })
}

fn redelivered(mut message: SqsMessage) -> SqsMessage {
    message
        .attributes
        .insert("ApproximateReceiveCount".into(), "2".into());
    message
}

/// The measurements over `batches` batches of 10, one JSON line each.
pub async fn measure(batches: usize) -> Vec<Value> {
    let batches = batches.max(1);
    let mut lines = Vec::new();
    // The key and the payload hash of one order, as order-consumer derives them.
    let key = order_consumer::order_key();
    let message = order_message("alone", "key", 0, 3);
    let n = batches * 10;
    let started = process_cpu();
    for _ in 0..n {
        let material = key.key_material(&message).expect("key");
        let derived = IdempotencyKey::derive(order_consumer::KEY_PREFIX, &material);
        let hash = PayloadValidation::Body.hash(&message).expect("hash");
        std::hint::black_box((derived, hash));
    }
    lines.push(line(
        "key and payload hash",
        "-",
        process_cpu() - started,
        n,
    ));
    for mode in [CommitStrategy::Optimistic, CommitStrategy::Lease] {
        let name = match mode {
            CommitStrategy::Lease => "lease",
            _ => "optimistic",
        };
        let store = InMemoryStore::new();
        store.define_table("ledger", &["account"]);
        let layer = IdempotencyLayer::new(store)
            .with_key(key.clone())
            .with_config(
                Config::new()
                    .with_key_prefix(order_consumer::KEY_PREFIX)
                    .with_payload_validation(PayloadValidation::Body)
                    .with_local_cache(0),
            );
        let handler = layer
            .with_writes()
            .with_commit(mode)
            .handler(|m| order_consumer::apply_order("ledger".into(), m));
        // As order-consumer's: the pre-checked records found completed replay together.
        let processor = BatchProcessor::new(handler)
            .with_deadline_margin(Duration::from_secs(1))
            .with_batch_replay(true);
        let mut fresh_cpu = Duration::ZERO;
        let mut duplicate_cpu = Duration::ZERO;
        for b in 0..batches {
            let mut fresh = SqsEvent::default();
            fresh.records = (0..10)
                .map(|i| order_message("alone", name, b, i))
                .collect();
            let mut again = SqsEvent::default();
            again.records = fresh.records.iter().cloned().map(redelivered).collect();
            let started = process_cpu();
            let report = processor.process(LambdaEvent::new(fresh, context())).await;
            fresh_cpu += process_cpu() - started;
            assert!(report.response.batch_item_failures.is_empty());
            let started = process_cpu();
            let report = processor.process(LambdaEvent::new(again, context())).await;
            duplicate_cpu += process_cpu() - started;
            assert!(report.response.batch_item_failures.is_empty());
        }
        lines.push(line("fresh record, run and committed", name, fresh_cpu, n));
        lines.push(line(
            "redelivered duplicate, pre-checked and replayed",
            name,
            duplicate_cpu,
            n,
        ));
    }
    lines
}
