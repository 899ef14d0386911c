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
    // Powertools' default prefix for `charge` in `app.py` of the function `payments`.
    let layer = IdempotencyLayer::new(store.clone()).with_config(
        Config::new()
            .with_payload_validation(PayloadValidation::Body)
            .with_powertools_format(PowertoolsFormat::new("payments.app")),
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
    // sort_keys=True).encode()).hexdigest(), under `<prefix>.<name>`, the float kept.
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
                .with_payload_validation(PayloadValidation::Body)
                .with_powertools_format(PowertoolsFormat::new("refunds")),
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

/// Two functions of one layer, and a function and the handler that calls it, never share a
/// record in Powertools' format: each function keys under `<prefix>.<name>`, or its own
/// prefix.
#[tokio::test]
async fn functions_of_one_layer_keep_their_own_records() {
    let store = InMemoryStore::new();
    let layer = IdempotencyLayer::new(store.clone())
        .with_key(JsonPointer::new("/order_id"))
        .with_config(Config::new().with_powertools_format(PowertoolsFormat::new("orders")));
    let charge = layer.function("charge", |order: String| async move {
        Ok::<_, BoxError>(format!("charged {order}"))
    });
    let email = layer.function("email", |order: String| async move {
        Ok::<_, BoxError>(format!("emailed {order}"))
    });
    let refund = layer
        .function("refund", |order: String| async move {
            Ok::<_, BoxError>(format!("refunded {order}"))
        })
        .with_key_prefix("refunds-python.app.refund");
    let lease = Duration::from_secs(30);
    let charged = charge
        .call_with_lease("o-1".to_string(), lease)
        .await
        .unwrap();
    let emailed = email
        .call_with_lease("o-1".to_string(), lease)
        .await
        .unwrap();
    let refunded = refund
        .call_with_lease("o-1".to_string(), lease)
        .await
        .unwrap();
    assert_eq!(charged, Processed::Executed("charged o-1".to_string()));
    assert_eq!(emailed, Processed::Executed("emailed o-1".to_string()));
    assert_eq!(refunded, Processed::Executed("refunded o-1".to_string()));
    let mut keys: Vec<String> = store
        .records()
        .into_iter()
        .map(|r| r.key.as_str().to_string())
        .collect();
    keys.sort();
    // md5(json.dumps("o-1")) under each prefix.
    assert_eq!(
        keys,
        [
            "orders.charge#cbcbdb948de16bfe7e49a81f91500ab1",
            "orders.email#cbcbdb948de16bfe7e49a81f91500ab1",
            "refunds-python.app.refund#cbcbdb948de16bfe7e49a81f91500ab1",
        ]
    );
}
