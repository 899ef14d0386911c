//! `key` prints what the library derives, for each of the four extractors.

use aws_lambda_events::sqs::{SqsEvent, SqsMessage, SqsMessageAttribute};
use lambda_idempotency::key::{
    BodyHash, IdempotencyKey, JsonPointer, KeyExtractor, MessageAttribute, MessageId,
};
use lambda_idempotency::CommitStrategy;
use lambda_idempotency_test_support as support;
use order_consumer::{processor, Settings, Tables};
use std::time::{Duration, SystemTime};

use crate::common::{cli, rig};

fn message(body: &str) -> SqsMessage {
    let mut m = SqsMessage::default();
    m.message_id = Some("0d0c7a4e-m-1".into());
    m.body = Some(body.into());
    let mut attribute = SqsMessageAttribute::default();
    attribute.data_type = Some("String".into());
    attribute.string_value = Some("idem-77".into());
    m.message_attributes
        .insert("Idempotency-Key".into(), attribute);
    m
}

fn library(prefix: &str, key: &impl KeyExtractor<SqsMessage>, m: &SqsMessage) -> String {
    IdempotencyKey::derive(prefix, &key.key_material(m).unwrap()).to_string()
}

#[test]
fn key_prints_the_library_key_for_each_extractor() {
    let body = r#"{"eventId":"evt-1","order":{"id":12,"lines":[1,2]}}"#;
    let m = message(body);
    let cases: [(&[&str], String); 5] = [
        (
            &["--message-id", "0d0c7a4e-m-1"],
            library("p", &MessageId, &m),
        ),
        (
            &["--attribute", "idem-77"],
            library("p", &MessageAttribute::new("Idempotency-Key"), &m),
        ),
        (
            &["--field", "/eventId", "--body", body],
            library("p", &JsonPointer::new("/eventId"), &m),
        ),
        (
            &["--field", "/order", "--body", body],
            library("p", &JsonPointer::new("/order"), &m),
        ),
        (
            &["--body-hash", "--body", body],
            library("p", &BodyHash, &m),
        ),
    ];
    for (args, expected) in cases {
        let mut all = vec!["key", "--prefix", "p"];
        all.extend_from_slice(args);
        let run = cli(&all).ok();
        assert_eq!(run.stdout.trim(), expected, "{args:?}");
        all.push("--json");
        assert_eq!(cli(&all).ok().json()["id"], expected.as_str(), "{args:?}");
    }
}

#[test]
fn key_without_material_or_source_is_a_usage_error() {
    let missing = cli(&["key", "--prefix", "p", "--field", "/nope", "--body", "{}"]);
    assert_eq!(missing.code, 2, "{missing:?}");
    assert!(missing.stderr.contains("/nope"), "{missing:?}");
    let none = cli(&["key", "--prefix", "p"]);
    assert_eq!(none.code, 2, "{none:?}");
    let no_body = cli(&["key", "--prefix", "p", "--body-hash"]);
    assert_eq!(no_body.code, 2, "{no_body:?}");
    let no_table = cli(&["get", "p#x"]);
    assert_eq!(no_table.code, 2, "{no_table:?}");
    assert!(
        no_table.stderr.contains("IDEMPOTENCY_TABLE"),
        "{no_table:?}"
    );
}

/// The id `key` prints is the one the order-consumer's processor stored.
#[tokio::test]
async fn key_finds_the_record_the_order_consumer_wrote() {
    let Some(rig) = rig().await else {
        return;
    };
    let ledger = support::dynamodb::create_table_keyed(&rig.client, "ledger", "account").await;
    let tables = Tables {
        idempotency: rig.table.clone(),
        ledger,
    };
    let settings = Settings::new(tables, CommitStrategy::Optimistic);
    let body = r#"{"eventId":"evt-cli-1","account":"acct-a","amount":5}"#;
    let mut m = SqsMessage::default();
    m.message_id = Some("m-1".into());
    m.body = Some(body.into());
    let mut event = SqsEvent::default();
    event.records.push(m);
    let report = processor(rig.client.clone(), &settings)
        .process(support::invocation(
            event,
            SystemTime::now(),
            Duration::from_secs(30),
        ))
        .await;
    assert!(report.response.batch_item_failures.is_empty());

    let by_field = cli(&[
        "key",
        "--prefix",
        "order-consumer",
        "--field",
        "/eventId",
        "--body",
        body,
    ])
    .ok();
    let id = by_field.stdout.trim().to_string();
    // Without the attribute, the consumer keys on eventId; the attribute with that text is
    // the same key.
    let by_attribute = cli(&[
        "key",
        "--prefix",
        "order-consumer",
        "--attribute",
        "evt-cli-1",
    ])
    .ok();
    assert_eq!(by_attribute.stdout.trim(), id);
    let shown = cli(&["get", &id, "--table", &rig.table, "--json"])
        .ok()
        .json();
    assert_eq!(shown["status"], "COMPLETED");
    let data: serde_json::Value = serde_json::from_str(shown["data"].as_str().unwrap()).unwrap();
    assert_eq!(data, serde_json::json!({"account": "acct-a", "amount": 5}));
    assert!(shown["validation"].is_string());
}
