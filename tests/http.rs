//! HTTP idempotency (`http::IdempotentHttpLayer`) on the embedded store and on DynamoDB
//! Local: per request, the status and headers answered, how many times the handler ran, and
//! what the store holds.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use lambda_http::http::{Method, StatusCode};
use lambda_http::{Body, Request, RequestExt, Response};
use lambda_idempotency::http::{IdempotentHttpLayer, REPLAYED_HEADER};
use lambda_idempotency::store::{InMemoryStore, Store};
use lambda_idempotency::{Error, IdempotencyLayer};
use lambda_idempotency_test_support::context_at;
use lambda_idempotency_test_support::dynamodb::fresh_store;
use tokio::sync::Notify;
use tower::{BoxError, Layer, ServiceExt};

/// A handler that answers the statuses it is given in turn (then 201), counts its runs and
/// may wait at a gate.
#[derive(Clone, Default)]
struct Handler {
    runs: Arc<AtomicUsize>,
    statuses: Arc<Mutex<Vec<u16>>>,
    gate: Option<(Arc<Notify>, Arc<Notify>)>,
}

impl Handler {
    fn answering(statuses: &[u16]) -> Self {
        Self {
            statuses: Arc::new(Mutex::new(statuses.iter().rev().copied().collect())),
            ..Self::default()
        }
    }

    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    async fn handle(self, request: Request) -> Result<Response<Body>, BoxError> {
        let run = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some((started, release)) = &self.gate {
            started.notify_one();
            release.notified().await;
        }
        let status = self.statuses.lock().unwrap().pop().unwrap_or(201);
        if status == 599 {
            return Err("the handler failed".into());
        }
        let body = match request.body() {
            Body::Text(text) => text.clone(),
            _ => String::new(),
        };
        Ok(Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .header("set-cookie", format!("run={run}"))
            .body(Body::Text(format!(r#"{{"run":{run},"echo":{body:?}}}"#)))
            .unwrap())
    }
}

/// The API on `store`: one layer, as one Lambda execution environment has.
fn service<St: Store + Clone>(store: St, handler: &Handler) -> impl Api {
    let handler = handler.clone();
    IdempotentHttpLayer::new(IdempotencyLayer::new(store))
        .layer(lambda_http::service_fn(move |r| handler.clone().handle(r)))
}

trait Api:
    tower::Service<Request, Response = Response<Body>, Error = Error, Future: Send + 'static>
    + Clone
    + Send
    + 'static
{
}

impl<T> Api for T where
    T: tower::Service<Request, Response = Response<Body>, Error = Error, Future: Send + 'static>
        + Clone
        + Send
        + 'static
{
}

fn request(method: Method, key: Option<&str>, body: &str) -> Request {
    let mut builder = lambda_http::http::Request::builder()
        .method(method)
        .uri("/payments");
    if let Some(key) = key {
        builder = builder.header("Idempotency-Key", key);
    }
    let mut context = context_at(SystemTime::now(), Duration::from_secs(30));
    context.invoked_function_arn = "arn:aws:lambda:eu-west-1:123456789012:function:api".into();
    builder
        .body(Body::Text(body.into()))
        .unwrap()
        .with_lambda_context(context)
}

fn post(key: &str, body: &str) -> Request {
    request(Method::POST, Some(key), body)
}

async fn send(service: &impl Api, request: Request) -> Response<Body> {
    service
        .clone()
        .oneshot(request)
        .await
        .expect("answers every request")
}

fn text(response: &Response<Body>) -> String {
    match response.body() {
        Body::Text(text) => text.clone(),
        other => panic!("not text: {other:?}"),
    }
}

fn problem_type(response: &Response<Body>) -> String {
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    let body: serde_json::Value = serde_json::from_str(&text(response)).unwrap();
    assert_eq!(body["status"], response.status().as_u16());
    body["type"].as_str().unwrap().to_owned()
}

fn replayed(response: &Response<Body>) -> bool {
    response.headers().get(REPLAYED_HEADER).is_some()
}

async fn replays_stored_responses<St: Store + Clone>(store: St) {
    let handler = Handler::default();
    let api = service(store, &handler);

    let first = send(&api, post("k-1", r#"{"amount":5}"#)).await;
    assert_eq!(first.status(), StatusCode::CREATED);
    assert_eq!(
        first.headers()["set-cookie"],
        "run=1",
        "the first caller gets every header"
    );
    assert!(!replayed(&first));
    let body = text(&first);

    // A retry after completion: the stored response, marked, without the unstored header.
    for _ in 0..2 {
        let again = send(&api, post("k-1", r#"{ "amount" : 5 }"#)).await;
        assert_eq!(again.status(), StatusCode::CREATED);
        assert_eq!(text(&again), body);
        assert_eq!(again.headers()["content-type"], "application/json");
        assert_eq!(again.headers()[REPLAYED_HEADER], "true");
        assert!(again.headers().get("set-cookie").is_none());
    }
    assert_eq!(handler.runs(), 1);

    // The same key with another body: 422, nothing run.
    let reused = send(&api, post("k-1", r#"{"amount":6}"#)).await;
    assert_eq!(reused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        problem_type(&reused),
        "urn:lambda-idempotency:problem:key-reused"
    );
    // No key: 400, nothing run. A GET needs none and is not stored.
    let missing = send(&api, request(Method::POST, None, "{}")).await;
    assert_eq!(missing.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        problem_type(&missing),
        "urn:lambda-idempotency:problem:missing-key"
    );
    let long = "k".repeat(256);
    let invalid = send(&api, post(&long, "{}")).await;
    assert_eq!(
        problem_type(&invalid),
        "urn:lambda-idempotency:problem:invalid-key"
    );
    assert_eq!(handler.runs(), 1);
    for run in [2, 3] {
        let get = send(&api, request(Method::GET, Some("k-1"), "")).await;
        assert_eq!(get.headers()["set-cookie"], format!("run={run}"));
        assert!(!replayed(&get));
    }
}

async fn stores_four_hundreds_not_five_hundreds<St: Store + Clone>(store: St) {
    // 503, then a handler error, then 201 for one key; 400 for another.
    let handler = Handler::answering(&[503, 599, 201, 400]);
    let api = service(store, &handler);

    let unavailable = send(&api, post("k-5", "{}")).await;
    assert_eq!(unavailable.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        unavailable.headers()["set-cookie"],
        "run=1",
        "the handler's own 503"
    );
    let failed = send(&api, post("k-5", "{}")).await;
    assert_eq!(failed.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        problem_type(&failed),
        "urn:lambda-idempotency:problem:failed"
    );
    let created = send(&api, post("k-5", "{}")).await;
    assert_eq!(created.status(), StatusCode::CREATED);
    assert!(!replayed(&created));
    assert_eq!(
        handler.runs(),
        3,
        "neither the 503 nor the error was stored"
    );

    let bad = send(&api, post("k-4", "{}")).await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    let bad_again = send(&api, post("k-4", "{}")).await;
    assert_eq!(bad_again.status(), StatusCode::BAD_REQUEST);
    assert!(replayed(&bad_again), "a 400 is stored and replayed");
    assert_eq!(handler.runs(), 4);
}

/// Two Lambda execution environments (two layers on one store) get one key at once: one
/// 201, one 409 with `Retry-After`; afterwards both replay the 201.
async fn concurrent_requests_with_one_key<St: Store + Clone>(store: St) {
    let (started, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let handler = Handler {
        gate: Some((started.clone(), release.clone())),
        ..Handler::default()
    };
    let (a, b) = (service(store.clone(), &handler), service(store, &handler));
    let running = tokio::spawn(a.clone().oneshot(post("k-9", "{}")));
    started.notified().await;
    let conflict = send(&b, post("k-9", "{}")).await;
    assert_eq!(conflict.status(), StatusCode::CONFLICT);
    assert_eq!(conflict.headers()["retry-after"], "1");
    assert_eq!(
        problem_type(&conflict),
        "urn:lambda-idempotency:problem:in-progress"
    );
    assert_eq!(handler.runs(), 1);
    release.notify_one();
    let created = running.await.unwrap().unwrap();
    assert_eq!(created.status(), StatusCode::CREATED);
    for api in [&a, &b] {
        let again = send(api, post("k-9", "{}")).await;
        assert_eq!(
            (again.status(), replayed(&again)),
            (StatusCode::CREATED, true)
        );
        assert_eq!(text(&again), text(&created));
    }
    assert_eq!(handler.runs(), 1);
}

#[tokio::test]
async fn http_replays_on_the_embedded_store() {
    replays_stored_responses(InMemoryStore::new()).await;
}

#[tokio::test]
async fn http_statuses_stored_on_the_embedded_store() {
    stores_four_hundreds_not_five_hundreds(InMemoryStore::new()).await;
}

#[tokio::test]
async fn http_concurrent_on_the_embedded_store() {
    concurrent_requests_with_one_key(InMemoryStore::new()).await;
}

#[tokio::test]
async fn http_replays_on_dynamodb_local() {
    if let Some(store) = fresh_store().await {
        replays_stored_responses(store).await;
    }
}

#[tokio::test]
async fn http_statuses_stored_on_dynamodb_local() {
    if let Some(store) = fresh_store().await {
        stores_four_hundreds_not_five_hundreds(store).await;
    }
}

#[tokio::test]
async fn http_concurrent_on_dynamodb_local() {
    if let Some(store) = fresh_store().await {
        concurrent_requests_with_one_key(store).await;
    }
}

#[tokio::test]
async fn optional_keys_run_unprotected() {
    let handler = Handler::default();
    let h = handler.clone();
    let api = IdempotentHttpLayer::new(IdempotencyLayer::new(InMemoryStore::new()))
        .key_optional()
        .layer(lambda_http::service_fn(move |r| h.clone().handle(r)));
    for run in [1, 2] {
        let response = api
            .clone()
            .oneshot(request(Method::POST, None, "{}"))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
        assert_eq!(response.headers()["set-cookie"], format!("run={run}"));
    }
}
