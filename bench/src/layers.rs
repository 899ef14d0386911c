//! Where a redelivered duplicate's client CPU goes on DynamoDB, layer by layer: the same ten
//! keys read by a bare `BatchGetItem` (the raw limit's own read, [`read_ids`]), by the
//! toolkit's store (`get_many`: its request built, its records parsed), and the same ten
//! records as a batch through the order-consumer's processor (pre-check, key and payload
//! hash, admission, replay, report), taking turns against DynamoDB Local. Each difference is
//! one layer's cost per record, with the SDK's own work in all three.

use std::time::Duration;

use aws_lambda_events::sqs::SqsEvent;
use lambda_idempotency::key::{IdempotencyKey, KeyExtractor};
use lambda_idempotency::store::{DynamoDbStore, Store};
use lambda_idempotency::IdempotencyMode;
use lambda_idempotency_test_support::dynamodb::{counted_client_at, CallCounter};
use lambda_runtime::LambdaEvent;
use order_consumer::{processor, Settings};
use serde_json::{json, Value};

use crate::raw::read_ids;
use crate::run::{round, tables};
use crate::scenario::{context, order_message, process_cpu};

/// The three reads, in the order of the report.
pub const LAYERS: [&str; 3] = [
    "bare BatchGetItem of the ten keys",
    "the toolkit's store reading the ten keys (get_many)",
    "the ten records through the batch processor",
];

fn line(what: &str, mode: &str, cpu: Duration, records: usize) -> Value {
    json!({
        "scenario": "duplicate-layers",
        "what": what,
        "mode": mode,
        "records": records,
        "cpu_us_per_record": round(cpu.as_secs_f64() * 1e6 / records as f64),
    })
}

/// The measurements over `rounds` rounds against `endpoint`, one JSON line per layer and mode.
pub async fn measure(endpoint: &str, rounds: usize) -> Vec<Value> {
    let rounds = rounds.max(1).div_ceil(3) * 3;
    let mut lines = Vec::new();
    for mode in [IdempotencyMode::Optimistic, IdempotencyMode::Lease] {
        let name = match mode {
            IdempotencyMode::Lease => "lease",
            _ => "optimistic",
        };
        let counter = CallCounter::default();
        let client = counted_client_at(endpoint, &counter).await;
        let t = tables(&client).await;
        let mut settings = Settings::new(t.clone(), mode);
        settings.local_cache = 0;
        settings.deadline_margin = Duration::from_secs(1);
        let ours = processor(client.clone(), &settings);
        let mut fresh = SqsEvent::default();
        fresh.records = (0..10)
            .map(|i| order_message("layers", name, 0, i))
            .collect();
        let report = ours
            .process(LambdaEvent::new(fresh.clone(), context()))
            .await;
        assert!(report.response.batch_item_failures.is_empty(), "{report:?}");
        let mut redelivered = fresh;
        for m in &mut redelivered.records {
            m.attributes
                .insert("ApproximateReceiveCount".into(), "2".into());
        }
        // The records' keys, as order-consumer derives them.
        let extractor = order_consumer::order_key();
        let keys: Vec<IdempotencyKey> = redelivered
            .records
            .iter()
            .map(|m| {
                let material = extractor.key_material(m).expect("key");
                IdempotencyKey::derive(order_consumer::KEY_PREFIX, &material)
            })
            .collect();
        let store = DynamoDbStore::new(client.clone(), t.idempotency.clone());
        let mut cpu = [Duration::ZERO; 3];
        // Round 0 is untimed (the process's first reads of this kind warm up); each layer
        // goes first, second and third equally often.
        for r in 0..=rounds {
            for turn in 0..3 {
                let layer = (turn + r) % 3;
                // Each turn is handed its own copy of the event, made before the timing and
                // dropped within it (the processor's inside `process`), as in the scenarios;
                // the processor's report is dropped after the timing.
                let event = LambdaEvent::new(redelivered.clone(), context());
                let mut report = None;
                counter.reset();
                let started = process_cpu();
                match layer {
                    0 => {
                        let ids = keys.iter().map(|k| k.as_str().to_string());
                        let found = read_ids(&client, &t.idempotency, ids).await;
                        assert_eq!(found.len(), 10);
                        drop(event);
                    }
                    1 => {
                        let found = store.get_many(&keys).await.expect("get_many");
                        assert_eq!(found.len(), 10);
                        drop(event);
                    }
                    _ => report = Some(ours.process(event).await),
                }
                let took = process_cpu() - started;
                if r > 0 {
                    cpu[layer] += took;
                }
                // One strongly consistent read and nothing else, in every layer: the
                // processor's records were answered by the pre-check, without a write.
                assert_eq!(
                    (counter.count("BatchGetItem"), counter.total()),
                    (1, 1),
                    "{}",
                    LAYERS[layer]
                );
                if let Some(report) = report {
                    assert!(report.response.batch_item_failures.is_empty());
                    assert_eq!(report.records.len(), 10);
                    assert!(report.records.iter().all(|r| r.replayed), "{report:?}");
                }
            }
        }
        for (what, cpu) in LAYERS.iter().zip(cpu) {
            lines.push(line(what, name, cpu, rounds * 10));
        }
    }
    lines
}
