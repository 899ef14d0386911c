//! Records in Powertools' format from an idempotent function and a whole invocation: the
//! stored key, payload hash and result are the ones Powertools for AWS Lambda (Python)
//! writes for the same data (digests from Python 3), numbers keeping their type (`500`
//! stays an integer, `2.0` a float) although this crate keys its own format on canonical
//! JSON. The batch path is checked against the real Powertools in
//! `examples/order-consumer/tests/powertools_interop.rs`.

use std::time::{Duration, SystemTime};

use lambda_idempotency::invocation::Received;
use lambda_idempotency::key::{JsonPointer, PayloadValidation};
use lambda_idempotency::powertools::PowertoolsFormat;
use lambda_idempotency::record::{Record, Status};
use lambda_idempotency::store::InMemoryStore;
use lambda_idempotency::{Config, IdempotencyLayer, Processed};
use lambda_idempotency_test_support::context_at;
use lambda_runtime::{service_fn, LambdaEvent};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tower::{BoxError, Service, ServiceExt};

#[derive(Debug, Clone, Serialize)]
struct Charge {
    customer: String,
    cents: u64,
    rate: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Receipt {
    charged_cents: u64,
}

fn only_record(store: &InMemoryStore) -> Record {
    let records = store.records();
    assert_eq!(records.len(), 1, "{records:?}");
    records.into_iter().next().unwrap()
}

#[tokio::test]
async fn a_function_call_is_keyed_as_idempotent_function_keys_its_data() {
    let store = InMemoryStore::new();
    let layer = IdempotencyLayer::new(store.clone()).with_config(
        Config::new()
            .with_key_prefix("payments.app.charge")
            .with_payload_validation(PayloadValidation::Body)
            .with_powertools_format(PowertoolsFormat::new()),
    );
    let charge = layer.function("charge", |charge: Charge| async move {
        Ok::<_, BoxError>(Receipt {
            charged_cents: charge.cents,
        })
    });
    let args = || Charge {
        customer: "c-1".into(),
        cents: 500,
        rate: 2.0,
    };
    let lease = Duration::from_secs(30);
    let first = charge.call_with_lease(args(), lease).await.unwrap();
    assert_eq!(first, Processed::Executed(Receipt { charged_cents: 500 }));
    let record = only_record(&store);
    // hashlib.md5(json.dumps({"customer": "c-1", "cents": 500, "rate": 2.0},
    // sort_keys=True).encode()).hexdigest(): no `fn:charge` namespace, the float kept.
    assert_eq!(
        record.key.as_str(),
        "payments.app.charge#4d9ebea31657c21c081cc4564b239426"
    );
    assert_eq!(
        record.validation.as_deref(),
        Some("4d9ebea31657c21c081cc4564b239426")
    );
    assert_eq!(record.status, Status::Completed);
    // json.dumps(result, sort_keys=True), as Powertools stores it.
    assert_eq!(record.data.as_deref(), Some(r#"{"charged_cents": 500}"#));
    let again = charge.call_with_lease(args(), lease).await.unwrap();
    assert_eq!(again, Processed::Replayed(Receipt { charged_cents: 500 }));
}

#[tokio::test]
async fn a_whole_invocation_is_keyed_on_the_event_as_delivered() {
    let store = InMemoryStore::new();
    let layer = IdempotencyLayer::new(store.clone())
        .with_key(JsonPointer::new("/id"))
        .with_config(
            Config::new()
                .with_key_prefix("refunds")
                .with_payload_validation(PayloadValidation::Body)
                .with_powertools_format(PowertoolsFormat::new()),
        );
    let mut function = layer.invocation(service_fn(|_: LambdaEvent<Value>| async move {
        Ok::<_, BoxError>(7u32)
    }));
    let event = || {
        LambdaEvent::new(
            Received::from_json(r#"{"id": "evt-1", "amount": 25, "rate": 2.0}"#).unwrap(),
            context_at(SystemTime::now(), Duration::from_secs(30)),
        )
    };
    let answer = function.ready().await.unwrap().call(event()).await.unwrap();
    assert_eq!(answer, 7);
    let record = only_record(&store);
    // md5(json.dumps("evt-1")), and of json.dumps(event, sort_keys=True).
    assert_eq!(
        record.key.as_str(),
        "refunds#970776f617531a338917a86500883abb"
    );
    assert_eq!(
        record.validation.as_deref(),
        Some("53f920a9ce45d5918328a2ca46eb74fd")
    );
    assert_eq!(record.data.as_deref(), Some("7"));
    // The same event built from a value: the same record.
    let from_value = LambdaEvent::new(
        Received::from_value(serde_json::json!({"id": "evt-1", "amount": 25, "rate": 2.0}))
            .unwrap(),
        context_at(SystemTime::now(), Duration::from_secs(30)),
    );
    let replayed = function.ready().await.unwrap().call(from_value).await;
    assert_eq!(replayed.unwrap(), 7);
    assert_eq!(store.records().len(), 1);
}
