//! HTTP APIs made idempotent with the `Idempotency-Key` header, through `lambda_http`: API
//! Gateway REST and HTTP APIs, Function URLs and Application Load Balancers.
//!
//! ```
//! use lambda_http::{http::StatusCode, service_fn, Body, Request, Response};
//! use lambda_idempotency::http::IdempotentHttpLayer;
//! use lambda_idempotency::store::InMemoryStore;
//! use lambda_idempotency::IdempotencyLayer;
//! use tower::Layer;
//!
//! async fn create(request: Request) -> Result<Response<Body>, lambda_http::Error> {
//!     let mut response = Response::new(Body::Text(r#"{"id":"p-1"}"#.into()));
//!     *response.status_mut() = StatusCode::CREATED;
//!     Ok(response)
//! }
//!
//! // The embedded store; use `DynamoDbStore` in Lambda.
//! let layer = IdempotentHttpLayer::new(IdempotencyLayer::new(InMemoryStore::new()));
//! let service = layer.layer(service_fn(create));
//! // In Lambda: `lambda_http::run(service).await`.
//! ```
//!
//! What a `POST` (or `PATCH`) request gets, as the IETF draft
//! "The Idempotency-Key HTTP Header Field" describes:
//!
//! | Request | Answer |
//! |---|---|
//! | a new key | the handler's response; stored when its status is stored (below) |
//! | a key whose response is stored | the stored status, headers and body, with `Idempotent-Replayed: true`; the handler does not run |
//! | a key being processed by a request in another process | 409 `in-progress`, with `Retry-After` |
//! | a key being processed by a request in this process (concurrent invocations) | waits for it and gets its answer; 409 `in-progress` if that one's response was not stored |
//! | a key used before with another body or query string | 422 `key-reused`; the handler does not run |
//! | no key (when required, the default) | 400 `missing-key` |
//! | a key with bytes other than visible ASCII, spaces and tabs, over 255 bytes, or sent twice | 400 `invalid-key` |
//! | the store fails, or the invocation deadline is too near | 503 `unavailable`, with `Retry-After` |
//! | the handler fails (an error, a panic) | 500 `failed`; nothing is stored, the retry runs it again |
//! | the handler fails with an error marked [`Permanent`](crate::Permanent) | 500 `failed-permanently`; stored: retries get it again without running the handler |
//! | a write's condition fails, or its transaction meets another | 409 `conflict`, with `Retry-After`; nothing applied |
//! | a key whose response was too large to store even compressed | 410 `result-unavailable`: it was processed, its response cannot be replayed |
//!
//! Problem answers are `application/problem+json` (RFC 9457), their `type`
//! `urn:lambda-idempotency:problem:<name>` with the names above.
//!
//! **Which responses are stored.** Statuses below 500 except 408, 409, 425 and 429 (which ask
//! the client to retry) are stored and replayed until the record expires: a 201 and a 400
//! alike, so a retried request gets the answer the first one got. A 5xx response is answered
//! to its caller and not stored (with writes, nothing is committed): the retry runs the
//! handler again. Change it with
//! [`with_stored_statuses`](IdempotentHttpLayer::with_stored_statuses). Only the
//! `content-type`, `content-encoding` and `location` headers are stored, their values byte for
//! byte ([`with_stored_headers`](IdempotentHttpLayer::with_stored_headers)); the first caller gets
//! every header, duplicates the stored ones (no `set-cookie` is replayed to someone else).
//!
//! **Keys.** A key is scoped to the request's method and path and to its caller
//! ([`HeaderKey`]): the identity its request context carries ([`caller_identity`]: a JWT's
//! or Cognito user pool's `sub`, a Lambda authorizer's `principalId`, a Cognito identity, an
//! IAM caller's ARN, the first of these), so two callers who send the same key get their own
//! answers, and neither a 422 nor a 409 about the other's request. A request without one is
//! scoped to its method and path only: an Application Load Balancer's, and an API's whose
//! route has no authorizer (an API key is not an identity) or whose Lambda authorizer returns
//! no principal. When such callers are not trusted to choose unique keys, scope keys to the
//! tenant with [`with_caller`](IdempotentHttpLayer::with_caller), a closure naming what an
//! authorizer or the load balancer sets on the request (never what the client sends);
//! [`without_caller`](IdempotentHttpLayer::without_caller) scopes keys to method and path
//! only. A key is stored only as a hash, under the configured key prefix.
//!
//! The payload hash covers the query string (its parameters in name order: `?a=1&b=2` and
//! `?b=2&a=1` are one request, as `lambda_http` may rebuild a REST API's or an ALB's query in
//! either order) and the body.
//!
//! Requests with other methods (`GET`, `PUT`, `DELETE`, ...) go to the handler as they are
//! ([`with_methods`](IdempotentHttpLayer::with_methods)).

mod caller;
mod layer;
mod request;
mod response;
mod service;

pub use caller::caller_identity;
pub use layer::IdempotentHttpLayer;
pub use request::{HeaderKey, HttpRequest, MAX_IDEMPOTENCY_KEY_BYTES};
pub use response::{
    stored_by_default, StoredBody, StoredResponse, PROBLEM_TYPE_PREFIX, REPLAYED_HEADER,
};
pub use service::{HandlerAnswer, HttpHandler, IdempotentHttp};
