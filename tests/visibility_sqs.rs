//! Retry shaping with the visibility timeout, against a real SQS-compatible server on
//! loopback (moto's, started by `scripts/test.sh`; `LAMBDA_IDEMPOTENCY_SQS_URL`). Messages are
//! sent, received (with their receipt handles and receive counts), processed as a batch, and
//! received again: a `locked` message stays away until its holder's lease ends, a failed one
//! comes back after its backoff, an acknowledged one is untouched.
#![cfg(feature = "sqs-visibility")]

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::clock::{epoch_ms, epoch_secs};
use lambda_idempotency::key::{IdempotencyKey, JsonPointer};
use lambda_idempotency::record::OwnerToken;
use lambda_idempotency::sqs::{Backoff, VisibilityLayer};
use lambda_idempotency::store::{Acquire, AcquireRequest, InMemoryStore, Store};
use lambda_idempotency::testing::invocation;
use lambda_idempotency::{Config, IdempotencyLayer};
use tower::{Layer, ServiceExt};

/// An SQS client of `endpoint`, with test credentials.
async fn sqs_client(endpoint: &str) -> aws_sdk_sqs::Client {
    let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "local", "local", None, None, "tests",
        ))
        .endpoint_url(endpoint)
        .load()
        .await;
    aws_sdk_sqs::Client::new(&config)
}

async fn client() -> Option<aws_sdk_sqs::Client> {
    let url = match std::env::var("LAMBDA_IDEMPOTENCY_SQS_URL") {
        Ok(url) if !url.is_empty() => url,
        _ if std::env::var("LAMBDA_IDEMPOTENCY_REQUIRE_SQS").is_ok_and(|v| v == "1") => {
            panic!("LAMBDA_IDEMPOTENCY_SQS_URL is not set but the SQS server is required: run scripts/test.sh")
        }
        _ => {
            eprintln!("SKIPPED: LAMBDA_IDEMPOTENCY_SQS_URL is not set (scripts/test.sh starts moto's server)");
            return None;
        }
    };
    let client = sqs_client(&url).await;
    client
        .list_queues()
        .send()
        .await
        .unwrap_or_else(|e| panic!("the SQS server at {url} is unreachable: {e:?}"));
    Some(client)
}

/// A queue whose messages come back at once unless their visibility is changed.
async fn queue(client: &aws_sdk_sqs::Client) -> (String, String) {
    let name = format!("visibility-{}", OwnerToken::generate().as_str());
    let url = client
        .create_queue()
        .queue_name(&name)
        .attributes(QueueAttributeName::VisibilityTimeout, "0")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    (url, format!("arn:aws:sqs:us-east-1:123456789012:{name}"))
}

/// Receives what is visible now, as Lambda hands it over: the ids in the bodies.
async fn receive(
    client: &aws_sdk_sqs::Client,
    url: &str,
    arn: &str,
) -> (SqsEvent, BTreeSet<String>) {
    let out = client
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .send()
        .await
        .unwrap();
    let mut event = SqsEvent::default();
    let mut ids = BTreeSet::new();
    for m in out.messages() {
        let mut message = SqsMessage::default();
        message.message_id = m.message_id.clone();
        message.receipt_handle = m.receipt_handle.clone();
        message.body = m.body.clone();
        message.event_source_arn = Some(arn.to_string());
        if let Some(count) = m
            .attributes()
            .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
        {
            message
                .attributes
                .insert("ApproximateReceiveCount".into(), count.clone());
        }
        let body: serde_json::Value = serde_json::from_str(m.body().unwrap()).unwrap();
        ids.insert(body["id"].as_str().unwrap().to_string());
        event.records.push(message);
    }
    (event, ids)
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn locked_messages_wait_for_the_lease_and_failed_ones_back_off() {
    let Some(client) = client().await else { return };
    let (url, arn) = queue(&client).await;
    for id in ["ok", "locked", "fail"] {
        client
            .send_message()
            .queue_url(&url)
            .message_body(format!(r#"{{"id":"{id}"}}"#))
            .send()
            .await
            .unwrap();
    }
    // "locked" is held by another invocation for a minute.
    let store = InMemoryStore::new();
    let now = SystemTime::now();
    let held = AcquireRequest {
        key: IdempotencyKey::derive("vis", b"locked"),
        owner: OwnerToken::generate(),
        now,
        lease_expiration_ms: epoch_ms(now + Duration::from_secs(60)),
        expiration_secs: epoch_secs(now + Duration::from_secs(3600)),
        validation: None,
    };
    assert_eq!(store.acquire(&held).await.unwrap(), Acquire::Acquired);
    let layer = IdempotencyLayer::new(store)
        .with_key(JsonPointer::new("/id"))
        .with_config(Config::new().with_key_prefix("vis"));
    let processor = BatchProcessor::new(layer.handler(|m: SqsMessage| async move {
        if m.body.as_deref() == Some(r#"{"id":"fail"}"#) {
            return Err(std::io::Error::other("downstream is down"));
        }
        Ok(1u8)
    }));
    let backoff = Backoff {
        base: Duration::from_secs(1),
        max: Duration::from_secs(1),
    };
    let shaped = VisibilityLayer::new(client.clone())
        .with_backoff(backoff)
        .layer(processor);

    let (event, ids) = receive(&client, &url, &arn).await;
    assert_eq!(ids, set(&["fail", "locked", "ok"]));
    let response = shaped
        .oneshot(invocation(event.clone(), Duration::from_secs(30)))
        .await
        .unwrap();
    let reported: BTreeSet<String> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect();
    let id_of = |name: &str| {
        event
            .records
            .iter()
            .find(|m| m.body.as_deref() == Some(&format!(r#"{{"id":"{name}"}}"#)))
            .and_then(|m| m.message_id.clone())
            .unwrap()
    };
    assert_eq!(
        reported,
        [id_of("fail"), id_of("locked")].into_iter().collect()
    );
    // At once: only the acknowledged message (which Lambda would delete) is visible.
    let (_, now_visible) = receive(&client, &url, &arn).await;
    assert_eq!(now_visible, set(&["ok"]));
    // After the backoff (at most 1 s): the failed one is back; the locked one is not.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (_, later) = receive(&client, &url, &arn).await;
    assert_eq!(later, set(&["fail", "ok"]));
}

#[tokio::test]
async fn a_change_that_fails_leaves_the_response_as_it_is() {
    let Some(client) = client().await else { return };
    let (_, arn) = queue(&client).await;
    let mut message = SqsMessage::default();
    message.message_id = Some("m-1".into());
    message.receipt_handle = Some("not-a-receipt-handle".into());
    message.body = Some(r#"{"id":"fail"}"#.into());
    message.event_source_arn = Some(arn);
    let mut event = SqsEvent::default();
    event.records.push(message);
    let layer = IdempotencyLayer::new(InMemoryStore::new()).with_key(JsonPointer::new("/id"));
    let processor = BatchProcessor::new(layer.handler(|_m: SqsMessage| async move {
        Err::<u8, _>(std::io::Error::other("downstream is down"))
    }));
    let response = VisibilityLayer::new(client)
        .layer(processor)
        .oneshot(invocation(event, Duration::from_secs(30)))
        .await
        .unwrap();
    assert_eq!(response.batch_item_failures.len(), 1);
    assert_eq!(response.batch_item_failures[0].item_identifier, "m-1");
}

/// An SQS client of a loopback endpoint that accepts connections and never answers, and
/// the task holding them (abort it when done). No server needed.
async fn silent_sqs() -> (aws_sdk_sqs::Client, tokio::task::JoinHandle<()>) {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", silent.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            open.push(socket);
        }
    });
    let client = sqs_client(&endpoint).await;
    (client, held)
}

/// `n` messages of the `orders` queue, each with a receipt handle.
fn failing_messages(n: usize) -> SqsEvent {
    let mut event = SqsEvent::default();
    for i in 0..n {
        let mut message = SqsMessage::default();
        message.message_id = Some(format!("m-{i}"));
        message.receipt_handle = Some(format!("handle-{i}"));
        message.body = Some(format!(r#"{{"id":"fail-{i}"}}"#));
        message.event_source_arn = Some("arn:aws:sqs:us-east-1:123456789012:orders".into());
        event.records.push(message);
    }
    event
}

/// `event` processed by a handler that always fails (every message reported), with the
/// retry shaping of `client`, `remaining` before the invocation deadline.
async fn process_failing(
    client: aws_sdk_sqs::Client,
    event: SqsEvent,
    remaining: Duration,
) -> aws_lambda_events::sqs::SqsBatchResponse {
    let layer = IdempotencyLayer::new(InMemoryStore::new()).with_key(JsonPointer::new("/id"));
    let processor = BatchProcessor::new(layer.handler(|_m: SqsMessage| async move {
        Err::<u8, _>(std::io::Error::other("downstream is down"))
    }))
    .with_deadline_margin(Duration::from_millis(100));
    VisibilityLayer::new(client)
        .layer(processor)
        .oneshot(invocation(event, remaining))
        .await
        .unwrap()
}

/// An SQS endpoint that never answers must not hold the response past the deadline (a late
/// response retries the whole batch): the changes are abandoned just before it. No server
/// needed: a loopback listener that accepts and stays silent.
#[tokio::test]
async fn a_hung_change_is_abandoned_before_the_deadline() {
    let (client, held) = silent_sqs().await;
    let started = std::time::Instant::now();
    let answered = tokio::time::timeout(
        Duration::from_secs(10),
        process_failing(client, failing_messages(1), Duration::from_secs(2)),
    )
    .await
    .expect("answered before the deadline");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(answered.batch_item_failures.len(), 1);
    held.abort();
}

/// A batch's changes get a time limit together (`sqs::CHANGES_LIMIT`, 5 s), besides the
/// deadline: 100 reported messages (ten calls) to an endpoint that accepts and never answers
/// hold the response a few seconds, not until the deadline (a 15-minute function would hold
/// its acknowledged messages, its concurrency and its bill that long). (Found in review:
/// the response came 100 ms before the 30 s deadline before the fix.)
#[tokio::test]
async fn many_hung_changes_are_given_up_together() {
    let (client, held) = silent_sqs().await;
    let started = std::time::Instant::now();
    let answered = process_failing(client, failing_messages(100), Duration::from_secs(30)).await;
    let elapsed = started.elapsed();
    held.abort();
    assert_eq!(answered.batch_item_failures.len(), 100);
    assert!(
        elapsed < Duration::from_secs(8),
        "the response took {elapsed:?} for a batch processed in milliseconds"
    );
}

/// A large batch's changes to a healthy but slow endpoint all go out within the time limit:
/// 5,000 failed messages are 500 calls, each answered 15 ms late by a proxy in front of the
/// SQS server; sent one after another they would need 7.5 s of the 5 s. (Found in review:
/// 202 of 500 calls were made before the fix.)
#[tokio::test]
async fn a_large_batchs_changes_all_go_out_within_the_limit() {
    use lambda_idempotency_test_support::harness::fault_proxy::{FaultProxy, FaultRates};
    let Some(_) = client().await else { return };
    let url = std::env::var("LAMBDA_IDEMPOTENCY_SQS_URL").unwrap();
    let proxy = FaultProxy::start(&url, 7).await;
    proxy.set_slow_by(Duration::from_millis(15));
    proxy.set_rates(FaultRates {
        slow: 1.0,
        ..FaultRates::default()
    });
    let client = sqs_client(&proxy.endpoint()).await;
    let answered = process_failing(client, failing_messages(5_000), Duration::from_secs(60)).await;
    assert_eq!(answered.batch_item_failures.len(), 5_000);
    assert_eq!(
        proxy
            .counts
            .slowed
            .load(std::sync::atomic::Ordering::SeqCst),
        500,
        "calls made: {}",
        proxy.counts.summary()
    );
}
