//! A loopback TCP proxy in front of DynamoDB Local that delays every byte sent to it by a
//! fixed time: each request reaches DynamoDB Local that much later, so every round trip
//! costs the delay more, as the network distance to DynamoDB does. Bytes are delayed from
//! the moment they arrive, not one after another, so a request in several packets is
//! delayed once, and requests on different connections do not wait for each other.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// A running proxy; it stops when dropped.
pub struct LatencyProxy {
    endpoint: String,
    task: JoinHandle<()>,
}

impl LatencyProxy {
    /// A proxy on a free loopback port forwarding to `upstream` (`http://host:port`), each
    /// request delayed by `delay`.
    pub async fn start(upstream: &str, delay: Duration) -> LatencyProxy {
        let target: SocketAddr = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .expect("the DynamoDB endpoint is http://ip:port");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(relay(client, target, delay));
            }
        });
        LatencyProxy { endpoint, task }
    }

    /// The endpoint to give the clients.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }
}

impl Drop for LatencyProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(client: TcpStream, target: SocketAddr, delay: Duration) {
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    let (chunks, mut due) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let read = async move {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n) = from_client.read(&mut buf).await {
            if n == 0
                || chunks
                    .send((Instant::now() + delay, buf[..n].to_vec()))
                    .is_err()
            {
                break;
            }
        }
    };
    let write = async move {
        while let Some((at, chunk)) = due.recv().await {
            tokio::time::sleep_until(at).await;
            if to_server.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = to_server.shutdown().await;
    };
    let back = async move {
        let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
        let _ = to_client.shutdown().await;
    };
    tokio::join!(read, write, back);
}
