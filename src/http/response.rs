//! Responses: the stored form ([`StoredResponse`]) and the problem+json answers.

use std::time::Duration;

use base64::Engine;
use lambda_http::http::header::{HeaderName, HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use lambda_http::http::StatusCode;
use lambda_http::{Body, Response};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::Error;

/// The header that marks a replayed response, with the value `true` (as Stripe's API).
pub const REPLAYED_HEADER: &str = "Idempotent-Replayed";

/// A response as stored in the record and replayed: its status, the chosen headers and the
/// body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct StoredResponse {
    /// The status code.
    pub status: u16,
    /// The stored headers: lower-case names and their values' bytes, in the response's
    /// order. A value is stored as a JSON string when it is UTF-8, as `{"binary": <base64>}`
    /// otherwise.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        serialize_with = "serialize_headers",
        deserialize_with = "deserialize_headers"
    )]
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body.
    #[serde(default)]
    pub body: StoredBody,
}

/// A stored response body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum StoredBody {
    /// No body.
    #[default]
    Empty,
    /// A text body.
    Text(String),
    /// A binary body, base64 (standard alphabet, padded).
    Binary(String),
}

/// A stored header value as it is written: text, or base64 when it is not UTF-8.
#[derive(Serialize)]
#[serde(untagged)]
enum HeaderValueOut<'a> {
    Text(&'a str),
    Binary { binary: String },
}

/// A stored header value as it is read.
#[derive(Deserialize)]
#[serde(untagged)]
enum HeaderValueIn {
    Text(String),
    Binary { binary: String },
}

fn serialize_headers<S: Serializer>(
    headers: &[(String, Vec<u8>)],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(headers.iter().map(|(name, value)| {
        let value = match std::str::from_utf8(value) {
            Ok(text) => HeaderValueOut::Text(text),
            Err(_) => HeaderValueOut::Binary {
                binary: base64::engine::general_purpose::STANDARD.encode(value),
            },
        };
        (name, value)
    }))
}

/// The stored headers; a value whose base64 no longer decodes is left out.
fn deserialize_headers<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<(String, Vec<u8>)>, D::Error> {
    let stored = Vec::<(String, HeaderValueIn)>::deserialize(deserializer)?;
    Ok(stored
        .into_iter()
        .filter_map(|(name, value)| match value {
            HeaderValueIn::Text(text) => Some((name, text.into_bytes())),
            HeaderValueIn::Binary { binary } => base64::engine::general_purpose::STANDARD
                .decode(binary)
                .ok()
                .map(|bytes| (name, bytes)),
        })
        .collect())
}

impl StoredResponse {
    /// The stored form of `response`, keeping the headers named in `headers`, their values
    /// byte for byte.
    pub fn of(response: &Response<Body>, headers: &[HeaderName]) -> Self {
        let kept = response
            .headers()
            .iter()
            .filter(|(name, _)| headers.contains(name))
            .map(|(name, value)| (name.to_string(), value.as_bytes().to_vec()))
            .collect();
        let body = match response.body() {
            Body::Text(text) => StoredBody::Text(text.clone()),
            Body::Binary(bytes) => {
                StoredBody::Binary(base64::engine::general_purpose::STANDARD.encode(bytes))
            }
            _ => StoredBody::Empty,
        };
        Self {
            status: response.status().as_u16(),
            headers: kept,
            body,
        }
    }

    /// The response again, its headers' values byte for byte, marked as replayed with
    /// [`REPLAYED_HEADER`]. A stored part that no longer decodes (a status, a header, base64)
    /// is left out.
    pub fn replay(&self) -> Response<Body> {
        let body = match &self.body {
            StoredBody::Empty => Body::Empty,
            StoredBody::Text(text) => Body::Text(text.clone()),
            StoredBody::Binary(encoded) => base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map(Body::Binary)
                .unwrap_or(Body::Empty),
        };
        let mut response = Response::new(body);
        *response.status_mut() =
            StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let headers = response.headers_mut();
        for (name, value) in &self.headers {
            if let (Ok(name), Ok(value)) = (
                HeaderName::try_from(name.as_str()),
                HeaderValue::from_bytes(value),
            ) {
                headers.append(name, value);
            }
        }
        headers.insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
        response
    }
}

/// Which responses are stored: the default keeps every status below 500 except those that
/// ask the client to retry (408, 409, 425, 429); 5xx responses are not stored, so a retry
/// runs the handler again.
pub fn stored_by_default(status: StatusCode) -> bool {
    !status.is_server_error() && !matches!(status.as_u16(), 408 | 409 | 425 | 429)
}

/// The problems this layer answers with, as `application/problem+json` (RFC 9457).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Problem {
    MissingKey,
    InvalidKey,
    InProgress,
    KeyReused,
    Conflict,
    ResultUnavailable,
    FailedPermanently,
    Unavailable,
    Failed,
}

impl Problem {
    /// The problem an error is answered with.
    pub(crate) fn of(err: &Error) -> Self {
        match err {
            Error::Key(key) if key.is_absent() => Problem::MissingKey,
            Error::Key(_) => Problem::InvalidKey,
            Error::PayloadMismatch { .. } => Problem::KeyReused,
            Error::InProgress { .. } | Error::Contended { .. } | Error::SameKeyFailed { .. } => {
                Problem::InProgress
            }
            Error::Conflict { .. } | Error::ConditionFailed { .. } => Problem::Conflict,
            Error::Permanent { .. } => Problem::FailedPermanently,
            Error::Store(store) if !store.is_request_fault() => Problem::Unavailable,
            Error::DeadlineNear | Error::DeadlineReached => Problem::Unavailable,
            _ => Problem::Failed,
        }
    }

    /// Status, `type` name and title.
    fn parts(self) -> (StatusCode, &'static str, &'static str) {
        match self {
            Problem::MissingKey => (
                StatusCode::BAD_REQUEST,
                "missing-key",
                "This request needs an idempotency key",
            ),
            Problem::InvalidKey => (
                StatusCode::BAD_REQUEST,
                "invalid-key",
                "The idempotency key is not valid",
            ),
            Problem::InProgress => (
                StatusCode::CONFLICT,
                "in-progress",
                "A request with this idempotency key is being processed",
            ),
            Problem::KeyReused => (
                StatusCode::UNPROCESSABLE_ENTITY,
                "key-reused",
                "This idempotency key was used with a different request payload",
            ),
            Problem::Conflict => (
                StatusCode::CONFLICT,
                "conflict",
                "The request met a concurrent change and was not applied; retry it",
            ),
            // Not 409 (retry later) nor 5xx: no retry can get the response back.
            Problem::ResultUnavailable => (
                StatusCode::GONE,
                "result-unavailable",
                "This request was processed, but its response was not kept",
            ),
            Problem::FailedPermanently => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "failed-permanently",
                "The request failed and will fail again with this idempotency key",
            ),
            Problem::Unavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "The request could not be processed now; retry it",
            ),
            Problem::Failed => (
                StatusCode::INTERNAL_SERVER_ERROR,
                "failed",
                "The request failed; retry it with the same idempotency key",
            ),
        }
    }

    /// Clients should retry after a pause.
    fn retry_after(self) -> bool {
        matches!(
            self,
            Problem::InProgress | Problem::Conflict | Problem::Unavailable
        )
    }

    /// The problem+json response; `detail` names the header when the key is at fault.
    pub(crate) fn response(self, header: &str, retry_after: Duration) -> Response<Body> {
        let (status, name, title) = self.parts();
        let detail = match self {
            Problem::MissingKey => Some(format!("Send a unique {header} header with the request.")),
            Problem::InvalidKey => Some(format!(
                "The {header} header must be visible ASCII text of at most {} bytes.",
                super::request::MAX_IDEMPOTENCY_KEY_BYTES
            )),
            _ => None,
        };
        let mut body = serde_json::json!({
            "type": format!("{PROBLEM_TYPE_PREFIX}{name}"),
            "title": title,
            "status": status.as_u16(),
        });
        if let Some(detail) = detail {
            body["detail"] = detail.into();
        }
        let mut response = Response::new(Body::Text(body.to_string()));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if self.retry_after() {
            headers.insert(RETRY_AFTER, HeaderValue::from(retry_after.as_secs().max(1)));
        }
        response
    }
}

/// The prefix of the problem `type` URIs: `urn:lambda-idempotency:problem:<name>`.
pub const PROBLEM_TYPE_PREFIX: &str = "urn:lambda-idempotency:problem:";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_responses_keep_chosen_headers_and_replay_marked() {
        let mut response = Response::new(Body::Binary(vec![0, 159, 146, 150]));
        *response.status_mut() = StatusCode::CREATED;
        let headers = response.headers_mut();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        headers.insert("set-cookie", HeaderValue::from_static("session=secret"));
        let stored = StoredResponse::of(&response, &[CONTENT_TYPE]);
        assert_eq!(
            stored.headers,
            [("content-type".into(), b"application/octet-stream".to_vec())]
        );
        let json = serde_json::to_string(&stored).unwrap();
        assert_eq!(
            json,
            r#"{"status":201,"headers":[["content-type","application/octet-stream"]],"body":{"binary":"AJ+Slg=="}}"#
        );
        let replayed = serde_json::from_str::<StoredResponse>(&json)
            .unwrap()
            .replay();
        assert_eq!(replayed.status(), StatusCode::CREATED);
        assert_eq!(replayed.headers()[REPLAYED_HEADER], "true");
        assert!(replayed.headers().get("set-cookie").is_none());
        assert!(matches!(replayed.body(), Body::Binary(b) if b == &[0, 159, 146, 150]));
    }

    #[test]
    fn header_values_are_stored_as_text_when_utf8_else_base64_and_replayed_exactly() {
        let mut response = Response::new(Body::Empty);
        let headers = response.headers_mut();
        headers.insert(
            "location",
            HeaderValue::from_bytes("/files/café".as_bytes()).unwrap(),
        );
        headers.insert("x-latin1", HeaderValue::from_bytes(b"caf\xe9").unwrap());
        let names = [
            HeaderName::from_static("location"),
            HeaderName::from_static("x-latin1"),
        ];
        let stored = StoredResponse::of(&response, &names);
        let json = serde_json::to_string(&stored).unwrap();
        assert_eq!(
            json,
            r#"{"status":200,"headers":[["location","/files/café"],["x-latin1",{"binary":"Y2Fm6Q=="}]],"body":"empty"}"#
        );
        let read: StoredResponse = serde_json::from_str(&json).unwrap();
        assert_eq!(read, stored);
        let replayed = read.replay();
        assert_eq!(
            replayed.headers()["location"].as_bytes(),
            "/files/café".as_bytes()
        );
        assert_eq!(replayed.headers()["x-latin1"].as_bytes(), b"caf\xe9");
        // Base64 that no longer decodes, or a value no header may hold: left out.
        let damaged: StoredResponse = serde_json::from_str(
            r#"{"status":200,"headers":[["a",{"binary":"!"}],["b","x\ny"],["c","z"]]}"#,
        )
        .unwrap();
        let replayed = damaged.replay();
        assert!(replayed.headers().get("a").is_none());
        assert!(replayed.headers().get("b").is_none());
        assert_eq!(replayed.headers()["c"], "z");
    }

    #[test]
    fn five_hundreds_and_retry_statuses_are_not_stored() {
        for (status, stored) in [
            (200, true),
            (201, true),
            (302, true),
            (400, true),
            (404, true),
            (422, true),
            (408, false),
            (409, false),
            (425, false),
            (429, false),
            (500, false),
            (503, false),
        ] {
            assert_eq!(
                stored_by_default(StatusCode::from_u16(status).unwrap()),
                stored,
                "{status}"
            );
        }
    }

    #[test]
    fn problems_are_problem_json_with_retry_after_where_a_retry_helps() {
        let response = Problem::InProgress.response("Idempotency-Key", Duration::from_millis(1500));
        assert_eq!(response.status(), StatusCode::CONFLICT);
        assert_eq!(response.headers()[CONTENT_TYPE], "application/problem+json");
        assert_eq!(response.headers()[RETRY_AFTER], "1");
        let Body::Text(text) = response.body() else {
            panic!("text")
        };
        let body: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(body["type"], "urn:lambda-idempotency:problem:in-progress");
        assert_eq!(body["status"], 409);
        let missing = Problem::MissingKey.response("Idempotency-Key", Duration::ZERO);
        assert_eq!(missing.status(), StatusCode::BAD_REQUEST);
        assert!(missing.headers().get(RETRY_AFTER).is_none());
        let Body::Text(text) = missing.body() else {
            panic!("text")
        };
        assert!(text.contains("Send a unique Idempotency-Key header"));
    }
}
