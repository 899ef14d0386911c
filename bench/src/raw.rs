//! The raw limit: the DynamoDB requests each mode must make, issued directly.

use std::collections::{HashMap, HashSet};
use std::future::Future;

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes, Put, TransactWriteItem, Update};
use aws_sdk_dynamodb::Client;
use futures_util::StreamExt;
use lambda_idempotency::batch::Scheduling;
use lambda_idempotency::CommitStrategy;
use order_consumer::Tables;
use serde_json::Value;

/// The protocol's takeover condition (no record, expired, or lease elapsed), as the raw
/// requests send it, at a fixed "now": their stored times are fixed too.
const RAW_TAKEOVER: &str =
    "attribute_not_exists(id) OR #exp < :now_secs OR (#status = :inprogress AND #ipe < :now_ms)";

fn raw_takeover_names() -> HashMap<String, String> {
    [
        ("#exp", "expiration"),
        ("#status", "status"),
        ("#ipe", "in_progress_expiration"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn raw_takeover_values() -> HashMap<String, AttributeValue> {
    HashMap::from([
        (
            ":now_secs".to_string(),
            AttributeValue::N("1795302000".into()),
        ),
        (
            ":now_ms".to_string(),
            AttributeValue::N("1795302000000".into()),
        ),
        (
            ":inprogress".to_string(),
            AttributeValue::S("INPROGRESS".into()),
        ),
    ])
}

/// An order message's body, parsed once.
fn order_of(m: &SqsMessage) -> Value {
    serde_json::from_str(m.body.as_deref().unwrap()).unwrap()
}

/// The record key of `order` in the raw requests: as long as the toolkit's (its 15-character
/// prefix `order-consumer#`, then 64 hexadecimal digits), so that both implementations send
/// and read back the same number of bytes per key.
fn raw_id(order: &Value) -> String {
    format!("raw-dynamodb-0#{:0>64}", order["eventId"].as_str().unwrap())
}

/// The raw limit: the requests each mode must make, issued directly, no toolkit logic. The
/// records SQS delivered before are looked up first with one strongly consistent
/// `BatchGetItem` (the pre-check); those found are done, and the rest, with the first
/// deliveries (which do not wait for the lookup), make their conditional writes. The two
/// groups run side by side, each on the processor's schedule, where the processor shares
/// one limit between all the batch's records (its first deliveries can wait for a slot
/// behind redelivered records waiting for the lookup). That differs only for a batch of
/// more records than the limit with records in both groups, which no scenario has: its
/// batches of 10 fit the limit, and its batch of 100 is all first deliveries.
pub async fn raw_batch(client: &Client, t: &Tables, mode: CommitStrategy, event: &SqsEvent) {
    let (redelivered, fresh): (Vec<&SqsMessage>, Vec<&SqsMessage>) =
        event.records.iter().partition(|m| {
            m.attributes
                .get("ApproximateReceiveCount")
                .is_some_and(|c| c != "1")
        });
    let looked_up = async {
        if redelivered.is_empty() {
            return;
        }
        // Each body parsed once, each key built once.
        let redelivered: Vec<(Value, String)> = redelivered
            .iter()
            .map(|m| {
                let order = order_of(m);
                let id = raw_id(&order);
                (order, id)
            })
            .collect();
        let found = read_ids(
            client,
            &t.idempotency,
            redelivered.iter().map(|(_, id)| id.clone()),
        )
        .await;
        let rest = redelivered
            .into_iter()
            .filter(|(_, id)| !found.contains(id));
        raw_records(client, t, mode, rest).await;
    };
    let fresh = fresh.into_iter().map(|m| {
        let order = order_of(m);
        let id = raw_id(&order);
        (order, id)
    });
    tokio::join!(looked_up, raw_records(client, t, mode, fresh));
}

/// The raw pre-check's read: one strongly consistent `BatchGetItem` of `ids` (under the key
/// attribute `id`) in `table`, answering the ids found.
pub async fn read_ids(
    client: &Client,
    table: &str,
    ids: impl Iterator<Item = String>,
) -> HashSet<String> {
    let keys = KeysAndAttributes::builder()
        .set_keys(Some(
            ids.map(|id| HashMap::from([("id".to_string(), AttributeValue::S(id))]))
                .collect(),
        ))
        .consistent_read(true)
        .build()
        .unwrap();
    let answer = client
        .batch_get_item()
        .request_items(table, keys)
        .send()
        .await
        .unwrap();
    answer
        .responses()
        .and_then(|r| r.get(table))
        .into_iter()
        .flatten()
        .filter_map(|item| item.get("id").and_then(|v| v.as_s().ok()).cloned())
        .collect()
}

/// The writes of `records` (each an order and its key).
async fn raw_records(
    client: &Client,
    t: &Tables,
    mode: CommitStrategy,
    records: impl Iterator<Item = (Value, String)>,
) {
    let s = |v: &str| AttributeValue::S(v.to_string());
    at_the_processors_concurrency(records.map(|(order, id)| async move {
        let ledger = Update::builder()
            .table_name(&t.ledger)
            .key("account", s(order["account"].as_str().unwrap()))
            .update_expression("ADD #b :a")
            .expression_attribute_names("#b", "balance")
            .expression_attribute_values(":a", AttributeValue::N(order["amount"].to_string()))
            .build()
            .unwrap();
        let marker = match mode {
            CommitStrategy::Lease => {
                // The same attributes as the toolkit's record, and the old item back on a
                // refusal (what a duplicate needs to be answered without a second read).
                let taken = client
                    .put_item()
                    .table_name(&t.idempotency)
                    .item("id", s(&id))
                    .item("status", s("INPROGRESS"))
                    .item("expiration", AttributeValue::N("1795306000".into()))
                    .item(
                        "in_progress_expiration",
                        AttributeValue::N("1795302060000".into()),
                    )
                    .item("lease_owner", s("00000000-0000-4000-8000-000000000000"))
                    .item("validation", s(&format!("v2:{}", "0".repeat(64))))
                    .condition_expression(RAW_TAKEOVER)
                    .set_expression_attribute_names(Some(raw_takeover_names()))
                    .set_expression_attribute_values(Some(raw_takeover_values()))
                    .return_values_on_condition_check_failure(
                        aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure::AllOld,
                    )
                    .send()
                    .await;
                if taken.is_err() {
                    return; // a duplicate: one refused call
                }
                TransactWriteItem::builder()
                    .update(
                        Update::builder()
                            .table_name(&t.idempotency)
                            .key("id", s(&id))
                            // The toolkit's final state: status, data, expiry, lease removed.
                            .update_expression("SET #s = :c, #d = :d, #e = :e REMOVE #i")
                            .expression_attribute_names("#d", "data")
                            .expression_attribute_names("#e", "expiration")
                            .expression_attribute_names("#i", "in_progress_expiration")
                            .expression_attribute_values(
                                ":e",
                                AttributeValue::N("1795306000".into()),
                            )
                            .expression_attribute_values(
                                ":d",
                                s(r#"{"account":"acct-0","amount":-3}"#),
                            )
                            .condition_expression("#s = :p AND #o = :o")
                            .expression_attribute_names("#o", "lease_owner")
                            .expression_attribute_values(
                                ":o",
                                s("00000000-0000-4000-8000-000000000000"),
                            )
                            .expression_attribute_names("#s", "status")
                            .expression_attribute_values(":c", s("COMPLETED"))
                            .expression_attribute_values(":p", s("INPROGRESS"))
                            .return_values_on_condition_check_failure(
                                aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure::AllOld,
                            )
                            .build()
                            .unwrap(),
                    )
                    .build()
            }
            _ => TransactWriteItem::builder()
                .put(
                    Put::builder()
                        .table_name(&t.idempotency)
                        .item("id", s(&id))
                        .item("status", s("COMPLETED"))
                        .item("expiration", AttributeValue::N("1795306000".into()))
                        .item("lease_owner", s("00000000-0000-4000-8000-000000000000"))
                        .item("validation", s(&format!("v2:{}", "0".repeat(64))))
                        .item("data", s(r#"{"account":"acct-0","amount":-3}"#))
                        .condition_expression(RAW_TAKEOVER)
                        .set_expression_attribute_names(Some(raw_takeover_names()))
                        .set_expression_attribute_values(Some(raw_takeover_values()))
                        .return_values_on_condition_check_failure(
                            aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure::AllOld,
                        )
                        .build()
                        .unwrap(),
                )
                .build(),
        };
        // A token per attempt, as the toolkit sends (its owner token is new for each
        // delivery), so a retried commit is recognised; reusing the priming run's token
        // would turn a duplicate into DynamoDB's cheap replay of that earlier request.
        let token = uuid::Uuid::new_v4().simple().to_string();
        let _ = client
            .transact_write_items()
            .client_request_token(token)
            .transact_items(marker)
            .transact_items(TransactWriteItem::builder().update(ledger).build())
            .send()
            .await;
    }))
    .await;
}

/// The most records the batch processor runs at once by default (the bench's processors
/// keep the default).
pub fn processors_limit() -> usize {
    let Scheduling::Auto { limit } = Scheduling::default() else {
        unreachable!("the processor's default mode is Auto");
    };
    limit.max(1)
}

/// Runs `records` on the toolkit's schedule, so that the raw requests are measured at its
/// concurrency: at most the batch processor's default limit at once, a new record starting
/// as soon as any running one finishes.
pub async fn at_the_processors_concurrency<F: Future<Output = ()>>(
    records: impl Iterator<Item = F>,
) {
    futures_util::stream::iter(records)
        .buffer_unordered(processors_limit())
        .for_each(|()| async {})
        .await;
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::sync::Notify;

    use super::{at_the_processors_concurrency, processors_limit};

    /// With one record more than the limit: the first `limit` records run at once (each
    /// but the first waits until all have started), and never more; the last starts while
    /// the first is still running, once any other has finished (an order-keeping schedule would hold it until
    /// the first is done, and so run fewer records at once than the toolkit).
    #[tokio::test]
    async fn at_most_the_limit_run_at_once_and_a_record_starts_as_soon_as_any_finishes() {
        let limit = processors_limit();
        let first_may_finish = Arc::new(Notify::new());
        let (started, running, most) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
        );
        let records = (0..=limit).map(|i| {
            let first_may_finish = first_may_finish.clone();
            let (started, running, most) = (started.clone(), running.clone(), most.clone());
            async move {
                most.fetch_max(running.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                started.fetch_add(1, Ordering::SeqCst);
                // Running for one more poll at least, so that the records started together
                // are counted together.
                tokio::task::yield_now().await;
                if i == 0 {
                    first_may_finish.notified().await;
                } else if i == limit {
                    first_may_finish.notify_one();
                } else {
                    while started.load(Ordering::SeqCst) < limit {
                        tokio::task::yield_now().await;
                    }
                }
                running.fetch_sub(1, Ordering::SeqCst);
            }
        });
        let ran = tokio::time::timeout(
            Duration::from_secs(5),
            at_the_processors_concurrency(records),
        )
        .await;
        assert!(
            ran.is_ok(),
            "the first limit did not start together, or the last record waited for the first"
        );
        assert_eq!(most.load(Ordering::SeqCst), limit, "records at once");
    }
}
