//! The payments-api's wiring, shared by its binary (`src/main.rs`) and its tests: the
//! request body ([`Payment`]), the answer ([`Paid`]), the ledger ([`Ledger`]) and the
//! service built from the order-consumer's [`Settings`].
//!
//! Contract:
//! - `POST /payments` with the header `Idempotency-Key` and the body
//!   `{"account": string, "amount": integer}` credits `balance` of the ledger item with
//!   partition key `account` by `amount`, in one DynamoDB transaction with the idempotency
//!   record, and answers `201 Created` with `{"account", "amount", "balance"}`, the balance
//!   after this payment. The balance is read first and written conditioned on the value
//!   read, so the stored answer is exact; a concurrent payment to the same account makes the
//!   condition fail: nothing is applied and the answer is `409` with `Retry-After` (retry
//!   with the same key).
//! - A retry with the same key gets the stored answer (with `Idempotent-Replayed: true`)
//!   and credits nothing; the same key with another body gets `422`; no key gets `400`; a
//!   key still being processed gets `409` (see `lambda_idempotency::http`).
//! - A body that is not a payment gets `400` (`application/problem+json`), applies nothing,
//!   and is stored under its key only: a corrected request under a new key goes through.
//! - A `POST` to another path gets `404` (after the key check: `400` without a key); another
//!   method gets `405` on `/payments` and `404` elsewhere, with or without a key.
//! - Environment: the order-consumer's (`IDEMPOTENCY_TABLE`, `LEDGER_TABLE`,
//!   `IDEMPOTENCY_MODE`, default `lease` here (see [`settings_from_env`]), `IDEMPOTENCY_EXPIRES_AFTER_SECS`, and
//!   `AWS_ENDPOINT_URL_DYNAMODB` locally).

#![warn(missing_docs)]

use lambda_idempotency::aws_sdk_dynamodb::types::AttributeValue;
use lambda_idempotency::clock::SystemClock;
use lambda_idempotency::http::IdempotentHttpLayer;
use lambda_idempotency::idempotent::ResultAndWrites;
use lambda_idempotency::lambda_http::http::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use lambda_idempotency::lambda_http::http::{Method, StatusCode};
use lambda_idempotency::lambda_http::{Body, Request, Response};
use lambda_idempotency::store::{Attr, DynamoDbStore, Write};
use lambda_idempotency::{BoxError, CommitStrategy, Completion, Config, Error, IdempotencyLayer};
pub use order_consumer::{sdk_config, Settings, Tables};
use serde::{Deserialize, Serialize};
use tower::Layer;

/// The key prefix of the payments-api's records: stable across deployments.
pub const KEY_PREFIX: &str = "payments-api";

/// The only route.
pub const PAYMENTS_PATH: &str = "/payments";

/// The request body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Payment {
    /// The ledger account credited (not empty).
    pub account: String,
    /// The amount credited (negative: debited).
    pub amount: i64,
}

/// The answer to a payment: what was credited and the balance after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Paid {
    /// The account credited.
    pub account: String,
    /// The amount credited.
    pub amount: i64,
    /// The account's balance after this payment.
    pub balance: i64,
}

/// Why a request body is not a payment.
#[derive(Debug, thiserror::Error)]
pub enum PaymentError {
    /// Not JSON, or a field missing or of another type (an amount with a fraction, or past
    /// 64 bits).
    #[error("the body is not a payment: {0}")]
    NotAPayment(#[from] serde_json::Error),
    /// The account is empty.
    #[error("the account is empty")]
    EmptyAccount,
    /// The balance would leave the 64-bit range.
    #[error("the balance would overflow")]
    Overflow,
}

/// The payment in a request body.
pub fn parse_payment(body: &[u8]) -> Result<Payment, PaymentError> {
    let payment: Payment = serde_json::from_slice(body)?;
    if payment.account.is_empty() {
        return Err(PaymentError::EmptyAccount);
    }
    Ok(payment)
}

/// The ledger table: items `{account: S, balance: N}`.
#[derive(Debug, Clone)]
pub struct Ledger {
    client: aws_sdk_dynamodb::Client,
    table: String,
}

impl Ledger {
    /// The ledger in `table`.
    pub fn new(client: aws_sdk_dynamodb::Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }

    /// The balance of `account` (strongly consistent), `None` when it has no item yet.
    pub async fn balance(&self, account: &str) -> Result<Option<i64>, BoxError> {
        let item = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("account", AttributeValue::S(account.into()))
            .consistent_read(true)
            .send()
            .await?
            .item;
        match item.as_ref().and_then(|item| item.get("balance")) {
            None => Ok(None),
            Some(AttributeValue::N(n)) => Ok(Some(n.parse()?)),
            Some(other) => Err(format!("balance of {account:?} is not a number: {other:?}").into()),
        }
    }

    /// The write that moves `account` from `old` (`None`: no balance yet) to `new`, applied
    /// only if the balance is still `old`.
    pub fn credit(&self, account: &str, old: Option<i64>, new: i64) -> Write {
        let write = Write::update(
            self.table.clone(),
            [("account", Attr::s(account))],
            "SET #balance = :new",
        )
        .name("#balance", "balance")
        .value(":new", Attr::n(new));
        match old {
            None => write.condition("attribute_not_exists(#balance)"),
            Some(old) => write
                .condition("#balance = :old")
                .value(":old", Attr::n(old)),
        }
    }
}

/// A JSON answer.
fn json_response(status: StatusCode, content_type: &'static str, body: String) -> Response<Body> {
    let mut response = Response::new(Body::Text(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// An `application/problem+json` answer of this API.
fn problem(status: StatusCode, name: &str, title: &str, detail: Option<String>) -> Response<Body> {
    let mut body = serde_json::json!({
        "type": format!("urn:payments-api:problem:{name}"),
        "title": title,
        "status": status.as_u16(),
    });
    if let Some(detail) = detail {
        body["detail"] = detail.into();
    }
    json_response(status, "application/problem+json", body.to_string())
}

/// Handles one request; a payment's credit is the returned completion's write.
pub async fn handle(
    ledger: Ledger,
    request: Request,
) -> Result<Completion<Response<Body>>, BoxError> {
    if request.uri().path() != PAYMENTS_PATH {
        let answer = problem(StatusCode::NOT_FOUND, "not-found", "No such resource", None);
        return Ok(Completion::new(answer));
    }
    if request.method() != Method::POST {
        let mut answer = problem(
            StatusCode::METHOD_NOT_ALLOWED,
            "method-not-allowed",
            "Payments are created with POST",
            None,
        );
        answer
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("POST"));
        return Ok(Completion::new(answer));
    }
    let invalid = |err: PaymentError| {
        let answer = problem(
            StatusCode::BAD_REQUEST,
            "invalid-payment",
            "The body is not a valid payment",
            Some(err.to_string()),
        );
        Ok(Completion::new(answer))
    };
    let payment = match parse_payment(request.body()) {
        Ok(payment) => payment,
        Err(err) => return invalid(err),
    };
    let old = ledger.balance(&payment.account).await?;
    let Some(balance) = old.unwrap_or(0).checked_add(payment.amount) else {
        return invalid(PaymentError::Overflow);
    };
    let credit = ledger.credit(&payment.account, old, balance);
    let paid = Paid {
        account: payment.account,
        amount: payment.amount,
        balance,
    };
    let answer = json_response(
        StatusCode::CREATED,
        "application/json",
        serde_json::to_string(&paid)?,
    );
    Ok(Completion::new(answer).with_write(credit))
}

/// The settings from the environment ([`Settings::from_env`]), in lease mode unless
/// `IDEMPOTENCY_MODE` says otherwise: a request with a key still being processed is answered
/// 409 rather than run a second time.
pub fn settings_from_env() -> Result<Settings, lambda_runtime::Error> {
    let mut settings = Settings::from_env()?;
    if std::env::var_os("IDEMPOTENCY_MODE").is_none_or(|mode| mode.is_empty()) {
        settings.mode = CommitStrategy::Lease;
    }
    Ok(settings)
}

/// The idempotency of one deployment: records in `settings.tables.idempotency` through
/// `client`, each handler's writes committed with its record.
pub fn layer(
    client: aws_sdk_dynamodb::Client,
    settings: &Settings,
) -> IdempotentHttpLayer<DynamoDbStore, SystemClock, ResultAndWrites> {
    let store = DynamoDbStore::new(client, settings.tables.idempotency.clone());
    let config = Config::new()
        .with_key_prefix(KEY_PREFIX)
        .with_expires_after(settings.expires_after)
        .with_local_cache(settings.local_cache);
    IdempotentHttpLayer::new(
        IdempotencyLayer::new(store)
            .with_config(config)
            .with_writes()
            .with_commit(settings.mode),
    )
    .with_methods([Method::POST])
}

/// The API of one deployment: [`handle`] under its [`layer`].
pub fn service(
    client: aws_sdk_dynamodb::Client,
    settings: &Settings,
) -> impl tower::Service<Request, Response = Response<Body>, Error = Error, Future = impl Send>
       + Clone
       + Send
       + 'static {
    let ledger = Ledger::new(client.clone(), settings.tables.ledger.clone());
    layer(client, settings).layer(lambda_http::service_fn(move |request| {
        handle(ledger.clone(), request)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payments_parse_strictly() {
        let ok = parse_payment(br#"{"account":"acct-1","amount":-5}"#).unwrap();
        assert_eq!(
            ok,
            Payment {
                account: "acct-1".into(),
                amount: -5
            }
        );
        for bad in [
            &br#"{"account":"acct-1","amount":1.5}"#[..],
            br#"{"account":"acct-1","amount":"5"}"#,
            br#"{"account":"acct-1","amount":9223372036854775808}"#,
            br#"{"amount":5}"#,
            br#"{"account":"","amount":5}"#,
            b"not json",
            b"",
        ] {
            assert!(
                parse_payment(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
