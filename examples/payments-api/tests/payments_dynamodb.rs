//! The payments-api's contract on DynamoDB Local, in both modes: per request, the status,
//! the body and whether it was replayed; the ledger balance after each.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_sdk_dynamodb::Client;
use lambda_http::http::StatusCode;
use lambda_http::{Body, Request, RequestExt, Response};
use lambda_idempotency::http::REPLAYED_HEADER;
use lambda_idempotency::{CommitStrategy, Error};
use lambda_idempotency_test_support as support;
use payments_api::{handle, layer, service, Ledger, Settings, Tables};
use serde_json::{json, Value};
use support::dynamodb::{balance, create_table, create_table_keyed};
use tokio::sync::{Barrier, Notify};
use tower::{Layer, ServiceExt};

const MODES: [CommitStrategy; 2] = [CommitStrategy::Lease, CommitStrategy::Optimistic];

async fn deployment(client: &Client, mode: CommitStrategy) -> Settings {
    let tables = Tables {
        idempotency: create_table(client).await,
        ledger: create_table_keyed(client, "ledger", "account").await,
    };
    Settings::new(tables, mode)
}

fn request(method: &str, path: &str, key: Option<&str>, body: &str) -> Request {
    let mut builder = lambda_http::http::Request::builder()
        .method(method)
        .uri(path);
    if let Some(key) = key {
        builder = builder.header("Idempotency-Key", key);
    }
    let context = support::context_at(SystemTime::now(), Duration::from_secs(10));
    builder
        .body(Body::Text(body.into()))
        .unwrap()
        .with_lambda_context(context)
}

fn pay(key: &str, account: &str, amount: i64) -> Request {
    let body = json!({"account": account, "amount": amount}).to_string();
    request("POST", "/payments", Some(key), &body)
}

/// Status, JSON body and whether it was replayed.
async fn send<S>(api: &S, request: Request) -> (StatusCode, Value, bool)
where
    S: tower::Service<Request, Response = Response<Body>, Error = Error> + Clone,
{
    let response = api.clone().oneshot(request).await.expect("answers");
    let body = match response.body() {
        Body::Text(text) => serde_json::from_str(text).expect("JSON"),
        other => panic!("not text: {other:?}"),
    };
    let replayed = response.headers().get(REPLAYED_HEADER).is_some();
    (response.status(), body, replayed)
}

fn paid(account: &str, amount: i64, balance: i64) -> Value {
    json!({"account": account, "amount": amount, "balance": balance})
}

#[tokio::test]
async fn payments_are_credited_once_and_answered_exactly() {
    let Some(client) = support::dynamodb::client().await else {
        return;
    };
    for mode in MODES {
        let settings = deployment(&client, mode).await;
        let ledger = |account: &'static str| balance(&client, &settings.tables.ledger, account);
        let api = service(client.clone(), &settings);

        let first = send(&api, pay("k-1", "alice", 10)).await;
        assert_eq!(
            first,
            (StatusCode::CREATED, paid("alice", 10, 10), false),
            "{mode:?}"
        );
        let second = send(&api, pay("k-2", "alice", 5)).await;
        assert_eq!(
            second,
            (StatusCode::CREATED, paid("alice", 5, 15), false),
            "{mode:?}"
        );
        // A retry after completion: the stored answer, with the balance of its time.
        let retry = send(&api, pay("k-1", "alice", 10)).await;
        assert_eq!(
            retry,
            (StatusCode::CREATED, paid("alice", 10, 10), true),
            "{mode:?}"
        );
        assert_eq!(ledger("alice").await, 15, "{mode:?}: credited once each");

        // The same key with another amount: 422, nothing applied.
        let reused = send(&api, pay("k-1", "alice", 99)).await;
        assert_eq!(reused.0, StatusCode::UNPROCESSABLE_ENTITY, "{mode:?}");
        // No key: 400, nothing applied.
        let body = json!({"account": "alice", "amount": 1}).to_string();
        let keyless = send(&api, request("POST", "/payments", None, &body)).await;
        assert_eq!(keyless.0, StatusCode::BAD_REQUEST);
        assert_eq!(
            keyless.1["type"],
            "urn:lambda-idempotency:problem:missing-key"
        );

        // Not a payment: 400, stored under its key, nothing applied; a corrected request
        // under a new key goes through.
        let bad = request(
            "POST",
            "/payments",
            Some("k-3"),
            r#"{"account":"bob","amount":"7"}"#,
        );
        let invalid = send(&api, bad).await;
        assert_eq!(invalid.0, StatusCode::BAD_REQUEST, "{mode:?}");
        assert_eq!(
            invalid.1["type"],
            "urn:payments-api:problem:invalid-payment"
        );
        let bad = request(
            "POST",
            "/payments",
            Some("k-3"),
            r#"{"account":"bob","amount":"7"}"#,
        );
        assert!(send(&api, bad).await.2, "the 400 is replayed");
        let corrected = send(&api, pay("k-4", "bob", 7)).await;
        assert_eq!(
            corrected,
            (StatusCode::CREATED, paid("bob", 7, 7), false),
            "{mode:?}"
        );
        // An overflowing balance is refused the same way.
        let overflow = send(&api, pay("k-5", "bob", i64::MAX)).await;
        assert_eq!(overflow.0, StatusCode::BAD_REQUEST, "{mode:?}");
        assert_eq!(overflow.1["detail"], "the balance would overflow");

        // Other routes and methods.
        let elsewhere = send(&api, request("POST", "/refunds", Some("k-6"), "{}")).await;
        assert_eq!(elsewhere.0, StatusCode::NOT_FOUND);
        let get = send(&api, request("GET", "/payments", None, "")).await;
        assert_eq!(get.0, StatusCode::METHOD_NOT_ALLOWED);
        let patch = send(&api, request("PATCH", "/payments", None, "{}")).await;
        assert_eq!(
            patch.0,
            StatusCode::METHOD_NOT_ALLOWED,
            "only POST needs a key"
        );
        let keyless = send(&api, request("POST", "/refunds", None, "{}")).await;
        assert_eq!(
            keyless.0,
            StatusCode::BAD_REQUEST,
            "the key check comes first"
        );

        assert_eq!(ledger("alice").await, 15, "{mode:?}");
        assert_eq!(ledger("bob").await, 7, "{mode:?}");
    }
}

/// Two execution environments get one key at once (lease mode): one 201, one 409 with
/// `Retry-After`; the retry then gets the stored 201.
#[tokio::test]
async fn one_key_at_once_is_one_payment_and_one_409() {
    let Some(client) = support::dynamodb::client().await else {
        return;
    };
    let settings = deployment(&client, CommitStrategy::Lease).await;
    let ledger = Ledger::new(client.clone(), settings.tables.ledger.clone());
    let (started, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let gated = {
        let (started, release) = (started.clone(), release.clone());
        lambda_http::service_fn(move |request| {
            let (ledger, started, release) = (ledger.clone(), started.clone(), release.clone());
            async move {
                started.notify_one();
                release.notified().await;
                handle(ledger, request).await
            }
        })
    };
    let a = layer(client.clone(), &settings).layer(gated);
    let b = service(client.clone(), &settings);

    let running = tokio::spawn(a.clone().oneshot(pay("k-1", "carol", 3)));
    started.notified().await;
    let response = b.clone().oneshot(pay("k-1", "carol", 3)).await.unwrap();
    assert_eq!(response.status(), StatusCode::CONFLICT);
    assert_eq!(response.headers()["retry-after"], "1");
    release.notify_one();
    let created = running.await.unwrap().unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    let retry = send(&b, pay("k-1", "carol", 3)).await;
    assert_eq!(retry, (StatusCode::CREATED, paid("carol", 3, 3), true));
    assert_eq!(balance(&client, &settings.tables.ledger, "carol").await, 3);
}

/// Two payments to one account computed from the same balance (both read before either
/// commits): one commits, the other's condition fails: 409, nothing applied; its retry with
/// the same key is credited on the new balance.
#[tokio::test]
async fn concurrent_payments_to_one_account_never_lose_a_credit() {
    let Some(client) = support::dynamodb::client().await else {
        return;
    };
    for mode in MODES {
        let settings = deployment(&client, mode).await;
        let ledger = Ledger::new(client.clone(), settings.tables.ledger.clone());
        let barrier = Arc::new(Barrier::new(2));
        let both_read = {
            let barrier = barrier.clone();
            lambda_http::service_fn(move |request| {
                let (ledger, barrier) = (ledger.clone(), barrier.clone());
                async move {
                    let answer = handle(ledger, request).await;
                    barrier.wait().await;
                    answer
                }
            })
        };
        let api = layer(client.clone(), &settings).layer(both_read);
        let (x, y) = tokio::join!(
            api.clone().oneshot(pay("k-x", "dave", 4)),
            api.clone().oneshot(pay("k-y", "dave", 6)),
        );
        let mut statuses = [x.unwrap().status(), y.unwrap().status()];
        statuses.sort();
        assert_eq!(
            statuses,
            [StatusCode::CREATED, StatusCode::CONFLICT],
            "{mode:?}"
        );
        let credited = balance(&client, &settings.tables.ledger, "dave").await;
        assert!(
            credited == 4 || credited == 6,
            "{mode:?}: one applied, got {credited}"
        );
        // Each key retried alone: the committed one replays, the refused one applies now.
        let plain = service(client.clone(), &settings);
        let rx = send(&plain, pay("k-x", "dave", 4)).await;
        let ry = send(&plain, pay("k-y", "dave", 6)).await;
        assert_eq!(
            (rx.0, ry.0),
            (StatusCode::CREATED, StatusCode::CREATED),
            "{mode:?}"
        );
        assert!(rx.2 != ry.2, "{mode:?}: one replayed, one executed");
        assert_eq!(
            balance(&client, &settings.tables.ledger, "dave").await,
            10,
            "{mode:?}"
        );
        let last = if rx.2 { &ry } else { &rx };
        assert_eq!(
            last.1["balance"], 10,
            "{mode:?}: the answer is the balance it wrote"
        );
    }
}
