//! The request as the protocol reads it ([`HttpRequest`]) and its key ([`HeaderKey`]).

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use lambda_http::{Body, Request};

use super::caller::caller_identity;

use crate::input::{AttributeValue, Input};
use crate::key::{KeyError, KeyExtractor};

/// The longest `Idempotency-Key` accepted, in bytes (as Stripe's limit of 255 characters).
pub const MAX_IDEMPOTENCY_KEY_BYTES: usize = 255;

/// An HTTP request as an [`Input`]: its body, and its headers as attributes. It has no id.
#[derive(Debug)]
pub struct HttpRequest(pub(crate) Request);

impl HttpRequest {
    /// The request.
    pub fn request(&self) -> &Request {
        &self.0
    }
}

impl Input for HttpRequest {
    fn id(&self) -> Option<&str> {
        None
    }

    /// The body's bytes (empty when there is none: a `POST` may have no body).
    fn body(&self) -> Option<Cow<'_, [u8]>> {
        Some(Cow::Borrowed(match self.0.body() {
            Body::Empty => &[],
            Body::Text(text) => text.as_bytes(),
            Body::Binary(bytes) => bytes,
            _ => &[],
        }))
    }

    /// The header `name` (case-insensitive), when its value is visible ASCII text.
    fn attribute(&self, name: &str) -> Option<AttributeValue<'_>> {
        let value = self.0.headers().get(name)?;
        value.to_str().ok().map(AttributeValue::Text)
    }

    /// The query string (empty when there is none), its `&`-separated parameters as sent
    /// (not decoded), empty ones left out, ordered by name (parameters of one name keep their
    /// order): the payload hash covers it beside the body.
    fn query(&self) -> Option<Cow<'_, str>> {
        Some(Cow::Owned(canonical_query(
            self.0.uri().query().unwrap_or_default(),
        )))
    }
}

/// `query` as the payload hash covers it: its `&`-separated parameters as sent (not decoded:
/// a retry sends the same bytes), empty ones left out, ordered by name; parameters of one name
/// keep their order (`tag=a&tag=b` is not `tag=b&tag=a`).
///
/// The order of parameters of different names does not count because `lambda_http` rebuilds
/// the query string of a REST API's or an ALB's request from a map whose order changes from
/// one execution environment to the next: taken as sent, a retry of the very same request
/// could be answered 422.
fn canonical_query(query: &str) -> String {
    fn name(parameter: &str) -> &str {
        parameter
            .split_once('=')
            .map_or(parameter, |(name, _)| name)
    }
    let mut parameters: Vec<&str> = query.split('&').filter(|p| !p.is_empty()).collect();
    // A stable sort: parameters of one name stay in their order.
    parameters.sort_by(|a, b| name(a).cmp(name(b)));
    parameters.join("&")
}

/// Keys a request on a header (`Idempotency-Key` by default), scoped to the request's method
/// and path and to its caller. The same key sent to `POST /payments` and to `POST /refunds`,
/// or by two callers, names two records, so a response is never replayed to another endpoint
/// or another caller.
///
/// The caller is the identity the request's context carries ([`caller_identity`]: a JWT's
/// subject, a Lambda authorizer's principal, an IAM caller), unless the layer chose another
/// ([`with_caller`](super::IdempotentHttpLayer::with_caller)) or none
/// ([`without_caller`](super::IdempotentHttpLayer::without_caller)). A request without one is
/// scoped to its method and path only.
///
/// The value is used as it is, or, when it is a quoted string (the draft's structured-field
/// form, `"8e03978e-40d5-43e8-bc93-6894a57f9324"`), without its quotes, leading and trailing
/// spaces trimmed. An empty value counts as absent; a value over
/// [`MAX_IDEMPOTENCY_KEY_BYTES`], with bytes other than visible ASCII, spaces and tabs, or a
/// header sent more than once, is an error.
#[derive(Clone)]
pub struct HeaderKey {
    header: String,
    caller: Option<CallerFn>,
}

/// Names the caller a key is scoped to.
pub(crate) type CallerFn = Arc<dyn Fn(&Request) -> Option<String> + Send + Sync>;

impl fmt::Debug for HeaderKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HeaderKey")
            .field("header", &self.header)
            .field("scoped_to_caller", &self.caller.is_some())
            .finish()
    }
}

impl HeaderKey {
    /// Keys on the header called `header`, scoped to the caller identity
    /// ([`caller_identity`]).
    pub fn new(header: impl Into<String>) -> Self {
        Self {
            header: header.into(),
            caller: Some(Arc::new(caller_identity)),
        }
    }

    /// The header's name.
    pub fn header(&self) -> &str {
        &self.header
    }

    /// This key on the header called `header`, its caller scope unchanged.
    pub(crate) fn on_header(self, header: String) -> Self {
        Self { header, ..self }
    }

    /// This key scoped to the caller `caller` names, or to none.
    pub(crate) fn scoped_to(self, caller: Option<CallerFn>) -> Self {
        Self { caller, ..self }
    }

    /// The key's value in `request`, or why there is none.
    pub(crate) fn value<'r>(&self, request: &'r Request) -> Result<&'r str, KeyError> {
        let missing = || KeyError::MissingAttribute {
            name: self.header.clone(),
        };
        let mut values = request.headers().get_all(&self.header).iter();
        let raw = values.next().ok_or_else(missing)?;
        if values.next().is_some() {
            // Two keys on one request (multi-value headers): neither can be chosen safely.
            return Err(KeyError::Custom(
                format!("the {} header is sent more than once", self.header).into(),
            ));
        }
        let text = raw.to_str().map_err(|_| {
            KeyError::Custom(format!("the {} header is not visible ASCII text", self.header).into())
        })?;
        let text = text.trim();
        let text = match text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
            Some(inner) if !inner.contains(['"', '\\']) => inner,
            _ => text,
        };
        if text.is_empty() {
            return Err(missing());
        }
        if text.len() > MAX_IDEMPOTENCY_KEY_BYTES {
            return Err(KeyError::Custom(
                format!(
                    "the {} header is {} bytes, over the limit of {MAX_IDEMPOTENCY_KEY_BYTES}",
                    self.header,
                    text.len()
                )
                .into(),
            ));
        }
        Ok(text)
    }
}

impl Default for HeaderKey {
    fn default() -> Self {
        Self::new("Idempotency-Key")
    }
}

impl KeyExtractor<HttpRequest> for HeaderKey {
    /// `<METHOD> <path>`, a line feed, the caller and a line feed when there is one, then the
    /// key. A method, a path and a key hold no line feed, so the first line is the method and
    /// path, the last the key, and what lies between (a caller may hold line feeds) the caller.
    fn key_material(&self, input: &HttpRequest) -> Result<Vec<u8>, KeyError> {
        let request = &input.0;
        let key = self.value(request)?;
        let caller = self.caller.as_ref().and_then(|caller| caller(request));
        let scope = format!("{} {}", request.method(), request.uri().path());
        Ok(match caller {
            Some(caller) => format!("{scope}\n{caller}\n{key}"),
            None => format!("{scope}\n{key}"),
        }
        .into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn post(path: &str, key: Option<&str>) -> HttpRequest {
        let mut builder = lambda_http::http::Request::builder()
            .method("POST")
            .uri(path);
        if let Some(key) = key {
            builder = builder.header("Idempotency-Key", key);
        }
        HttpRequest(builder.body(Body::Text("{}".into())).unwrap())
    }

    fn material(request: &HttpRequest) -> Result<Vec<u8>, KeyError> {
        HeaderKey::default().key_material(request)
    }

    #[test]
    fn keys_are_scoped_to_method_and_path_and_unquoted() {
        let plain = material(&post("/payments", Some("k-1"))).unwrap();
        assert_eq!(plain, b"POST /payments\nk-1");
        assert_eq!(
            material(&post("/payments", Some("\"k-1\""))).unwrap(),
            plain
        );
        assert_eq!(
            material(&post("/payments?x=1", Some(" k-1 "))).unwrap(),
            plain
        );
        assert_ne!(material(&post("/refunds", Some("k-1"))).unwrap(), plain);
        // A quoted value with escapes is used as sent.
        assert_eq!(
            material(&post("/p", Some(r#""a\"b""#))).unwrap(),
            b"POST /p\n\"a\\\"b\""
        );
    }

    #[test]
    fn query_strings_are_ordered_by_name_and_otherwise_kept_as_sent() {
        for (query, canonical) in [
            ("", ""),
            ("amount=100", "amount=100"),
            ("b=2&a=1", "a=1&b=2"),
            ("tag=b&x=1&tag=a", "tag=b&tag=a&x=1"),
            ("a=1&&b=2&", "a=1&b=2"),
            ("flag&a=%41+b", "a=%41+b&flag"),
            ("a=1=2&a", "a=1=2&a"),
        ] {
            assert_eq!(canonical_query(query), canonical, "{query}");
        }
        let request = post("/charges?b=2&a=1", Some("k"));
        assert_eq!(request.query().as_deref(), Some("a=1&b=2"));
        assert_eq!(post("/charges", Some("k")).query().as_deref(), Some(""));
    }

    #[test]
    fn a_caller_is_the_line_between_method_and_path_and_key() {
        let request = post("/payments", Some("k-1"));
        let scoped = |caller: Option<&'static str>| {
            HeaderKey::default()
                .scoped_to(Some(Arc::new(move |_: &Request| caller.map(String::from))))
                .key_material(&request)
                .unwrap()
        };
        assert_eq!(scoped(Some("alice")), b"POST /payments\nalice\nk-1");
        assert_eq!(scoped(None), b"POST /payments\nk-1");
        assert_eq!(scoped(Some("")), b"POST /payments\n\nk-1");
        // Without a request context the default caller is none: method and path only.
        assert_eq!(material(&request).unwrap(), b"POST /payments\nk-1");
        let unscoped = HeaderKey::default()
            .scoped_to(None)
            .on_header("X-Key".into());
        assert_eq!(unscoped.header(), "X-Key");
        assert!(format!("{unscoped:?}").contains("scoped_to_caller: false"));
    }

    #[test]
    fn missing_empty_and_oversized_keys() {
        for key in [None, Some(""), Some("\"\""), Some("  ")] {
            let err = material(&post("/p", key)).unwrap_err();
            assert!(err.is_absent(), "{key:?}: {err:?}");
        }
        let long = "k".repeat(MAX_IDEMPOTENCY_KEY_BYTES + 1);
        let err = material(&post("/p", Some(&long))).unwrap_err();
        assert!(
            !err.is_absent() && err.to_string().contains("custom"),
            "{err}"
        );
        let ok = "k".repeat(MAX_IDEMPOTENCY_KEY_BYTES);
        assert!(material(&post("/p", Some(&ok))).is_ok());
    }
}
