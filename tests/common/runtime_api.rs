//! A small Lambda Runtime API emulator on 127.0.0.1, enough to drive a real function binary:
//! `GET /2018-06-01/runtime/invocation/next` (long poll), `POST .../{id}/response`,
//! `POST .../{id}/error` and `POST /2018-06-01/runtime/init/error`, over HTTP/1.1 with
//! keep-alive.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, Mutex};

use super::http1::read_message;

/// How an invocation ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// The function's response body.
    Response(serde_json::Value),
    /// The function reported an error (its body: `errorType`, `errorMessage`).
    Error(serde_json::Value),
}

struct Invocation {
    request_id: String,
    deadline_ms: u64,
    event: Vec<u8>,
}

#[derive(Default)]
struct Pending {
    replies: HashMap<String, oneshot::Sender<Reply>>,
}

/// The emulator. Dropping it stops accepting connections.
pub struct RuntimeApi {
    address: SocketAddr,
    queue: mpsc::UnboundedSender<Invocation>,
    pending: Arc<Mutex<Pending>>,
    init_errors: Arc<Mutex<Vec<String>>>,
    first_poll: Arc<Mutex<Option<Instant>>>,
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
        let invocations = Arc::new(Mutex::new(invocations));
        let pending: Arc<Mutex<Pending>> = Arc::default();
        let init_errors: Arc<Mutex<Vec<String>>> = Arc::default();
        let first_poll: Arc<Mutex<Option<Instant>>> = Arc::default();
        let server = {
            let (pending, init_errors, first_poll) =
                (pending.clone(), init_errors.clone(), first_poll.clone());
            tokio::spawn(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        return;
                    };
                    let (invocations, pending, init_errors, first_poll) = (
                        invocations.clone(),
                        pending.clone(),
                        init_errors.clone(),
                        first_poll.clone(),
                    );
                    tokio::spawn(async move {
                        let _ = serve(stream, invocations, pending, init_errors, first_poll).await;
                    });
                }
            })
        };
        Self {
            address,
            queue,
            pending,
            init_errors,
            first_poll,
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
        *self.first_poll.lock().await
    }

    /// Errors the function reported while starting.
    pub async fn init_errors(&self) -> Vec<String> {
        self.init_errors.lock().await.clone()
    }

    /// Invokes the function with `event`, giving it `remaining` before its deadline, and
    /// waits for its reply (`None` if none came within `wait`).
    pub async fn invoke(
        &self,
        event: &serde_json::Value,
        remaining: Duration,
        wait: Duration,
    ) -> Option<Reply> {
        let request_id = format!(
            "8476a536-e9f4-11e8-9739-{:012}",
            self.next_id.fetch_add(1, Ordering::SeqCst)
        );
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .await
            .replies
            .insert(request_id.clone(), tx);
        self.queue
            .send(Invocation {
                request_id: request_id.clone(),
                deadline_ms: now_ms() + remaining.as_millis() as u64,
                event: serde_json::to_vec(event).unwrap(),
            })
            .ok()?;
        let reply = tokio::time::timeout(wait, rx).await.ok()?.ok();
        self.pending.lock().await.replies.remove(&request_id);
        reply
    }
}

async fn write_response(
    stream: &mut BufReader<TcpStream>,
    status: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let stream = stream.get_mut();
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    stream.flush().await
}

async fn serve(
    stream: TcpStream,
    invocations: Arc<Mutex<mpsc::UnboundedReceiver<Invocation>>>,
    pending: Arc<Mutex<Pending>>,
    init_errors: Arc<Mutex<Vec<String>>>,
    first_poll: Arc<Mutex<Option<Instant>>>,
) -> std::io::Result<()> {
    let mut stream = BufReader::new(stream);
    while let Some(request) = read_message(&mut stream).await? {
        let (method, path) = request.request_line();
        let (method, path) = (method.to_string(), path.to_string());
        let path = path.as_str();
        if method == "GET" && path.ends_with("/runtime/invocation/next") {
            first_poll.lock().await.get_or_insert_with(Instant::now);
            let invocation = invocations.lock().await.recv().await;
            let Some(invocation) = invocation else {
                return Ok(());
            };
            let headers = [
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
            write_response(&mut stream, "200 OK", &headers, &invocation.event).await?;
        } else if method == "POST" && path.contains("/runtime/invocation/") {
            let mut segments = path.rsplit('/');
            let kind = segments.next().unwrap_or_default();
            let request_id = segments.next().unwrap_or_default().to_string();
            let body: serde_json::Value =
                serde_json::from_slice(&request.body).unwrap_or(serde_json::Value::Null);
            let reply = if kind == "response" {
                Reply::Response(body)
            } else {
                Reply::Error(body)
            };
            if let Some(tx) = pending.lock().await.replies.remove(&request_id) {
                let _ = tx.send(reply);
            }
            write_response(&mut stream, "202 Accepted", &[], b"{}").await?;
        } else if method == "POST" && path.ends_with("/runtime/init/error") {
            init_errors
                .lock()
                .await
                .push(String::from_utf8_lossy(&request.body).into_owned());
            write_response(&mut stream, "202 Accepted", &[], b"{}").await?;
        } else {
            write_response(&mut stream, "404 Not Found", &[], b"{}").await?;
        }
    }
    Ok(())
}
