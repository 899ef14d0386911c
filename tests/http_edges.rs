//! HTTP idempotency at its edges (found in review; each test failed on the code before its
//! fix): the pass-through path keeps the tower readiness contract and catches panics, a key
//! sent twice is refused, a permanent failure is stored, a same-process duplicate waits, and
//! a response too large to store is answered 410 to its duplicates.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use lambda_http::http::{Method, StatusCode};
use lambda_http::{Body, Request, RequestExt, Response};
use lambda_idempotency::http::{IdempotentHttpLayer, REPLAYED_HEADER};
use lambda_idempotency::store::InMemoryStore;
use lambda_idempotency::{IdempotencyLayer, Permanent};
use lambda_idempotency_test_support::context_at;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tower::{BoxError, Layer, Service, ServiceExt};

fn request(method: Method, keys: &[&str]) -> Request {
    request_to(method, "/payments", keys)
}

fn request_to(method: Method, uri: &str, keys: &[&str]) -> Request {
    let mut builder = lambda_http::http::Request::builder()
        .method(method)
        .uri(uri);
    for key in keys {
        builder = builder.header("Idempotency-Key", *key);
    }
    let context = context_at(SystemTime::now(), Duration::from_secs(30));
    builder
        .body(Body::Text("{}".into()))
        .unwrap()
        .with_lambda_context(context)
}

fn created(run: usize) -> Response<Body> {
    Response::builder()
        .status(201)
        .header("content-type", "application/json")
        .body(Body::Text(format!(r#"{{"run":{run}}}"#)))
        .unwrap()
}

fn problem_type(response: &Response<Body>) -> String {
    let Body::Text(text) = response.body() else {
        panic!("a text body")
    };
    let body: serde_json::Value = serde_json::from_str(text).unwrap();
    body["type"].as_str().unwrap().to_owned()
}

/// A layer over a handler that counts its runs and answers `answer(run)`.
fn counting<F, Fut>(
    answer: F,
) -> (
    impl Clone
        + Service<Request, Response = Response<Body>, Error = lambda_idempotency::Error, Future: Send>,
    Arc<AtomicUsize>,
)
where
    F: Fn(usize) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Response<Body>, BoxError>> + Send + 'static,
{
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let api = IdempotentHttpLayer::new(IdempotencyLayer::new(InMemoryStore::new())).layer(
        lambda_http::service_fn(move |_request: Request| {
            let run = counter.fetch_add(1, Ordering::SeqCst) + 1;
            answer(run)
        }),
    );
    (api, runs)
}

/// A handler whose readiness reserves a permit (as tower's `ConcurrencyLimit`); its clones
/// hold none.
struct Reserving {
    semaphore: Arc<Semaphore>,
    permit: Option<OwnedSemaphorePermit>,
}

impl Clone for Reserving {
    fn clone(&self) -> Self {
        Self {
            semaphore: self.semaphore.clone(),
            permit: None,
        }
    }
}

impl Service<Request> for Reserving {
    type Response = Response<Body>;
    type Error = BoxError;
    type Future = std::future::Ready<Result<Response<Body>, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        if self.permit.is_none() {
            match self.semaphore.clone().try_acquire_owned() {
                Ok(permit) => self.permit = Some(permit),
                Err(_) => {
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
            }
        }
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _request: Request) -> Self::Future {
        drop(self.permit.take().expect("called after poll_ready"));
        std::future::ready(Ok(created(1)))
    }
}

#[tokio::test]
async fn a_pass_through_request_uses_the_readiness_reserved_for_it() {
    let handler = Reserving {
        semaphore: Arc::new(Semaphore::new(1)),
        permit: None,
    };
    let mut api =
        IdempotentHttpLayer::new(IdempotencyLayer::new(InMemoryStore::new())).layer(handler);
    let answer = api.ready().await.unwrap().call(request(Method::GET, &[]));
    let answer = tokio::time::timeout(Duration::from_secs(2), answer)
        .await
        .expect("a GET answers with the permit its readiness reserved");
    assert_eq!(answer.unwrap().status(), StatusCode::CREATED);
}

#[tokio::test]
async fn a_panic_on_a_pass_through_request_is_answered_500() {
    let (api, runs) = counting(|_| async { panic!("boom") });
    let response = api.oneshot(request(Method::GET, &[])).await.unwrap();
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        problem_type(&response),
        "urn:lambda-idempotency:problem:failed"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_key_sent_twice_is_refused() {
    let (api, runs) = counting(|run| async move { Ok(created(run)) });
    for keys in [["a", "b"], ["a", "c"]] {
        let response = api
            .clone()
            .oneshot(request(Method::POST, &keys))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            problem_type(&response),
            "urn:lambda-idempotency:problem:invalid-key"
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_permanent_failure_is_stored_and_answered_again() {
    let (api, runs) = counting(|run| async move {
        if run == 1 {
            return Err(Permanent::new("card declined").into());
        }
        Ok(created(run))
    });
    for _ in 0..2 {
        let response = api
            .clone()
            .oneshot(request(Method::POST, &["k"]))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            problem_type(&response),
            "urn:lambda-idempotency:problem:failed-permanently"
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the retry did not run it");
}

#[tokio::test]
async fn a_duplicate_in_the_same_process_waits_and_shares_the_answer() {
    let (started, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let (s, r) = (started.clone(), release.clone());
    let (api, runs) = counting(move |run| {
        let (s, r) = (s.clone(), r.clone());
        async move {
            s.notify_one();
            r.notified().await;
            Ok(created(run))
        }
    });
    let first = tokio::spawn(api.clone().oneshot(request(Method::POST, &["k"])));
    started.notified().await;
    let second = tokio::spawn(api.clone().oneshot(request(Method::POST, &["k"])));
    tokio::task::yield_now().await;
    assert!(!second.is_finished(), "it waits for the running request");
    release.notify_one();
    let (first, second) = (
        first.await.unwrap().unwrap(),
        second.await.unwrap().unwrap(),
    );
    assert_eq!(
        (first.status(), second.status()),
        (StatusCode::CREATED, StatusCode::CREATED)
    );
    assert!(second.headers().get(REPLAYED_HEADER).is_some());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_response_too_large_to_store_is_gone_for_its_duplicates() {
    let (api, runs) = counting(|_| async {
        // 500 KB that do not compress (xorshift).
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let bytes: Vec<u8> = (0..500_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        Ok(Response::builder()
            .status(201)
            .body(Body::Binary(bytes))
            .unwrap())
    });
    let first = api
        .clone()
        .oneshot(request(Method::POST, &["k"]))
        .await
        .unwrap();
    assert_eq!(
        first.status(),
        StatusCode::CREATED,
        "the first caller gets it"
    );
    let retry = api
        .clone()
        .oneshot(request(Method::POST, &["k"]))
        .await
        .unwrap();
    assert_eq!(retry.status(), StatusCode::GONE);
    assert_eq!(
        problem_type(&retry),
        "urn:lambda-idempotency:problem:result-unavailable"
    );
    assert!(retry.headers().get("retry-after").is_none());
    assert_eq!(runs.load(Ordering::SeqCst), 1, "it is never run again");
}

#[tokio::test]
async fn a_key_reused_with_another_query_string_is_answered_422() {
    let (api, runs) = counting(|run| async move { Ok(created(run)) });
    let send = |uri: &'static str| {
        let api = api.clone();
        async move {
            api.oneshot(request_to(Method::POST, uri, &["k"]))
                .await
                .unwrap()
        }
    };
    let first = send("/charges?amount=100&currency=eur").await;
    assert_eq!(first.status(), StatusCode::CREATED);
    assert!(first.headers().get(REPLAYED_HEADER).is_none());

    // The same key and body with another amount in the query: not the same request.
    let other = send("/charges?amount=999&currency=eur").await;
    assert_eq!(
        other.status(),
        StatusCode::UNPROCESSABLE_ENTITY,
        "the stored 201 of ?amount=100 was answered to ?amount=999"
    );
    assert_eq!(
        problem_type(&other),
        "urn:lambda-idempotency:problem:key-reused"
    );
    // No query at all is another request too.
    assert_eq!(
        send("/charges").await.status(),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the handler did not run again"
    );

    // The same query (its parameters in another order, as lambda_http rebuilds a REST API's
    // or an ALB's query string from a map) gets the stored 201.
    for uri in [
        "/charges?amount=100&currency=eur",
        "/charges?currency=eur&amount=100",
    ] {
        let again = send(uri).await;
        assert_eq!(again.status(), StatusCode::CREATED, "{uri}");
        assert_eq!(again.headers()[REPLAYED_HEADER], "true", "{uri}");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn stored_headers_are_replayed_byte_for_byte() {
    use lambda_http::http::header::{HeaderName, HeaderValue, CONTENT_TYPE, LOCATION};
    // `/files/café` in UTF-8, and a value in Latin-1 (obs-text, not UTF-8).
    let location = "/files/café".as_bytes();
    let latin1: &[u8] = b"caf\xe9; q=\"a\tb\"";
    let x_name = HeaderName::from_static("x-name");
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let header = x_name.clone();
    let api = IdempotentHttpLayer::new(IdempotencyLayer::new(InMemoryStore::new()))
        .with_stored_headers([CONTENT_TYPE, LOCATION, x_name.clone()])
        .layer(lambda_http::service_fn(move |_request: Request| {
            let run = counter.fetch_add(1, Ordering::SeqCst) + 1;
            let mut response = created(run);
            let headers = response.headers_mut();
            headers.insert(LOCATION, HeaderValue::from_bytes(location).unwrap());
            headers.insert(header.clone(), HeaderValue::from_bytes(latin1).unwrap());
            async move { Ok::<_, BoxError>(response) }
        }));
    let first = api
        .clone()
        .oneshot(request(Method::POST, &["k"]))
        .await
        .unwrap();
    assert_eq!(first.headers()[LOCATION].as_bytes(), location);
    let replay = api
        .clone()
        .oneshot(request(Method::POST, &["k"]))
        .await
        .unwrap();
    assert_eq!(replay.status(), StatusCode::CREATED);
    assert_eq!(replay.headers()[REPLAYED_HEADER], "true");
    assert_eq!(
        replay.headers().get(LOCATION).map(HeaderValue::as_bytes),
        Some(location),
        "the replay carries the Location header's bytes"
    );
    assert_eq!(
        replay.headers().get(&x_name).map(HeaderValue::as_bytes),
        Some(latin1)
    );
    assert_eq!(replay.headers()[CONTENT_TYPE], "application/json");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
