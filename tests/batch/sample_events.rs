//! The sample events: they round-trip the Lambda types, run fresh, and replay when redelivered.

use lambda_idempotency_test_support as support;

use std::time::Duration;

use lambda_idempotency::batch::BatchReport;
use lambda_idempotency::Outcome;
use support::{load_event, outcomes};

use crate::{Receipt, Setup};

const EVENTS: [&str; 7] = [
    "batch_redelivered.json",
    "producer_retry.json",
    "tampered.json",
    "batch.json",
    "poison.json",
    "fifo.json",
    "same_key_in_batch.json",
];

#[test]
fn sample_events_round_trip_through_the_lambda_types() {
    for name in EVENTS {
        let path = format!("{}/events/{name}", env!("CARGO_MANIFEST_DIR"));
        let original: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        let event = load_event(name);
        assert!(!event.records.is_empty(), "{name}");
        let mut round_trip = serde_json::to_value(&event).unwrap();
        strip_nulls(&mut round_trip);
        assert_eq!(round_trip, original, "{name} must use only known fields");
    }
}

/// Drops `null` object members (absent optional fields serialize as null).
fn strip_nulls(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(strip_nulls);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

#[tokio::test]
async fn fresh_batch_executes_every_record_and_reports_none() {
    let setup = Setup::new();
    let report = setup.run(load_event("batch.json")).await;
    assert_eq!(outcomes(&report), [Outcome::Executed; 3]);
    assert!(report.response.batch_item_failures.is_empty());
    assert_eq!(
        serde_json::to_value(report.into_response().unwrap()).unwrap(),
        serde_json::json!({"batchItemFailures": []})
    );
    assert_eq!(setup.effects.total(), 3);
}

#[tokio::test]
async fn redelivered_batch_replays_without_running_the_handler() {
    let setup = Setup::new();
    let first = setup.run(load_event("batch.json")).await;
    setup.clock.advance(Duration::from_secs(120));
    let second = setup.run(load_event("batch.json")).await;
    assert_eq!(outcomes(&second), [Outcome::Replayed; 3]);
    assert_eq!(setup.effects.total(), 3);
    let values = |r: &BatchReport<Receipt>| -> Vec<Receipt> {
        r.records.iter().map(|r| r.value.clone().unwrap()).collect()
    };
    assert_eq!(values(&first), values(&second));
}
