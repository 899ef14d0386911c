//! Sequence-guarded (natural) idempotency, side by side with its raw limit: each order is
//! the first event of its own entity (a ledger item keyed by the order's `eventId`, at
//! sequence 1), so a fresh order is one conditional `UpdateItem` and a duplicate finds its
//! entity applied. There is no Powertools equivalent (Powertools writes a record).

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_dynamodb::Client;
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::idempotent::{Position, Sequence};
use lambda_idempotency::key::KeyError;
use lambda_idempotency::store::{Attr, DynamoDbStore, Write};
use lambda_idempotency::{Completion, Input, SequencedLayer};
use lambda_idempotency_test_support::dynamodb::{counted_client, counted_client_at, CallCounter};
use lambda_runtime::LambdaEvent;
use serde_json::Value;

use crate::raw::at_the_processors_concurrency;
use crate::run::{json_line, tables, Target, OURS, RAW};
use crate::scenario::{batch, context, Sample, Scenario, Timed};

fn order(m: &SqsMessage) -> Result<Value, KeyError> {
    serde_json::from_str(m.body.as_deref().unwrap_or_default()).map_err(|_| KeyError::MissingBody)
}

/// Runs `scenario` over `batches` batches in sequence-guarded mode against `target`: the
/// toolkit's line and the raw limit's.
pub async fn run_sequenced(scenario: &Scenario, batches: usize, target: Target<'_>) -> Vec<Value> {
    let (ours_counter, raw_counter, setup) = (
        CallCounter::default(),
        CallCounter::default(),
        CallCounter::default(),
    );
    let ours_client = counted_client_at(target.endpoint, &ours_counter).await;
    let raw_client = counted_client_at(target.endpoint, &raw_counter).await;
    let setup_client = counted_client(&setup).await.expect("DynamoDB Local");
    let (ours_t, raw_t) = (tables(&setup_client).await, tables(&setup_client).await);
    let ledger = ours_t.ledger.clone();
    let position = move |m: &SqsMessage| -> Result<Position, KeyError> {
        let event_id = order(m)?["eventId"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        Ok(Position {
            table: ledger.clone(),
            key: [("account".to_string(), Attr::s(event_id))].into(),
            sequence: 1,
        })
    };
    let store = DynamoDbStore::new(ours_client, ours_t.idempotency.clone());
    let layer = SequencedLayer::new(store, Sequence::next("sequence", position));
    let ledger = ours_t.ledger.clone();
    let ours = BatchProcessor::new(layer.handler(move |m: SqsMessage| {
        let ledger = ledger.clone();
        async move {
            let order = order(&m)?;
            let credit = Write::update(
                ledger,
                [(
                    "account",
                    Attr::s(order["eventId"].as_str().unwrap_or_default()),
                )],
                "ADD #b :a",
            )
            .name("#b", "balance")
            .value(":a", Attr::n(order["amount"].as_i64().unwrap_or_default()));
            Ok::<_, KeyError>(Completion::new(()).with_write(credit))
        }
    }));
    let plan: Vec<(SqsEvent, SqsEvent)> = (0..batches)
        .map(|b| batch(scenario, "sequenced", b))
        .collect();
    for (prime, _) in plan.iter().filter(|(p, _)| !p.records.is_empty()) {
        ours.process(LambdaEvent::new(prime.clone(), context()))
            .await;
        raw_sequenced(&raw_client, &raw_t.ledger, prime).await;
    }
    ours_counter.reset();
    raw_counter.reset();
    let (mut s_ours, mut s_raw) = (Sample::default(), Sample::default());
    for (b, (_, timed)) in plan.iter().enumerate() {
        // The toolkit and the raw requests take turns going first.
        for ours_turn in [b % 2 == 0, b % 2 == 1] {
            // Each is handed its own copy of the event, and is done with it (drops it) within
            // the timing; the toolkit's answer, the batch report, is dropped after it.
            let event = LambdaEvent::new(timed.clone(), context());
            let timing = Timed::start();
            let report = if ours_turn {
                Some(ours.process(event).await)
            } else {
                raw_sequenced(&raw_client, &raw_t.ledger, &event.payload).await;
                drop(event);
                None
            };
            let (sample, name) = if ours_turn {
                (&mut s_ours, OURS)
            } else {
                (&mut s_raw, RAW)
            };
            let records = timed.records.len();
            timing.finish(sample, records, [scenario.name, name, "sequenced"]);
            if let Some(report) = report {
                assert!(report.response.batch_item_failures.is_empty(), "{report:?}");
            }
        }
    }
    s_ours.count(&ours_counter);
    s_raw.count(&raw_counter);
    vec![
        json_line(scenario, target, OURS, "sequenced", &s_ours),
        json_line(scenario, target, RAW, "sequenced", &s_raw),
    ]
}

/// The raw limit: a redelivered order's entity read first (done if applied), then one
/// conditional `UpdateItem` that credits the order and sets the entity's sequence.
async fn raw_sequenced(client: &Client, ledger: &str, event: &SqsEvent) {
    at_the_processors_concurrency(event.records.iter().map(|m| async move {
        let order = order(m).unwrap();
        let key = AttributeValue::S(order["eventId"].as_str().unwrap().to_string());
        if m.delivered_before() {
            let item = client
                .get_item()
                .table_name(ledger)
                .key("account", key.clone())
                .consistent_read(true)
                .send()
                .await
                .unwrap();
            if item.item().is_some_and(|i| i.contains_key("sequence")) {
                return;
            }
        }
        let _ = client
            .update_item()
            .table_name(ledger)
            .key("account", key)
            .update_expression("SET #s = :s ADD #b :a")
            .condition_expression("attribute_not_exists(#s) OR #s = :p")
            .expression_attribute_names("#s", "sequence")
            .expression_attribute_names("#b", "balance")
            .expression_attribute_values(":s", AttributeValue::N("1".into()))
            .expression_attribute_values(":p", AttributeValue::N("0".into()))
            .expression_attribute_values(":a", AttributeValue::N(order["amount"].to_string()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
    }))
    .await;
}
