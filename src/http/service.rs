//! [`IdempotentHttp`]: the service, and the handler as the protocol sees it
//! ([`HttpHandler`]).

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use lambda_http::http::header::HeaderName;
use lambda_http::http::{Method, StatusCode};
use lambda_http::{Body, IntoResponse, Request, RequestExt, Response};
use lambda_runtime::LambdaEvent;
use tower::{BoxError, Service};

use super::request::{HeaderKey, HttpRequest};
use super::response::{Problem, StoredResponse};
use crate::clock::SystemClock;
use crate::error::Error;
use crate::idempotent::{
    catch_panic_async, Completion, HandlerKind, Idempotent, ResultAndWrites, ResultOnly,
};
use crate::outcome::Processed;

/// What the HTTP layer adds to the protocol: which requests it protects, what it stores and
/// how it answers.
#[derive(Clone)]
pub(crate) struct HttpOptions {
    pub(crate) methods: Vec<Method>,
    pub(crate) stored_headers: Vec<HeaderName>,
    pub(crate) stores: Arc<dyn Fn(StatusCode) -> bool + Send + Sync>,
    pub(crate) retry_after: Duration,
    pub(crate) header: String,
}

impl fmt::Debug for HttpOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpOptions")
            .field("methods", &self.methods)
            .field("stored_headers", &self.stored_headers)
            .field("retry_after", &self.retry_after)
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}

/// A `lambda_http` handler made idempotent on the `Idempotency-Key` header: it answers
/// every request with a response (the handler's, a replay, or a problem), never an error.
/// Built by [`IdempotentHttpLayer`](super::IdempotentHttpLayer).
#[derive(Debug, Clone)]
pub struct IdempotentHttp<S, St, C = SystemClock, M = ResultOnly> {
    inner: Idempotent<HttpHandler<S, M>, St, HeaderKey, C, M>,
    options: Arc<HttpOptions>,
}

impl<S, St, C, M> IdempotentHttp<S, St, C, M> {
    pub(crate) fn new(
        inner: Idempotent<HttpHandler<S, M>, St, HeaderKey, C, M>,
        options: Arc<HttpOptions>,
    ) -> Self {
        Self { inner, options }
    }

    /// The handler.
    pub fn get_ref(&self) -> &S {
        &self.inner.get_ref().inner
    }
}

/// The handler's full response for its own caller, beside the stored form: headers that are
/// not stored still reach the request that ran the handler.
#[derive(Debug, Clone, Default)]
struct ResponseSlot(Arc<Mutex<Option<Response<Body>>>>);

impl ResponseSlot {
    fn put(&self, response: Response<Body>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(response);
    }

    fn take(&self) -> Option<Response<Body>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

/// A response that is not stored (5xx by default): an error for the protocol, so the lease
/// is released and nothing is committed; its caller gets the response itself.
#[derive(Debug, thiserror::Error)]
#[error("the handler answered {status}, a status that is not stored")]
struct Unstored {
    status: u16,
}

/// The handler as the idempotent service sees it: a service of [`HttpRequest`] answering
/// the [`StoredResponse`] (or, with writes, a [`Completion`] of it).
#[derive(Debug)]
pub struct HttpHandler<S, M> {
    inner: S,
    options: Arc<HttpOptions>,
    mode: PhantomData<fn() -> M>,
}

impl<S: Clone, M> Clone for HttpHandler<S, M> {
    fn clone(&self) -> Self {
        Self::new(self.inner.clone(), Arc::clone(&self.options))
    }
}

impl<S, M> HttpHandler<S, M> {
    pub(crate) fn new(inner: S, options: Arc<HttpOptions>) -> Self {
        Self {
            inner,
            options,
            mode: PhantomData,
        }
    }
}

impl<S, M> HttpHandler<S, M> {
    /// Calls the handler with the request, taking the caller's response slot out of it first.
    fn start(
        &mut self,
        event: LambdaEvent<HttpRequest>,
    ) -> (S::Future, Arc<HttpOptions>, Option<ResponseSlot>)
    where
        S: Service<Request>,
    {
        let mut request = event.payload.0;
        let slot = request.extensions_mut().remove::<ResponseSlot>();
        (self.inner.call(request), Arc::clone(&self.options), slot)
    }
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The stored form of `response`, the response itself left in `slot` for its caller; a
/// status that is not stored is an [`Unstored`] error.
fn keep(
    response: Response<Body>,
    options: &HttpOptions,
    slot: Option<ResponseSlot>,
) -> Result<StoredResponse, BoxError> {
    let status = response.status();
    let stored = StoredResponse::of(&response, &options.stored_headers);
    if let Some(slot) = slot {
        slot.put(response);
    }
    if (options.stores)(status) {
        Ok(stored)
    } else {
        Err(Box::new(Unstored {
            status: status.as_u16(),
        }))
    }
}

impl<S> Service<LambdaEvent<HttpRequest>> for HttpHandler<S, ResultOnly>
where
    S: Service<Request>,
    S::Response: IntoResponse + Send,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = StoredResponse;
    type Error = BoxError;
    type Future = BoxFuture<Result<StoredResponse, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, event: LambdaEvent<HttpRequest>) -> Self::Future {
        let (answer, options, slot) = self.start(event);
        Box::pin(async move {
            let response = answer.await.map_err(Into::into)?.into_response().await;
            keep(response, &options, slot)
        })
    }
}

impl<S, R> Service<LambdaEvent<HttpRequest>> for HttpHandler<S, ResultAndWrites>
where
    S: Service<Request, Response = Completion<R>>,
    R: IntoResponse + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = Completion<StoredResponse>;
    type Error = BoxError;
    type Future = BoxFuture<Result<Completion<StoredResponse>, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, event: LambdaEvent<HttpRequest>) -> Self::Future {
        let (answer, options, slot) = self.start(event);
        Box::pin(async move {
            let Completion { result, writes } = answer.await.map_err(Into::into)?;
            let response = result.into_response().await;
            Ok(Completion {
                result: keep(response, &options, slot)?,
                writes,
            })
        })
    }
}

/// What the handler answered: a stored response, with or without writes.
pub trait HandlerAnswer: Send + 'static {
    /// The answer holds writes, which only a keyed request may commit.
    fn has_writes(&self) -> bool;
}

impl HandlerAnswer for StoredResponse {
    fn has_writes(&self) -> bool {
        false
    }
}

impl HandlerAnswer for Completion<StoredResponse> {
    fn has_writes(&self) -> bool {
        !self.writes.is_empty()
    }
}

impl<S, St, C, M> Service<Request> for IdempotentHttp<S, St, C, M>
where
    HttpHandler<S, M>: Service<LambdaEvent<HttpRequest>, Error = BoxError> + Clone + Send + 'static,
    <HttpHandler<S, M> as Service<LambdaEvent<HttpRequest>>>::Future: 'static,
    <HttpHandler<S, M> as Service<LambdaEvent<HttpRequest>>>::Response: HandlerAnswer,
    <HttpHandler<S, M> as Service<LambdaEvent<HttpRequest>>>::Future: Send,
    M: HandlerKind<HttpHandler<S, M>, St, HeaderKey, C, HttpRequest, Value = StoredResponse>,
{
    type Response = Response<Body>;
    type Error = Error;
    type Future = BoxFuture<Result<Response<Body>, Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        Service::<LambdaEvent<HttpRequest>>::poll_ready(&mut self.inner, cx)
    }

    fn call(&mut self, mut request: Request) -> Self::Future {
        let options = Arc::clone(&self.options);
        let context = request.lambda_context_ref().cloned().unwrap_or_default();
        let slot = ResponseSlot::default();
        request.extensions_mut().insert(slot.clone());
        let event = LambdaEvent::new(HttpRequest(request), context);
        if !options.methods.contains(event.payload.0.method()) {
            let handler = self.inner.take_ready_inner();
            return Box::pin(pass_through(handler, event, slot, options));
        }
        let processed = self.inner.call(event);
        Box::pin(async move {
            let problem = |problem: Problem| problem.response(&options.header, options.retry_after);
            let processed = processed.await;
            crate::metrics::outcome(match &processed {
                Ok(processed) => processed.outcome(),
                Err(err) => err.outcome(),
            });
            Ok(match processed {
                Ok(Processed::Replayed(stored)) => stored.replay(),
                Ok(Processed::Executed(stored) | Processed::Unprotected(stored)) => {
                    slot.take().unwrap_or_else(|| stored.replay())
                }
                Ok(Processed::ReplayedWithoutResult) => problem(Problem::ResultUnavailable),
                Err(Error::Handler(err)) if err.is::<Unstored>() => {
                    slot.take().unwrap_or_else(|| problem(Problem::Failed))
                }
                Err(err) => {
                    if let Some(fault) = err.misconfiguration() {
                        // Answered 503, never stored, until the store is set up.
                        tracing::error!(
                            error_type = err.error_type(),
                            store = fault.store,
                            table = %fault.table,
                            code = %fault.code,
                            error = %fault,
                            "the idempotency store is misconfigured"
                        );
                    } else {
                        tracing::warn!(
                            error_type = err.error_type(),
                            outcome = %err.outcome(),
                            error = %crate::error::error_chain(&err),
                            "idempotent request not processed"
                        );
                    }
                    problem(Problem::of(&err))
                }
            })
        })
    }
}

/// A request the layer does not protect (its method): the handler's response as it is. The
/// handler is the ready one, called directly (the tower contract). Writes need a key, so an
/// answer with writes is refused and nothing is applied; a panic is answered 500.
async fn pass_through<H>(
    mut handler: H,
    event: LambdaEvent<HttpRequest>,
    slot: ResponseSlot,
    options: Arc<HttpOptions>,
) -> Result<Response<Body>, Error>
where
    H: Service<LambdaEvent<HttpRequest>, Error = BoxError>,
    H::Response: HandlerAnswer,
{
    let failed = || Problem::Failed.response(&options.header, options.retry_after);
    let answer = catch_panic_async(async move { Ok(handler.call(event).await) }).await;
    match answer {
        Ok(Ok(answer)) if answer.has_writes() => {
            tracing::error!("a request without idempotency answered writes; none was applied");
            Ok(failed())
        }
        Ok(Ok(_)) => Ok(slot.take().unwrap_or_else(failed)),
        Ok(Err(err)) if err.is::<Unstored>() => Ok(slot.take().unwrap_or_else(failed)),
        Ok(Err(err)) => {
            tracing::warn!(error = %crate::error::error_chain(&*err), "the handler failed");
            Ok(failed())
        }
        Err(panic) => {
            tracing::warn!(error_type = panic.error_type(), "the handler panicked");
            Ok(failed())
        }
    }
}
