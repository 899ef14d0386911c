//! [`IdempotentHttpLayer`]: the HTTP options around an [`IdempotencyLayer`].

use std::sync::Arc;
use std::time::Duration;

use lambda_http::http::header::{HeaderName, CONTENT_ENCODING, CONTENT_TYPE, LOCATION};
use lambda_http::http::{Method, StatusCode};
use lambda_http::Request;
use tower::Layer;

use super::request::HeaderKey;
use super::response::stored_by_default;
use super::service::{HttpHandler, HttpOptions, IdempotentHttp};
use crate::clock::SystemClock;
use crate::config::MissingKey;
use crate::idempotent::{IdempotencyLayer, ResultOnly};
use crate::key::PayloadValidation;

/// Builds [`IdempotentHttp`] services: `lambda_http` handlers made idempotent on the
/// `Idempotency-Key` header. See the [module](crate::http) docs for what each request gets.
///
/// # Default
/// - the key is the `Idempotency-Key` header, required: a `POST` or `PATCH` without it is
///   answered 400 (see [`key_optional`](Self::key_optional));
/// - keys are scoped to the method, the path and the caller identity the request carries
///   ([`caller_identity`](super::caller_identity); see [`with_caller`](Self::with_caller)
///   and [`without_caller`](Self::without_caller));
/// - `POST` and `PATCH` requests are protected; the others go to the handler as they are;
/// - the payload hash covers the query string and the body (a key reused with another
///   query string or body is answered 422); another [`PayloadValidation`] given to the layer
///   chooses what of the body it covers;
/// - responses below 500 are stored, except 408, 409, 425 and 429
///   ([`stored_by_default`]), with their `content-type`,
///   `content-encoding` and `location` headers;
/// - `Retry-After: 1` on the answers that ask for a retry.
#[derive(Debug, Clone)]
pub struct IdempotentHttpLayer<St, C = SystemClock, M = ResultOnly> {
    layer: IdempotencyLayer<St, HeaderKey, C, M>,
    options: HttpOptions,
}

impl<St, C, M> IdempotentHttpLayer<St, C, M> {
    /// The HTTP layer on `layer`'s store, clock, configuration and mode (its key extractor is
    /// replaced by the header).
    pub fn new<K>(layer: IdempotencyLayer<St, K, C, M>) -> Self {
        let mut layer = layer.with_key(HeaderKey::default());
        if layer.config().validation == PayloadValidation::Off {
            let config = layer
                .config()
                .clone()
                .with_payload_validation(PayloadValidation::Body);
            layer = layer.with_config(config);
        }
        Self {
            layer,
            options: HttpOptions {
                methods: vec![Method::POST, Method::PATCH],
                stored_headers: vec![CONTENT_TYPE, CONTENT_ENCODING, LOCATION],
                stores: Arc::new(stored_by_default),
                retry_after: Duration::from_secs(1),
                header: "Idempotency-Key".into(),
            },
        }
    }

    /// Takes the key from the header `name` instead.
    pub fn with_header(mut self, name: impl Into<String>) -> Self {
        let name = name.into();
        let key = self.layer.key().clone().on_header(name.clone());
        self.layer = self.layer.with_key(key);
        self.options.header = name;
        self
    }

    /// Scopes keys to the caller `caller` names instead of the request context's identity
    /// ([`caller_identity`](super::caller_identity)); `None` scopes a request to its method
    /// and path only. Name only what the caller cannot choose: what an authorizer or the load
    /// balancer sets, never a header or body field a client sends.
    ///
    /// A tenant behind an Application Load Balancer that authenticates users (its
    /// `authenticate-oidc` or `authenticate-cognito` action sets `x-amzn-oidc-identity`, the
    /// user's `sub`):
    ///
    /// ```
    /// use lambda_idempotency::http::IdempotentHttpLayer;
    /// use lambda_idempotency::store::InMemoryStore;
    /// use lambda_idempotency::IdempotencyLayer;
    ///
    /// let layer = IdempotentHttpLayer::new(IdempotencyLayer::new(InMemoryStore::new()))
    ///     .with_caller(|request| {
    ///         let user = request.headers().get("x-amzn-oidc-identity")?;
    ///         Some(format!("alb-user:{}", user.to_str().ok()?))
    ///     });
    /// ```
    pub fn with_caller(
        mut self,
        caller: impl Fn(&Request) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        let key = self.layer.key().clone().scoped_to(Some(Arc::new(caller)));
        self.layer = self.layer.with_key(key);
        self
    }

    /// Scopes keys to the request's method and path only, not to its caller: callers who
    /// send the same key share its record, and keeping keys unique across callers is theirs
    /// to do.
    pub fn without_caller(mut self) -> Self {
        let key = self.layer.key().clone().scoped_to(None);
        self.layer = self.layer.with_key(key);
        self
    }

    /// Runs a request without the header unprotected, instead of answering 400
    /// ([`MissingKey::ProcessUnprotected`]). Handlers with writes always need the key.
    pub fn key_optional(mut self) -> Self {
        let config = self
            .layer
            .config()
            .clone()
            .with_missing_key(MissingKey::ProcessUnprotected);
        self.layer = self.layer.with_config(config);
        self
    }

    /// Protects requests with these methods (the others go to the handler as they are).
    pub fn with_methods(mut self, methods: impl IntoIterator<Item = Method>) -> Self {
        self.options.methods = methods.into_iter().collect();
        self
    }

    /// Stores (and replays, their values byte for byte) these response headers; the others
    /// reach only the first caller.
    pub fn with_stored_headers(mut self, headers: impl IntoIterator<Item = HeaderName>) -> Self {
        self.options.stored_headers = headers.into_iter().collect();
        self
    }

    /// Stores the responses whose status `stores` accepts; the others are answered to their
    /// caller and not stored, so a retry runs the handler again (and, with writes, commit
    /// nothing).
    pub fn with_stored_statuses(
        mut self,
        stores: impl Fn(StatusCode) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.options.stores = Arc::new(stores);
        self
    }

    /// The `Retry-After` of answers that ask for a retry (rounded down to seconds, at least 1).
    pub fn with_retry_after(mut self, retry_after: Duration) -> Self {
        self.options.retry_after = retry_after;
        self
    }

    /// The idempotency layer underneath.
    pub fn idempotency(&self) -> &IdempotencyLayer<St, HeaderKey, C, M> {
        &self.layer
    }
}

impl<S, St: Clone, C: Clone, M> Layer<S> for IdempotentHttpLayer<St, C, M> {
    type Service = IdempotentHttp<S, St, C, M>;

    fn layer(&self, inner: S) -> Self::Service {
        let options = Arc::new(self.options.clone());
        let handler = HttpHandler::new(inner, Arc::clone(&options));
        IdempotentHttp::new(self.layer.layer(handler), options)
    }
}
