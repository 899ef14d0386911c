//! The HTTP/1.1 plumbing of the harness's servers (the Runtime API emulator, the fault
//! proxy), on hyper: accept connections, serve each with keep-alive, hand the handler a
//! request whose body has arrived, and drop the connection when the handler hangs up.

use std::future::Future;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::StatusCode;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// A request whose body has been read.
pub type Request = hyper::Request<Bytes>;

/// A response with its whole body.
pub type Response = hyper::Response<Full<Bytes>>;

/// The connection is dropped without an answer (the handler's `Err`).
#[derive(Debug)]
pub struct Hangup(pub &'static str);

impl std::fmt::Display for Hangup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "connection dropped: {}", self.0)
    }
}

impl std::error::Error for Hangup {}

/// Serves every connection `listener` accepts with `handle`, until the returned task is
/// aborted.
pub fn serve<H, F>(listener: TcpListener, handle: H) -> JoinHandle<()>
where
    H: Fn(Request) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<Response, Hangup>> + Send + 'static,
{
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let handle = handle.clone();
            let service = service_fn(move |request: hyper::Request<Incoming>| {
                let handle = handle.clone();
                async move {
                    let (head, body) = request.into_parts();
                    let body = body
                        .collect()
                        .await
                        .map_err(|_| Hangup("the request body did not arrive"))?
                        .to_bytes();
                    handle(Request::from_parts(head, body)).await
                }
            });
            tokio::spawn(async move {
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    })
}

/// A response with `status`, `headers` and `body`.
pub fn response(
    status: StatusCode,
    headers: &[(&str, String)],
    body: impl Into<Bytes>,
) -> Response {
    let mut builder = hyper::Response::builder().status(status);
    for (name, value) in headers {
        builder = builder.header(*name, value);
    }
    builder
        .body(Full::new(body.into()))
        .expect("valid response headers")
}
