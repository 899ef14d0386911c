//! The testing kit (`lambda_idempotency::testing`) as users meet it: each trigger's event
//! builder goes through its processor (or the HTTP layer) on the embedded store, with the
//! fields the layer reads where Lambda puts them. Per delivery: the outcomes, how many times
//! the handler ran, and what was reported.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::dynamodb::EventRecord;
use aws_lambda_events::event::kinesis::KinesisEventRecord;
use aws_lambda_events::sqs::SqsMessage;
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::clock::Clock;
use lambda_idempotency::input::Input;
use lambda_idempotency::key::{JsonPointer, KeyExtractor, MessageAttribute};
use lambda_idempotency::testing::events::{
    dynamodb_change, dynamodb_event, dynamodb_insert, kinesis_event, kinesis_record, sqs_event,
    sqs_fifo_message, sqs_message, with_string_attribute,
};
use lambda_idempotency::testing::{invocation_at, InMemoryStore, ManualClock};
use lambda_idempotency::{BoxError, IdempotencyLayer, Outcome};
use serde_json::json;

const REMAINING: Duration = Duration::from_secs(30);

fn counter() -> (Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    (Arc::clone(&runs), runs)
}

fn outcomes<T, R>(report: &lambda_idempotency::batch::BatchReport<T, R>) -> Vec<Outcome> {
    report.records.iter().map(|r| r.outcome).collect()
}

#[tokio::test]
async fn sqs_builders_carry_ids_attributes_and_fifo_groups() {
    let clock = ManualClock::starting_now();
    let (runs, counted) = counter();
    let handler = IdempotencyLayer::new(InMemoryStore::new())
        .with_key(MessageAttribute::new("Idempotency-Key").or(JsonPointer::new("/id")))
        .with_clock(clock.clone())
        .handler(move |message: SqsMessage| {
            counted.fetch_add(1, Ordering::SeqCst);
            let poison = message.body.as_deref() == Some(r#"{"id":"bad"}"#);
            async move {
                if poison {
                    return Err::<(), BoxError>("poison".into());
                }
                Ok(())
            }
        });
    let processor = BatchProcessor::new(handler).with_clock(clock.clone());
    // A standard queue: the attribute keys the first two messages alike.
    let keyed = |id: &str, body: &str| {
        with_string_attribute(sqs_message(id, body), "Idempotency-Key", "k-1")
    };
    let event = sqs_event([
        keyed("m-1", "{}"),
        keyed("m-2", "{}"),
        sqs_message("m-3", r#"{"id":"x"}"#),
    ]);
    assert_eq!(event.records[0].id(), Some("m-1"));
    let report = processor
        .process(invocation_at(event, clock.now(), REMAINING))
        .await;
    assert_eq!(
        outcomes(&report),
        [Outcome::Executed, Outcome::Replayed, Outcome::Executed]
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    // A FIFO queue: after the poison message of group g, the group's later one waits.
    let fifo = sqs_event([
        sqs_fifo_message("f-1", r#"{"id":"bad"}"#, "g"),
        sqs_fifo_message("f-2", r#"{"id":"y"}"#, "g"),
    ]);
    let report = processor
        .process(invocation_at(fifo, clock.now(), REMAINING))
        .await;
    assert_eq!(outcomes(&report), [Outcome::Failed, Outcome::FifoSkipped]);
    let reported: Vec<_> = report
        .response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    assert_eq!(reported, ["f-1", "f-2"]);
}

#[tokio::test]
async fn kinesis_builders_decode_data_and_report_sequence_numbers() {
    let clock = ManualClock::starting_now();
    let (runs, counted) = counter();
    let handler = IdempotencyLayer::new(InMemoryStore::new())
        .with_key(JsonPointer::new("/eventId"))
        .with_clock(clock.clone())
        .handler(move |record: KinesisEventRecord| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, BoxError>(record.kinesis.data.len()) }
        });
    let processor = BatchProcessor::kinesis(handler).with_clock(clock.clone());
    let event = || {
        kinesis_event([
            kinesis_record("101", br#"{"eventId":"e-1"}"#),
            kinesis_record("102", b"not json"),
            kinesis_record("103", br#"{"eventId":"e-2"}"#),
        ])
    };
    let first = processor
        .process(invocation_at(event(), clock.now(), REMAINING))
        .await;
    assert_eq!(
        outcomes(&first),
        [Outcome::Executed, Outcome::Rejected, Outcome::FifoSkipped]
    );
    let reported: Vec<_> = first
        .response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone().unwrap_or_default())
        .collect();
    assert_eq!(reported, ["102", "103"]);
    // Redelivered from the checkpoint: the first record replays.
    let again = processor
        .process(invocation_at(event(), clock.now(), REMAINING))
        .await;
    assert_eq!(outcomes(&again)[0], Outcome::Replayed);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn dynamodb_stream_builders_give_images_as_bodies() {
    let clock = ManualClock::starting_now();
    let (runs, counted) = counter();
    let handler = IdempotencyLayer::new(InMemoryStore::new())
        .with_key(JsonPointer::new("/orderId"))
        .with_clock(clock.clone())
        .handler(move |record: EventRecord| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, BoxError>(record.event_name) }
        });
    let processor = BatchProcessor::dynamodb_streams(handler).with_clock(clock.clone());
    let event = dynamodb_event([
        dynamodb_insert(
            "1",
            json!({"orderId": "o-1"}),
            json!({"orderId": "o-1", "amount": 5}),
        ),
        dynamodb_change(
            "MODIFY",
            "2",
            json!({"orderId": "o-1"}),
            json!({"orderId": "o-1", "amount": 5}),
        ),
        dynamodb_change(
            "REMOVE",
            "3",
            json!({"orderId": "o-2"}),
            json!({"orderId": "o-2"}),
        ),
    ]);
    // The keys are the record's attributes, as Lambda sends them.
    let keyed = MessageAttribute::new("orderId").key_material(&event.records[0]);
    assert_eq!(keyed.unwrap(), b"o-1");
    let body = event.records[0].body().expect("the new image");
    let image: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(image, json!({"orderId": "o-1", "amount": 5}));
    let report = processor
        .process(invocation_at(event, clock.now(), REMAINING))
        .await;
    // The MODIFY has the INSERT's key and payload: one run for both; the REMOVE's old image
    // is its body.
    assert_eq!(
        outcomes(&report),
        [Outcome::Executed, Outcome::Replayed, Outcome::Executed]
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[cfg(feature = "http")]
#[tokio::test]
async fn the_http_builder_carries_the_key_and_a_deadline() {
    use lambda_http::http::StatusCode;
    use lambda_http::{Body, Request, RequestExt, Response};
    use lambda_idempotency::http::{IdempotentHttpLayer, REPLAYED_HEADER};
    use lambda_idempotency::testing::events::http_request;
    use tower::{Layer, ServiceExt};

    let request = http_request("POST", "/payments", Some("k-1"), r#"{"amount":5}"#);
    assert!(request.lambda_context_ref().is_some_and(|c| c.deadline > 0));
    let (runs, counted) = counter();
    let api = IdempotentHttpLayer::new(IdempotencyLayer::new(InMemoryStore::new())).layer(
        lambda_http::service_fn(move |_request: Request| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move {
                Ok::<_, BoxError>(
                    Response::builder()
                        .status(StatusCode::CREATED)
                        .body(Body::from("paid"))
                        .unwrap(),
                )
            }
        }),
    );
    let first = api.clone().oneshot(request).await.unwrap();
    assert_eq!(first.status(), StatusCode::CREATED);
    let again = api
        .clone()
        .oneshot(http_request(
            "POST",
            "/payments",
            Some("k-1"),
            r#"{"amount":5}"#,
        ))
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::CREATED);
    assert_eq!(again.headers()[REPLAYED_HEADER], "true");
    let missing = api
        .oneshot(http_request("POST", "/payments", None, "{}"))
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::BAD_REQUEST);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
