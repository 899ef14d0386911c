//! Sequence-guarded handlers (natural idempotency) on DynamoDB Local: each account event
//! carries its number in the account's sequence, and the handler's one ledger update is its
//! own guard. Per delivery: the handler's runs, each record's outcome, `batchItemFailures`,
//! the calls by operation, the capacity (refused writes counted as DynamoDB charges them)
//! and the account's balance and sequence.
use lambda_idempotency_test_support as support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use aws_sdk_dynamodb::types::AttributeValue;
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::idempotent::{Position, Sequence};
use lambda_idempotency::key::KeyError;
use lambda_idempotency::store::{Attr, DynamoDbStore, Write};
use lambda_idempotency::{Completion, Outcome, SequencedLayer};
use support::dynamodb::{client_for_attempts, counted_client, create_table_keyed, CallCounter};
use support::harness::fault_proxy::{FaultProxy, Scripted};
use support::{invocation, outcomes, reported};

const REMAINING: Duration = Duration::from_secs(30);

/// Events of acct-1 numbered `sequences`, each crediting 5, received `receive_count` times.
fn events(sequences: &[u64], receive_count: u32) -> SqsEvent {
    let mut event = SqsEvent::default();
    for n in sequences {
        let mut m = SqsMessage::default();
        m.message_id = Some(format!("m-{n}"));
        m.body = Some(format!(
            r#"{{"account":"acct-1","sequence":{n},"amount":5}}"#
        ));
        m.attributes
            .insert("ApproximateReceiveCount".into(), receive_count.to_string());
        m.event_source_arn = Some("arn:aws:sqs:us-east-1:1:accounts.fifo".into());
        m.attributes
            .insert("MessageGroupId".into(), "acct-1".into());
        event.records.push(m);
    }
    event
}

fn position(ledger: String) -> impl Fn(&SqsMessage) -> Result<Position, KeyError> + Clone {
    move |m: &SqsMessage| {
        let body: serde_json::Value = serde_json::from_str(m.body.as_deref().unwrap_or(""))
            .map_err(|_| KeyError::MissingBody)?;
        Ok(Position {
            table: ledger.clone(),
            key: [(
                "account".to_string(),
                Attr::s(body["account"].as_str().unwrap()),
            )]
            .into(),
            sequence: body["sequence"].as_u64().ok_or(KeyError::MissingBody)?,
        })
    }
}

struct Rig {
    counter: CallCounter,
    client: aws_sdk_dynamodb::Client,
    store: DynamoDbStore,
    ledger: String,
    runs: Arc<AtomicUsize>,
}

async fn rig() -> Option<Rig> {
    let counter = CallCounter::default();
    let client = counted_client(&counter).await?;
    let ledger = create_table_keyed(&client, "ledger", "account").await;
    Some(Rig {
        counter,
        store: DynamoDbStore::new(client.clone(), "unused-idempotency-table"),
        client,
        ledger,
        runs: Arc::default(),
    })
}

impl Rig {
    async fn deliver(
        &self,
        store: &DynamoDbStore,
        event: SqsEvent,
    ) -> (Vec<Outcome>, Vec<String>, BTreeMap<&'static str, usize>) {
        let sequence = Sequence::next("sequence", position(self.ledger.clone()));
        let layer = SequencedLayer::new(store.clone(), sequence);
        let (ledger, runs) = (self.ledger.clone(), self.runs.clone());
        let processor = BatchProcessor::new(layer.handler(move |m: SqsMessage| {
            let (ledger, runs) = (ledger.clone(), runs.clone());
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                let body: serde_json::Value = serde_json::from_str(m.body.as_deref().unwrap())?;
                let write = Write::update(
                    ledger,
                    [("account", Attr::s(body["account"].as_str().unwrap()))],
                    "ADD #b :a",
                )
                .name("#b", "balance")
                .value(":a", Attr::n(body["amount"].as_i64().unwrap()));
                Ok::<_, serde_json::Error>(Completion::new(()).with_write(write))
            }
        }));
        self.counter.reset();
        let report = processor
            .process(invocation(event, SystemTime::now(), REMAINING))
            .await;
        (outcomes(&report), reported(&report), self.counter.all())
    }

    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    /// The account's balance and sequence.
    async fn account(&self) -> (i64, u64) {
        let item = self
            .client
            .get_item()
            .table_name(&self.ledger)
            .key("account", AttributeValue::S("acct-1".into()))
            .consistent_read(true)
            .send()
            .await
            .unwrap()
            .item
            .unwrap_or_default();
        let n = |name: &str| item.get(name).and_then(|v| v.as_n().ok()).cloned();
        (
            n("balance").map_or(0, |v| v.parse().unwrap()),
            n("sequence").map_or(0, |v| v.parse().unwrap()),
        )
    }
}

fn calls(list: &[(&'static str, usize)]) -> BTreeMap<&'static str, usize> {
    list.iter().copied().collect()
}

#[tokio::test]
async fn each_fresh_event_is_one_conditional_write_of_one_unit() {
    let Some(rig) = rig().await else { return };
    let (first, failures, made) = rig.deliver(&rig.store, events(&[1, 2, 3], 1)).await;
    assert_eq!(first, [Outcome::Executed; 3]);
    assert!(failures.is_empty());
    assert_eq!(made, calls(&[("UpdateItem", 3)]), "no idempotency record");
    assert_eq!(
        rig.counter.capacity_units(),
        3.0,
        "one write unit per event"
    );
    assert_eq!(rig.account().await, (15, 3));
    assert_eq!(rig.runs(), 3);
}

#[tokio::test]
async fn a_redelivered_duplicate_is_read_not_run_and_a_producer_retry_is_refused() {
    let Some(rig) = rig().await else { return };
    rig.deliver(&rig.store, events(&[1, 2], 1)).await;
    // Redelivered by SQS: one consistent read each, no handler, no write.
    let (again, failures, made) = rig.deliver(&rig.store, events(&[1, 2], 2)).await;
    assert_eq!(again, [Outcome::Replayed; 2]);
    assert!(failures.is_empty());
    assert_eq!(made, calls(&[("GetItem", 2)]));
    assert_eq!(rig.counter.refused_write_units(), 0.0);
    assert_eq!(rig.runs(), 2, "the handler did not run again");
    // Unmarked (a producer's retry): the handler runs, its write is refused (one unit).
    let (retry, _, made) = rig.deliver(&rig.store, events(&[2], 1)).await;
    assert_eq!(retry, [Outcome::Replayed]);
    assert_eq!(made, calls(&[("UpdateItem", 1)]));
    assert_eq!(rig.counter.refused_write_units(), 1.0);
    assert_eq!(rig.runs(), 3);
    assert_eq!(rig.account().await, (10, 2), "applied once each");
}

#[tokio::test]
async fn an_event_ahead_of_its_turn_is_reported_and_applies_after_the_gap_closes() {
    let Some(rig) = rig().await else { return };
    rig.deliver(&rig.store, events(&[1], 1)).await;
    // Event 3 before 2 (on a FIFO queue: the rest of the group waits behind it).
    let (ahead, failures, _) = rig.deliver(&rig.store, events(&[3], 1)).await;
    assert_eq!(ahead, [Outcome::OutOfOrder]);
    assert_eq!(failures, ["m-3"]);
    assert_eq!(rig.account().await, (5, 1), "nothing written");
    let (then, failures, _) = rig.deliver(&rig.store, events(&[2, 3], 2)).await;
    assert_eq!(then, [Outcome::Executed; 2]);
    assert!(failures.is_empty());
    assert_eq!(rig.account().await, (15, 3));
}

#[tokio::test]
async fn a_lost_answer_resent_by_the_sdk_applies_once() {
    let Some(rig) = rig().await else { return };
    let endpoint = std::env::var("AWS_ENDPOINT_URL_DYNAMODB").unwrap();
    let proxy = FaultProxy::start(&endpoint, 13).await;
    let client = client_for_attempts(&proxy.endpoint(), Duration::from_secs(2), 3).await;
    let proxied = DynamoDbStore::new(client, "unused-idempotency-table");
    proxy.script("UpdateItem", Scripted::LoseAnswer);
    let (outcome, failures, _) = rig.deliver(&proxied, events(&[1], 1)).await;
    assert!(proxy.unused_script().is_empty());
    // The resent write finds the entity at 1: already applied, acknowledged.
    assert_eq!(outcome, [Outcome::Replayed]);
    assert!(failures.is_empty());
    assert_eq!(rig.runs(), 1);
    assert_eq!(rig.account().await, (5, 1));
}
