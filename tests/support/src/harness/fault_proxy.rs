//! A fault-injecting HTTP/1.1 proxy on 127.0.0.1 between a DynamoDB client and DynamoDB
//! Local. Per request it forwards, or answers with throttling or a 5xx, or answers slowly
//! (past the SDK's timeouts), or drops the connection before or after forwarding (the
//! latter: the request was applied but its response is lost). The upstream can be switched
//! (DynamoDB Local restarted on another port) or taken away (down).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{CONTENT_LENGTH, TRANSFER_ENCODING};
use hyper::StatusCode;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;

use super::http::{response, serve as serve_http, Hangup, Request, Response};
use super::sqs_sim::Rng;

/// How often each fault strikes (probabilities per request).
#[derive(Debug, Clone, Copy, Default)]
pub struct FaultRates {
    /// Answered `ThrottlingException` without forwarding.
    pub throttle: f64,
    /// Answered HTTP 500 without forwarding.
    pub server_error: f64,
    /// Held back (see [`FaultProxy::set_slow_by`]), then forwarded.
    pub slow: f64,
    /// The connection dropped without forwarding.
    pub drop_before: f64,
    /// Forwarded, then the connection dropped: applied, its answer lost.
    pub drop_after: f64,
}

/// What happened to requests, by kind.
#[derive(Debug, Default)]
pub struct FaultCounts {
    /// Forwarded and answered.
    pub forwarded: AtomicU64,
    /// Answered with throttling.
    pub throttled: AtomicU64,
    /// Answered with a 5xx, a scripted error or a scripted answer.
    pub server_errors: AtomicU64,
    /// Held back before forwarding.
    pub slowed: AtomicU64,
    /// Dropped before forwarding.
    pub dropped_before: AtomicU64,
    /// Dropped after forwarding.
    pub dropped_after: AtomicU64,
    /// Dropped because the upstream was down or did not answer.
    pub refused: AtomicU64,
}

impl FaultCounts {
    /// The counts on one line.
    pub fn summary(&self) -> String {
        let l = |a: &AtomicU64| a.load(Ordering::SeqCst);
        format!(
            "forwarded={} throttled={} 5xx={} slow={} dropped_before={} dropped_after={} upstream_down={}",
            l(&self.forwarded),
            l(&self.throttled),
            l(&self.server_errors),
            l(&self.slowed),
            l(&self.dropped_before),
            l(&self.dropped_after),
            l(&self.refused)
        )
    }

    /// Requests that met a fault (the upstream being down included).
    pub fn injected(&self) -> u64 {
        let l = |a: &AtomicU64| a.load(Ordering::SeqCst);
        l(&self.throttled)
            + l(&self.server_errors)
            + l(&self.slowed)
            + l(&self.dropped_before)
            + l(&self.dropped_after)
            + l(&self.refused)
    }
}

struct Plan {
    rates: FaultRates,
    slow_by: Duration,
    upstream: Option<SocketAddr>,
    rng: Rng,
    /// Faults for the next requests of one operation, in order, before any random fault.
    script: Vec<(String, Scripted)>,
}

/// A fault for one chosen request (see [`FaultProxy::script`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scripted {
    /// Forward the request, then drop the connection: applied, its answer lost.
    LoseAnswer,
    /// Answer 500 without forwarding.
    ServerError,
    /// Answer 400 with this DynamoDB error type (e.g. `TransactionConflictException`)
    /// without forwarding.
    Error(&'static str),
    /// Answer a `BatchGetItem` with every key it asks left unprocessed (as a throttled table
    /// does), without forwarding.
    Unprocessed,
}

/// The proxy. Dropping it stops accepting connections.
pub struct FaultProxy {
    address: SocketAddr,
    plan: Arc<Mutex<Plan>>,
    /// What happened to requests so far.
    pub counts: Arc<FaultCounts>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.server.abort();
    }
}

#[derive(Clone, Copy)]
enum Fault {
    None,
    Throttle,
    ServerError,
    Error(&'static str),
    Unprocessed,
    Slow(Duration),
    DropBefore,
    DropAfter,
}

/// The operation of a DynamoDB request: the end of its `X-Amz-Target` header.
fn operation(request: &Request) -> String {
    request
        .headers()
        .get("x-amz-target")
        .and_then(|value| value.to_str().ok())
        .map(|value| value.trim().rsplit('.').next().unwrap_or("").to_string())
        .unwrap_or_default()
}

/// What the server's connections share with the proxy.
struct Shared {
    plan: Arc<Mutex<Plan>>,
    counts: Arc<FaultCounts>,
    upstream: Client<HttpConnector, Full<Bytes>>,
}

impl FaultProxy {
    /// Starts a proxy to `upstream` (an `http://127.0.0.1:PORT` endpoint), faults off.
    pub async fn start(upstream: &str, seed: u64) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let address = listener.local_addr().unwrap();
        let plan = Arc::new(Mutex::new(Plan {
            rates: FaultRates::default(),
            slow_by: Duration::from_secs(3),
            upstream: Some(parse_endpoint(upstream)),
            rng: Rng::new(seed),
            script: Vec::new(),
        }));
        let counts = Arc::new(FaultCounts::default());
        let shared = Arc::new(Shared {
            plan: plan.clone(),
            counts: counts.clone(),
            upstream: Client::builder(TokioExecutor::new()).build_http(),
        });
        let server = serve_http(listener, move |request| serve(request, shared.clone()));
        Self {
            address,
            plan,
            counts,
            server,
        }
    }

    /// The endpoint clients use: `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Sets the fault rates.
    pub fn set_rates(&self, rates: FaultRates) {
        self.plan.lock().unwrap().rates = rates;
    }

    /// How long a slow answer is held back.
    pub fn set_slow_by(&self, by: Duration) {
        self.plan.lock().unwrap().slow_by = by;
    }

    /// Gives the next request of `operation` (e.g. `PutItem`, as in `X-Amz-Target`) the
    /// fault `fault`; calls queue up in order.
    pub fn script(&self, operation: &str, fault: Scripted) {
        self.plan
            .lock()
            .unwrap()
            .script
            .push((operation.to_string(), fault));
    }

    /// Scripted faults not yet used.
    pub fn unused_script(&self) -> Vec<(String, Scripted)> {
        self.plan.lock().unwrap().script.clone()
    }

    /// Points the proxy at another upstream, or at none (every connection is refused).
    pub fn set_upstream(&self, upstream: Option<&str>) {
        self.plan.lock().unwrap().upstream = upstream.map(parse_endpoint);
    }
}

fn parse_endpoint(endpoint: &str) -> SocketAddr {
    endpoint
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .expect("an http://127.0.0.1:PORT endpoint")
}

fn error_response(status: StatusCode, error_type: &str, message: &str) -> Response {
    let body = format!(
        r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{error_type}","message":"{message}"}}"#
    );
    response(
        status,
        &[
            ("Content-Type", "application/x-amz-json-1.0".into()),
            ("x-amzn-ErrorType", error_type.into()),
        ],
        body,
    )
}

/// A `BatchGetItem` answer that reads nothing and leaves every key `request` asks
/// unprocessed.
fn all_unprocessed(request: &Request) -> Response {
    let asked: serde_json::Value = serde_json::from_slice(request.body()).unwrap_or_default();
    let items = asked["RequestItems"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let responses: serde_json::Map<String, serde_json::Value> = items
        .keys()
        .map(|table| (table.clone(), serde_json::json!([])))
        .collect();
    let body = serde_json::json!({"Responses": responses, "UnprocessedKeys": items});
    response(
        StatusCode::OK,
        &[("Content-Type", "application/x-amz-json-1.0".into())],
        body.to_string(),
    )
}

/// Picks the fault for `request` (a scripted one first, else by the rates) and the upstream.
fn pick_fault(plan: &Mutex<Plan>, request: &Request) -> (Fault, Option<SocketAddr>) {
    let mut plan = plan.lock().unwrap();
    let op = operation(request);
    let scripted = plan
        .script
        .iter()
        .position(|(o, _)| *o == op)
        .map(|i| plan.script.remove(i).1);
    let rates = plan.rates;
    let roll = (plan.rng.next_u64() >> 11) as f64 / ((1u64 << 53) as f64);
    let mut edge = 0.0;
    let mut pick = |p: f64| {
        edge += p;
        roll < edge
    };
    let fault = if let Some(scripted) = scripted {
        match scripted {
            Scripted::LoseAnswer => Fault::DropAfter,
            Scripted::ServerError => Fault::ServerError,
            Scripted::Error(kind) => Fault::Error(kind),
            Scripted::Unprocessed => Fault::Unprocessed,
        }
    } else if pick(rates.throttle) {
        Fault::Throttle
    } else if pick(rates.server_error) {
        Fault::ServerError
    } else if pick(rates.slow) {
        Fault::Slow(plan.slow_by)
    } else if pick(rates.drop_before) {
        Fault::DropBefore
    } else if pick(rates.drop_after) {
        Fault::DropAfter
    } else {
        Fault::None
    };
    (fault, plan.upstream)
}

/// Answers one request: a fault, or the upstream's answer.
async fn serve(request: Request, shared: Arc<Shared>) -> Result<Response, Hangup> {
    let (fault, target) = pick_fault(&shared.plan, &request);
    let counts = &shared.counts;
    match fault {
        Fault::Throttle => {
            counts.throttled.fetch_add(1, Ordering::SeqCst);
            return Ok(error_response(
                StatusCode::BAD_REQUEST,
                "ThrottlingException",
                "Rate of requests exceeds the allowed throughput.",
            ));
        }
        Fault::ServerError => {
            counts.server_errors.fetch_add(1, Ordering::SeqCst);
            return Ok(error_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalServerError",
                "Internal server error",
            ));
        }
        Fault::Error(kind) => {
            counts.server_errors.fetch_add(1, Ordering::SeqCst);
            return Ok(error_response(StatusCode::BAD_REQUEST, kind, "injected"));
        }
        Fault::Unprocessed => {
            counts.server_errors.fetch_add(1, Ordering::SeqCst);
            return Ok(all_unprocessed(&request));
        }
        Fault::DropBefore => {
            counts.dropped_before.fetch_add(1, Ordering::SeqCst);
            return Err(Hangup("injected: dropped before forwarding"));
        }
        Fault::Slow(_) | Fault::None | Fault::DropAfter => {}
    }
    // Forwarded in a task of its own: a slowed request reaches the upstream even when the
    // client has given up waiting (its answer is what comes late, not the request).
    let forwarded = tokio::spawn(async move {
        if let Fault::Slow(by) = fault {
            shared.counts.slowed.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(by).await;
        }
        let answer = match target {
            Some(target) => forward(&shared.upstream, target, request).await,
            None => None,
        };
        let Some(answer) = answer else {
            shared.counts.refused.fetch_add(1, Ordering::SeqCst);
            return Err(Hangup("the upstream is down"));
        };
        if matches!(fault, Fault::DropAfter) {
            shared.counts.dropped_after.fetch_add(1, Ordering::SeqCst);
            return Err(Hangup("injected: the answer is lost"));
        }
        shared.counts.forwarded.fetch_add(1, Ordering::SeqCst);
        Ok(answer)
    });
    forwarded
        .await
        .unwrap_or(Err(Hangup("the forwarding task failed")))
}

/// Sends `request` to `target` and reads the whole answer; `None` when the upstream does
/// not answer.
async fn forward(
    upstream: &Client<HttpConnector, Full<Bytes>>,
    target: SocketAddr,
    request: Request,
) -> Option<Response> {
    let (mut head, body) = request.into_parts();
    let path = head.uri.path_and_query().map_or("/", |p| p.as_str());
    head.uri = format!("http://{target}{path}").parse().ok()?;
    let answer = upstream
        .request(hyper::Request::from_parts(head, Full::new(body)))
        .await
        .ok()?;
    let (mut head, body) = answer.into_parts();
    let body = body.collect().await.ok()?.to_bytes();
    // The body is whole now: hyper frames it again.
    head.headers.remove(CONTENT_LENGTH);
    head.headers.remove(TRANSFER_ENCODING);
    Some(Response::from_parts(head, Full::new(body)))
}
