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

/// `events/<name>` (an HTTP API or Function URL event, payload 2.0) with the key, the body
/// and, when given, `authorizer` in its request context, as `lambda_http` hands it over.
fn event(name: &str, authorizer: Option<serde_json::Value>, key: &str, body: &str) -> Request {
    let path = format!("{}/events/{name}", env!("CARGO_MANIFEST_DIR"));
    let mut event: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    event["headers"]["idempotency-key"] = key.into();
    event["body"] = body.into();
    if let Some(authorizer) = authorizer {
        event["requestContext"]["authorizer"] = authorizer;
    }
    let mut context = context_at(SystemTime::now(), Duration::from_secs(30));
    context.invoked_function_arn = "arn:aws:lambda:eu-west-1:123456789012:function:api".into();
    lambda_http::request::from_str(&event.to_string())
        .unwrap()
        .with_lambda_context(context)
}

/// A JWT authorizer's context (HTTP API) for the user `sub`.
fn jwt(sub: &str) -> Option<serde_json::Value> {
    Some(serde_json::json!({"jwt": {
        "claims": {"sub": sub, "iss": "https://cognito-idp.eu-west-1.amazonaws.com/pool"},
        "scopes": null
    }}))
}

/// An IAM authorizer's context (a Function URL with `AuthType: AWS_IAM`) for `user_arn`.
fn iam(user_arn: &str) -> Option<serde_json::Value> {
    Some(serde_json::json!({"iam": {
        "accessKey": "ASIAEXAMPLE", "accountId": "123456789012", "callerId": "AIDAEXAMPLE",
        "cognitoIdentity": null, "principalOrgId": null, "userArn": user_arn,
        "userId": "AIDAEXAMPLE"
    }}))
}

/// Sends `request` and returns the status, whether it was replayed, and the body.
async fn answer(api: &impl Api, request: Request) -> (StatusCode, bool, String) {
    let response = send(api, request).await;
    let replayed = replayed(&response);
    (response.status(), replayed, text(&response))
}

/// Two callers who send the same key get their own answers; each caller's retry gets its
/// own stored answer, and a key reused with another body is refused only against the
/// caller's own record.
async fn keys_belong_to_their_caller<St: Store + Clone>(store: St) {
    let handler = Handler::default();
    let api = service(store, &handler);
    let body = r#"{"account":"acct-1","amount":5}"#;
    let post = |authorizer| event("payments_post.json", authorizer, "pay-1", body);

    // Two JWT subjects, one key and body: the handler runs for each.
    let (status, replayed, alice) = answer(&api, post(jwt("alice"))).await;
    assert_eq!((status, replayed), (StatusCode::CREATED, false));
    let (status, replayed, bob) = answer(&api, post(jwt("bob"))).await;
    assert_eq!(
        (status, replayed),
        (StatusCode::CREATED, false),
        "bob got alice's stored answer"
    );
    assert_ne!(alice, bob);
    assert_eq!(handler.runs(), 2);
    // Each one's retry: its own stored answer, the handler not run.
    for (caller, first) in [("alice", &alice), ("bob", &bob)] {
        let (status, replayed, again) = answer(&api, post(jwt(caller))).await;
        assert_eq!((status, replayed), (StatusCode::CREATED, true), "{caller}");
        assert_eq!(&again, first, "{caller}");
    }
    assert_eq!(handler.runs(), 2);
    // The key with another body: 422 for alice (her record), a new request for carol.
    let other = r#"{"account":"acct-1","amount":6}"#;
    let reused = send(
        &api,
        event("payments_post.json", jwt("alice"), "pay-1", other),
    )
    .await;
    assert_eq!(reused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        problem_type(&reused),
        "urn:lambda-idempotency:problem:key-reused"
    );
    assert_eq!(handler.runs(), 2);
    let (status, replayed, _) = answer(
        &api,
        event("payments_post.json", jwt("carol"), "pay-1", other),
    )
    .await;
    assert_eq!((status, replayed), (StatusCode::CREATED, false));
    assert_eq!(handler.runs(), 3);

    // Two IAM callers through the Function URL: the same.
    let url = |arn: &str| event("payments_function_url.json", iam(arn), "pay-2", body);
    let (ann, ben) = (
        "arn:aws:iam::123456789012:user/ann",
        "arn:aws:iam::123456789012:user/ben",
    );
    let (_, replayed_ann, first_ann) = answer(&api, url(ann)).await;
    let (_, replayed_ben, first_ben) = answer(&api, url(ben)).await;
    assert_eq!((replayed_ann, replayed_ben), (false, false));
    assert_ne!(first_ann, first_ben);
    assert_eq!(handler.runs(), 5);
    let (status, replayed, again) = answer(&api, url(ann)).await;
    assert_eq!((status, replayed), (StatusCode::CREATED, true));
    assert_eq!(again, first_ann);
    assert_eq!(handler.runs(), 5);
    // One assumed role under two session names (fresh credentials) is one caller.
    let role = "arn:aws:sts::123456789012:assumed-role/PaymentsClient";
    let (_, replayed, first) = answer(&api, url(&format!("{role}/session-1"))).await;
    assert!(!replayed);
    let (_, replayed, again) = answer(&api, url(&format!("{role}/session-2"))).await;
    assert!(replayed, "a new session of the role is the same caller");
    assert_eq!(again, first);
    assert_eq!(handler.runs(), 6);

    // A request without an identity (no authorizer) is scoped to method and path only.
    let (_, replayed, first) = answer(&api, post(None)).await;
    assert!(!replayed);
    let (_, replayed, again) = answer(&api, post(None)).await;
    assert!(replayed);
    assert_eq!(again, first);
    assert_eq!(handler.runs(), 7);
}

#[tokio::test]
async fn http_keys_belong_to_their_caller_on_the_embedded_store() {
    keys_belong_to_their_caller(InMemoryStore::new()).await;
}

#[tokio::test]
async fn http_keys_belong_to_their_caller_on_dynamodb_local() {
    if let Some(store) = fresh_store().await {
        keys_belong_to_their_caller(store).await;
    }
}

#[tokio::test]
async fn caller_scoping_is_turned_off_or_chosen_by_the_layer() {
    let handler = Handler::default();
    let h = handler.clone();
    let shared = IdempotentHttpLayer::new(IdempotencyLayer::new(InMemoryStore::new()))
        .without_caller()
        .layer(lambda_http::service_fn(move |r| h.clone().handle(r)));
    let post = |authorizer| event("payments_post.json", authorizer, "pay-1", "{}");
    assert!(!answer(&shared, post(jwt("alice"))).await.1);
    assert!(
        answer(&shared, post(jwt("bob"))).await.1,
        "without_caller: bob gets alice's answer"
    );
    assert_eq!(handler.runs(), 1);

    // A tenant from a Lambda authorizer's context: its users share keys, tenants do not.
    let handler = Handler::default();
    let h = handler.clone();
    let by_tenant = IdempotentHttpLayer::new(IdempotencyLayer::new(InMemoryStore::new()))
        .with_caller(|request| {
            let lambda_http::request::RequestContext::ApiGatewayV2(context) =
                request.request_context_ref()?
            else {
                return None;
            };
            let tenant = context.authorizer.as_ref()?.fields.get("tenant")?;
            Some(format!("tenant:{}", tenant.as_str()?))
        })
        .layer(lambda_http::service_fn(move |r| h.clone().handle(r)));
    let user = |principal: &str, tenant: &str| {
        Some(serde_json::json!({"lambda": {"principalId": principal, "tenant": tenant}}))
    };
    assert!(!answer(&by_tenant, post(user("u-1", "acme"))).await.1);
    assert!(answer(&by_tenant, post(user("u-2", "acme"))).await.1);
    assert!(!answer(&by_tenant, post(user("u-3", "globex"))).await.1);
    assert_eq!(handler.runs(), 2);
}

/// A missing idempotency table (a typo, another region) is the deployment's fault: every
/// request is answered 503 `unavailable` (with `Retry-After`), the handler never runs without
/// its record, and nothing is stored; once the table exists the client's retry runs once and
/// the next one is replayed.
#[tokio::test]
async fn a_missing_table_answers_503_and_stores_nothing() {
    let Some(client) = lambda_idempotency_test_support::dynamodb::client().await else {
        return;
    };
    let table = format!("missing-{}", uuid::Uuid::new_v4().simple());
    let store = lambda_idempotency::store::DynamoDbStore::new(client.clone(), &table);
    let handler = Handler::default();
    let api = service(store, &handler);
    for _ in 0..2 {
        let response = send(&api, post("k-1", r#"{"cents":5}"#)).await;
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(response.headers().contains_key("retry-after"));
        assert!(problem_type(&response).ends_with(":unavailable"));
    }
    assert_eq!(handler.runs(), 0, "no handler without its record");
    lambda_idempotency::testing::dynamodb::create_table_named(&client, &table, "id", None).await;
    let created = send(&api, post("k-1", r#"{"cents":5}"#)).await;
    assert_eq!(
        (created.status(), replayed(&created)),
        (StatusCode::CREATED, false)
    );
    let again = send(&api, post("k-1", r#"{"cents":5}"#)).await;
    assert_eq!(
        (again.status(), replayed(&again)),
        (StatusCode::CREATED, true)
    );
    assert_eq!(handler.runs(), 1);
}
