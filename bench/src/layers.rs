//! Where a redelivered duplicate's client CPU goes on DynamoDB, layer by layer: the same ten
//! keys read by a bare `BatchGetItem` (the raw limit's own read, [`read_ids`]), by the
//! toolkit's store (`get_many`: its request built, its records parsed), the store's read
//! followed by the processor's per-record work done in one loop ([`replay_in_one_loop`]: each
//! record's key and payload hash, the decision on its record, its result decoded), and the
//! same ten records as a batch through the order-consumer's processor (its pre-check, and
//! the records found completed replayed together; the report), taking turns against
//! DynamoDB Local. Each
//! difference is one layer's cost per record, with the SDK's own work in all four.

use std::time::{Duration, SystemTime};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::key::PayloadValidation;
use lambda_idempotency::key::{IdempotencyKey, KeyExtractor};
use lambda_idempotency::record::{decide, Decision, Record};
use lambda_idempotency::store::{DynamoDbStore, Store};
use lambda_idempotency::CommitStrategy;
use lambda_idempotency_test_support::dynamodb::{counted_client_at, CallCounter};
use lambda_runtime::LambdaEvent;
use order_consumer::{processor, Applied, Settings};
use serde_json::{json, Value};

use crate::raw::read_ids;
use crate::run::{round, tables};
use crate::scenario::{context, order_message, process_cpu};

/// The four reads, in the order of the report.
pub const LAYERS: [&str; 4] = [
    "bare BatchGetItem of the ten keys",
    "the toolkit's store reading the ten keys (get_many)",
    "the store's read, then each record's work in one loop",
    "the ten records through the batch processor",
];

/// The processor's work for each pre-checked duplicate, done in one loop over what the
/// store read: the record's key and payload hash as order-consumer derives them, the
/// decision on the record found for the key ([`decide`]: expiry, lease, payload hash,
/// status), and its stored result decoded. No per-record service, span, deadline timer or
/// panic guard: what is left of the processor's figure above this one is that path.
fn replay_in_one_loop(
    records: Vec<SqsMessage>,
    found: &[Record],
    extractor: &impl KeyExtractor<SqsMessage>,
) -> Vec<(Option<String>, Applied)> {
    let now = SystemTime::now();
    records
        .into_iter()
        .map(|message| {
            let material = extractor.key_material(&message).expect("key");
            let key = IdempotencyKey::derive(order_consumer::KEY_PREFIX, &material);
            let hash = PayloadValidation::Body
                .hash(&message)
                .expect("payload hash");
            let record = found.iter().find(|r| r.key == key).expect("found");
            let Decision::Replay { data } = decide(record, now, hash.as_ref()) else {
                panic!("{key:?} is not a completed record of this payload");
            };
            let applied = serde_json::from_str(data.as_deref().expect("a stored result"))
                .expect("the stored result decodes");
            (message.message_id, applied)
        })
        .collect()
}

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
    let rounds = rounds.max(1).div_ceil(LAYERS.len()) * LAYERS.len();
    let mut lines = Vec::new();
    for mode in [CommitStrategy::Optimistic, CommitStrategy::Lease] {
        let name = match mode {
            CommitStrategy::Lease => "lease",
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
        let mut cpu = [Duration::ZERO; LAYERS.len()];
        // Round 0 is untimed (the process's first reads of this kind warm up); each layer
        // takes each place in the rotation equally often.
        for r in 0..=rounds {
            for turn in 0..LAYERS.len() {
                let layer = (turn + r) % LAYERS.len();
                // Each turn is handed its own copy of the event, made before the timing and
                // dropped within it (the processor's inside `process`), as in the scenarios;
                // the processor's report and the loop's answers are dropped after the timing.
                let event = LambdaEvent::new(redelivered.clone(), context());
                let mut report = None;
                let mut looped = None;
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
                    2 => {
                        let found = store.get_many(&keys).await.expect("get_many");
                        let LambdaEvent { payload, context } = event;
                        drop(context);
                        looped = Some(replay_in_one_loop(payload.records, &found, &extractor));
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
                if let Some(looped) = looped {
                    assert_eq!(looped.len(), 10);
                    assert!(looped.iter().all(|(id, _)| id.is_some()));
                }
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
