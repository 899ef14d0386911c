//! A whole invocation through `lambda_runtime::run`, as in Lambda: the Runtime API emulator
//! hands the runtime each event's JSON text, the runtime deserializes it into the
//! idempotent invocation's `Received<T>`, and the key comes from that text. Its own test
//! binary: the runtime reads its configuration from the environment, set here once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lambda_idempotency::key::JsonPointer;
use lambda_idempotency::key::PayloadValidation;
use lambda_idempotency::store::InMemoryStore;
use lambda_idempotency::{Config, IdempotencyLayer};
use lambda_idempotency_test_support::harness::runtime_api::{Reply, RuntimeApi};
use lambda_runtime::{service_fn, LambdaEvent};
use serde_json::{json, Value};

#[test]
fn lambda_runtime_keys_an_invocation_on_the_text_it_received() {
    // One thread: nothing else reads the environment while it is set.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let api = RuntimeApi::start().await;
        for (name, value) in [
            ("AWS_LAMBDA_RUNTIME_API", api.address()),
            ("AWS_LAMBDA_FUNCTION_NAME", "refunds".into()),
            ("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128".into()),
            ("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST".into()),
        ] {
            std::env::set_var(name, value);
        }
        let store = InMemoryStore::new();
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        // The handler takes a `serde_json::Value`: its ids past 64 bits are `f64`s.
        let handler = service_fn(move |event: LambdaEvent<Value>| {
            let run = counted.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                Ok::<_, lambda_runtime::Error>(json!({ "run": run, "id": event.payload["id"] }))
            }
        });
        let layer = IdempotencyLayer::new(store.clone())
            .with_key(JsonPointer::new("/id"))
            .with_config(Config::new().with_payload_validation(PayloadValidation::Body));
        let function = tokio::spawn(lambda_runtime::run(layer.invocation(handler)));

        let invoke = |text: String| {
            let api = &api;
            async move {
                api.invoke_text(&text, Duration::from_secs(30), Duration::from_secs(10))
                    .await
            }
        };
        let event = |last_digit: char, cents: u64| {
            format!(r#"{{"id": 1234567890123456789012{last_digit}, "cents": {cents}}}"#)
        };
        let run_of = |reply: Option<Reply>| match reply {
            Some(Reply::Response(body)) => body["run"].as_u64().unwrap(),
            other => panic!("expected a response, got {other:?}"),
        };
        assert_eq!(run_of(invoke(event('3', 5)).await), 1);
        assert_eq!(
            run_of(invoke(event('4', 5)).await),
            2,
            "an id differing in its 23rd digit is another invocation"
        );
        assert_eq!(run_of(invoke(event('3', 5)).await), 1, "replayed");
        assert_eq!(run_of(invoke(event('4', 5)).await), 2, "replayed");
        match invoke(event('3', 6)).await {
            Some(Reply::Error(body)) => {
                assert_eq!(body["errorType"], "Idempotency.PayloadMismatch", "{body}")
            }
            other => panic!("expected a payload mismatch, got {other:?}"),
        }
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        assert_eq!(store.records().len(), 2);
        function.abort();
    });
}
