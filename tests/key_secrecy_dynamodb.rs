//! Security: raw key material (event ids, `Idempotency-Key` values) and input quoted by
//! errors (a parse error, a handler error, a panic message, a permanent failure) never land
//! in the table or in the logs: only `<prefix>#<sha256>`, outcomes and error types do. Its
//! own test binary, so that its global log subscriber sees every line.
use lambda_idempotency_test_support as support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage, SqsMessageAttribute};
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::key::JsonPointer;
use lambda_idempotency::key::PayloadValidation;
use lambda_idempotency::store::DynamoDbStore;
use lambda_idempotency::{Completion, Config, IdempotencyLayer};
use order_consumer::{ledger_credit, order_key, Order, KEY_PREFIX};
use support::dynamodb::{create_table, create_table_keyed};
use support::{invocation, load_event};

/// Collects everything the subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn raw_key_material_never_reaches_the_table_or_the_logs() {
    let Some(client) = support::dynamodb::client().await else {
        return;
    };
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");

    let table = create_table(&client).await;
    let ledger = create_table_keyed(&client, "ledger", "account").await;
    let mut event = SqsEvent::default();
    let template = load_event("batch.json").records.remove(0);
    for i in 0..4 {
        let mut record = template.clone();
        record.message_id = Some(format!("message-{i}"));
        record.body = Some(if i == 3 {
            "not json SECRET-BODY".to_string()
        } else {
            serde_json::json!({"eventId": format!("SECRET-EVENT-{i}"), "account": "acct-s", "amount": 1}).to_string()
        });
        if i % 2 == 1 {
            let mut attribute = SqsMessageAttribute::default();
            attribute.string_value = Some(format!("SECRET-KEY-{i}"));
            attribute.data_type = Some("String".into());
            record
                .message_attributes
                .insert("Idempotency-Key".into(), attribute);
        }
        event.records.push(record);
    }
    let layer = IdempotencyLayer::new(DynamoDbStore::new(client.clone(), &table))
        .with_key(order_key())
        .with_config(
            Config::new()
                .with_key_prefix(KEY_PREFIX)
                .with_payload_validation(PayloadValidation::Body),
        );
    let ledger_table = ledger.clone();
    let processor =
        BatchProcessor::new(layer.clone().with_writes().handler(move |m: SqsMessage| {
            let ledger_table = ledger_table.clone();
            async move {
                let order: Order = serde_json::from_str(m.body.as_deref().unwrap_or(""))?;
                let write = ledger_credit(ledger_table, &order);
                Ok::<_, lambda_idempotency::BoxError>(
                    Completion::new(order.amount).with_write(write),
                )
            }
        }));
    for _ in 0..2 {
        processor
            .process(invocation(
                event.clone(),
                SystemTime::now(),
                Duration::from_secs(30),
            ))
            .await;
    }

    // A secret in every other input position: a numeric key that the order's parse error
    // quotes, and handler errors, a panic and a permanent failure that quote the body.
    let mut quoted = SqsEvent::default();
    for (i, body) in [
        r#"{"eventId":4111111111111111,"account":"acct-s","amount":1}"#,
        r#"{"eventId":"e-err","note":"SECRET-IN-ERROR"}"#,
        r#"{"eventId":"e-panic","note":"SECRET-IN-PANIC"}"#,
        r#"{"eventId":"e-permanent","note":"SECRET-IN-PERMANENT"}"#,
    ]
    .into_iter()
    .enumerate()
    {
        let mut record = template.clone();
        record.message_id = Some(format!("quoted-{i}"));
        record.body = Some(body.to_string());
        quoted.records.push(record);
    }
    let plain = IdempotencyLayer::new(DynamoDbStore::new(client.clone(), &table))
        .with_key(JsonPointer::new("/eventId"))
        .with_config(Config::new().with_key_prefix("quoting"));
    let quoting = BatchProcessor::new(plain.handler(|m: SqsMessage| async move {
        let body = m.body.unwrap_or_default();
        if body.contains("SECRET-IN-ERROR") {
            return Err(lambda_idempotency::BoxError::from(format!(
                "bad input: {body}"
            )));
        }
        if body.contains("SECRET-IN-PANIC") {
            panic!("cannot handle {body}");
        }
        if body.contains("SECRET-IN-PERMANENT") {
            return Err(lambda_idempotency::Permanent::new(format!("refused: {body}")).into());
        }
        let order: Order = serde_json::from_str(&body)?;
        Ok(order.amount)
    }));
    for _ in 0..2 {
        let report = quoting
            .process(invocation(
                quoted.clone(),
                SystemTime::now(),
                Duration::from_secs(30),
            ))
            .await;
        // The errors themselves still say what went wrong, to the code that called.
        let texts: Vec<String> = report
            .records
            .iter()
            .filter_map(|r| r.error.as_ref().map(|e| format!("{e:?}")))
            .collect();
        assert!(
            texts.iter().any(|t| t.contains("4111111111111111")),
            "{texts:?}"
        );
    }

    let mut stored = String::new();
    for table in [&table, &ledger] {
        let items = client.scan().table_name(table).send().await.unwrap();
        assert!(!items.items().is_empty());
        stored.push_str(&format!("{:?}", items.items()));
    }
    assert!(
        !stored.contains("SECRET") && !stored.contains("4111111111111111"),
        "raw key material or quoted input in the table: {stored}"
    );
    assert!(
        stored.contains("FAILED"),
        "the permanent failure was stored"
    );

    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("message-0") && logs.contains("idempotency_key"),
        "logs were captured"
    );
    assert!(
        logs.contains("quoted-2") && logs.contains("Idempotency.HandlerPanic"),
        "the failures were logged"
    );
    assert!(
        !logs.contains("SECRET") && !logs.contains("4111111111111111"),
        "raw key material or quoted input in the logs:\n{logs}"
    );
}
