//! A small Lambda Runtime API emulator on 127.0.0.1, enough to drive a real function binary:
//! `GET /2018-06-01/runtime/invocation/next` (long poll), `POST .../{id}/response`,
//! `POST .../{id}/error` and `POST /2018-06-01/runtime/init/error`, over HTTP/1.1 with
//! keep-alive.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hyper::{Method, StatusCode};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, Mutex};

use super::http::{response, serve as serve_http, Hangup, Request, Response};

/// How an invocation ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// The function's response body.
    Response(serde_json::Value),
    /// The function reported an error (its body: `errorType`, `errorMessage`).
    Error(serde_json::Value),
}

/// The `itemIdentifier`s of the `batchItemFailures` in `reply`. Panics unless it is a batch
/// response.
pub fn batch_failures(reply: Option<Reply>) -> Vec<String> {
    match reply {
        Some(Reply::Response(body)) => body["batchItemFailures"]
            .as_array()
            .expect("a batch response")
            .iter()
            .map(|f| f["itemIdentifier"].as_str().unwrap().to_string())
            .collect(),
        other => panic!("expected a batch response, got {other:?}"),
    }
}

struct Invocation {
    request_id: String,
    deadline_ms: u64,
    event: Vec<u8>,
}

/// What the server's connections share with the emulator.
struct State {
    /// Invocations waiting for the function's next poll.
    invocations: Mutex<mpsc::UnboundedReceiver<Invocation>>,
    /// Where each invocation's reply goes, by request id.
    replies: Mutex<HashMap<String, oneshot::Sender<Reply>>>,
    init_errors: Mutex<Vec<String>>,
    first_poll: Mutex<Option<Instant>>,
    /// Invocations handed to the function and not yet answered, and the most at once.
    in_flight: std::sync::Mutex<(usize, usize)>,
}

/// The emulator. Dropping it stops accepting connections.
pub struct RuntimeApi {
    address: SocketAddr,
    queue: mpsc::UnboundedSender<Invocation>,
    state: Arc<State>,
    next_id: AtomicU64,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for RuntimeApi {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

impl RuntimeApi {
    /// Starts the emulator on a free loopback port.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let address = listener.local_addr().unwrap();
        let (queue, invocations) = mpsc::unbounded_channel();
        let state = Arc::new(State {
            invocations: Mutex::new(invocations),
            replies: Mutex::default(),
            init_errors: Mutex::default(),
            first_poll: Mutex::default(),
            in_flight: std::sync::Mutex::default(),
        });
        let server = {
            let state = state.clone();
            serve_http(listener, move |request| serve(request, state.clone()))
        };
        Self {
            address,
            queue,
            state,
            next_id: AtomicU64::new(1),
            server,
        }
    }

    /// `host:port`, the value of `AWS_LAMBDA_RUNTIME_API`.
    pub fn address(&self) -> String {
        self.address.to_string()
    }

    /// When the function first asked for an invocation: it is ready (cold start ends).
    pub async fn first_poll_at(&self) -> Option<Instant> {
        *self.state.first_poll.lock().await
    }

    /// The most invocations the function held at once (handed out, not yet answered): 1 for
    /// a function that handles one invocation at a time, more under `run_concurrent`.
    pub fn most_in_flight(&self) -> usize {
        self.state.in_flight.lock().unwrap().1
    }

    /// Errors the function reported while starting.
    pub async fn init_errors(&self) -> Vec<String> {
        self.state.init_errors.lock().await.clone()
    }

    /// Invokes the function with `event`, giving it `remaining` before its deadline, and
    /// waits for its reply (`None` if none came within `wait`).
    pub async fn invoke(
        &self,
        event: &serde_json::Value,
        remaining: Duration,
        wait: Duration,
    ) -> Option<Reply> {
        self.invoke_text(&event.to_string(), remaining, wait).await
    }

    /// As [`invoke`](Self::invoke), with the event's JSON text sent as it is (a number past
    /// 64 bits keeps every digit, which a `serde_json::Value` would not).
    pub async fn invoke_text(
        &self,
        event: &str,
        remaining: Duration,
        wait: Duration,
    ) -> Option<Reply> {
        let request_id = format!(
            "8476a536-e9f4-11e8-9739-{:012}",
            self.next_id.fetch_add(1, Ordering::SeqCst)
        );
        let (tx, rx) = oneshot::channel();
        self.state
            .replies
            .lock()
            .await
            .insert(request_id.clone(), tx);
        self.queue
            .send(Invocation {
                request_id: request_id.clone(),
                deadline_ms: now_ms() + remaining.as_millis() as u64,
                event: event.as_bytes().to_vec(),
            })
            .ok()?;
        let reply = tokio::time::timeout(wait, rx).await.ok()?.ok();
        self.state.replies.lock().await.remove(&request_id);
        reply
    }
}

/// Answers one request of the function's runtime client.
async fn serve(request: Request, state: Arc<State>) -> Result<Response, Hangup> {
    let json = || ("Content-Type", "application/json".to_string());
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    if method == Method::GET && path.ends_with("/runtime/invocation/next") {
        state
            .first_poll
            .lock()
            .await
            .get_or_insert_with(Instant::now);
        let invocation = state.invocations.lock().await.recv().await;
        let Some(invocation) = invocation else {
            return Err(Hangup("the emulator is stopping"));
        };
        {
            let mut in_flight = state.in_flight.lock().unwrap();
            in_flight.0 += 1;
            in_flight.1 = in_flight.1.max(in_flight.0);
        }
        let headers = [
            json(),
            ("Lambda-Runtime-Aws-Request-Id", invocation.request_id),
            (
                "Lambda-Runtime-Deadline-Ms",
                invocation.deadline_ms.to_string(),
            ),
            (
                "Lambda-Runtime-Invoked-Function-Arn",
                "arn:aws:lambda:us-east-1:123456789012:function:order-consumer".to_string(),
            ),
            (
                "Lambda-Runtime-Trace-Id",
                "Root=1-5bef4de7-ad49b0e87f6ef6c87fc2e700;Parent=9a9197af755a6419;Sampled=1"
                    .to_string(),
            ),
        ];
        Ok(response(StatusCode::OK, &headers, invocation.event))
    } else if method == Method::POST && path.contains("/runtime/invocation/") {
        let mut segments = path.rsplit('/');
        let kind = segments.next().unwrap_or_default();
        let request_id = segments.next().unwrap_or_default().to_string();
        let body: serde_json::Value =
            serde_json::from_slice(request.body()).unwrap_or(serde_json::Value::Null);
        let reply = if kind == "response" {
            Reply::Response(body)
        } else {
            Reply::Error(body)
        };
        if let Some(tx) = state.replies.lock().await.remove(&request_id) {
            let mut in_flight = state.in_flight.lock().unwrap();
            in_flight.0 = in_flight.0.saturating_sub(1);
            drop(in_flight);
            let _ = tx.send(reply);
        }
        Ok(response(StatusCode::ACCEPTED, &[json()], "{}"))
    } else if method == Method::POST && path.ends_with("/runtime/init/error") {
        state
            .init_errors
            .lock()
            .await
            .push(String::from_utf8_lossy(request.body()).into_owned());
        Ok(response(StatusCode::ACCEPTED, &[json()], "{}"))
    } else {
        Ok(response(StatusCode::NOT_FOUND, &[json()], "{}"))
    }
}
