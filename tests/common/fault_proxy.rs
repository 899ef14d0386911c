//! A fault-injecting HTTP/1.1 proxy on 127.0.0.1 between a DynamoDB client and DynamoDB
//! Local. Per request it forwards, or answers with throttling or a 5xx, or answers slowly
//! (past the SDK's timeouts), or drops the connection before or after forwarding (the
//! latter: the request was applied but its response is lost). The upstream can be switched
//! (DynamoDB Local restarted on another port) or taken away (down).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use super::http1::{read_message, Message};
use super::sqs_sim::Rng;

/// How often each fault strikes (probabilities per request).
#[derive(Debug, Clone, Copy, Default)]
pub struct FaultRates {
    pub throttle: f64,
    pub server_error: f64,
    pub slow: f64,
    pub drop_before: f64,
    pub drop_after: f64,
}

/// What happened to requests, by kind.
#[derive(Debug, Default)]
pub struct FaultCounts {
    pub forwarded: AtomicU64,
    pub throttled: AtomicU64,
    pub server_errors: AtomicU64,
    pub slowed: AtomicU64,
    pub dropped_before: AtomicU64,
    pub dropped_after: AtomicU64,
    pub refused: AtomicU64,
}

impl FaultCounts {
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
}

/// The proxy. Dropping it stops accepting connections.
pub struct FaultProxy {
    address: SocketAddr,
    plan: Arc<Mutex<Plan>>,
    pub counts: Arc<FaultCounts>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.server.abort();
    }
}

enum Fault {
    None,
    Throttle,
    ServerError,
    Error(&'static str),
    Slow(Duration),
    DropBefore,
    DropAfter,
}

/// The operation of a DynamoDB request: the end of its `X-Amz-Target` header.
fn operation(request: &Message) -> String {
    request
        .head
        .iter()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.trim()
                .eq_ignore_ascii_case("x-amz-target")
                .then(|| value.trim().rsplit('.').next().unwrap_or("").to_string())
        })
        .unwrap_or_default()
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
        let server = {
            let (plan, counts) = (plan.clone(), counts.clone());
            tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    let (plan, counts) = (plan.clone(), counts.clone());
                    tokio::spawn(async move {
                        let _ = serve(stream, plan, counts).await;
                    });
                }
            })
        };
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

fn error_response(status: &str, error_type: &str, message: &str) -> Vec<u8> {
    let body = format!(
        r#"{{"__type":"com.amazonaws.dynamodb.v20120810#{error_type}","message":"{message}"}}"#
    );
    Message {
        head: vec![
            format!("HTTP/1.1 {status}"),
            "Content-Type: application/x-amz-json-1.0".into(),
            format!("x-amzn-ErrorType: {error_type}"),
        ],
        body: body.into_bytes(),
    }
    .to_bytes()
}

async fn serve(
    client: TcpStream,
    plan: Arc<Mutex<Plan>>,
    counts: Arc<FaultCounts>,
) -> std::io::Result<()> {
    let mut client = BufReader::new(client);
    let mut upstream: Option<(SocketAddr, BufReader<TcpStream>)> = None;
    while let Some(request) = read_message(&mut client).await? {
        let (fault, slow_by, target) = {
            let mut plan = plan.lock().unwrap();
            let op = operation(&request);
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
            (fault, plan.slow_by, plan.upstream)
        };
        let _ = slow_by;
        let stream = client.get_mut();
        match fault {
            Fault::Throttle => {
                counts.throttled.fetch_add(1, Ordering::SeqCst);
                stream
                    .write_all(&error_response(
                        "400 Bad Request",
                        "ThrottlingException",
                        "Rate of requests exceeds the allowed throughput.",
                    ))
                    .await?;
                continue;
            }
            Fault::ServerError => {
                counts.server_errors.fetch_add(1, Ordering::SeqCst);
                stream
                    .write_all(&error_response(
                        "500 Internal Server Error",
                        "InternalServerError",
                        "Internal server error",
                    ))
                    .await?;
                continue;
            }
            Fault::Error(kind) => {
                counts.server_errors.fetch_add(1, Ordering::SeqCst);
                stream
                    .write_all(&error_response("400 Bad Request", kind, "injected"))
                    .await?;
                continue;
            }
            Fault::DropBefore => {
                counts.dropped_before.fetch_add(1, Ordering::SeqCst);
                return Ok(());
            }
            Fault::Slow(by) => {
                counts.slowed.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(by).await;
            }
            Fault::None | Fault::DropAfter => {}
        }
        let Some(target) = target else {
            counts.refused.fetch_add(1, Ordering::SeqCst);
            return Ok(());
        };
        if upstream.as_ref().map(|(addr, _)| *addr) != Some(target) {
            match TcpStream::connect(target).await {
                Ok(stream) => upstream = Some((target, BufReader::new(stream))),
                Err(_) => {
                    counts.refused.fetch_add(1, Ordering::SeqCst);
                    return Ok(());
                }
            }
        }
        let (_, up) = upstream.as_mut().unwrap();
        if up.get_mut().write_all(&request.to_bytes()).await.is_err() {
            counts.refused.fetch_add(1, Ordering::SeqCst);
            return Ok(());
        }
        let response = match read_message(up).await {
            Ok(Some(response)) => response,
            _ => {
                counts.refused.fetch_add(1, Ordering::SeqCst);
                return Ok(());
            }
        };
        if matches!(fault, Fault::DropAfter) {
            counts.dropped_after.fetch_add(1, Ordering::SeqCst);
            return Ok(());
        }
        counts.forwarded.fetch_add(1, Ordering::SeqCst);
        client.get_mut().write_all(&response.to_bytes()).await?;
    }
    Ok(())
}
