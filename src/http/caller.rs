//! The caller a request comes from, as API Gateway and Function URLs say in its request
//! context ([`caller_identity`]): keys are scoped to it by default.

use lambda_http::aws_lambda_events::apigw::{
    ApiGatewayProxyRequestContext, ApiGatewayRequestAuthorizer, ApiGatewayV2httpRequestContext,
};
use lambda_http::request::RequestContext;
use lambda_http::{Request, RequestExt};
use serde_json::Value;

/// The identity of the caller that sent `request`, as its request context says, or `None`
/// when it carries none. Keys are scoped to it by default
/// ([`IdempotentHttpLayer`](super::IdempotentHttpLayer)), so two callers who send the same
/// `Idempotency-Key` name two records.
///
/// The first of these the request carries, in this order:
///
/// | identity | REST API (payload 1.0) | HTTP API (payload 2.0), Function URL |
/// |---|---|---|
/// | a JWT's `sub` (with its `iss`): a JWT or Cognito user pool authorizer | `authorizer.claims` | `authorizer.jwt.claims` |
/// | a Lambda authorizer's principal | `authorizer.principalId` | `authorizer.lambda.principalId` (a `principalId` the authorizer returns in its context) |
/// | a Cognito identity pool's identity (IAM authorization with its credentials) | `identity.cognitoIdentityId` | `authorizer.iam.cognitoIdentity.identityId` |
/// | an IAM caller's ARN (IAM authorization) | `identity.userArn` | `authorizer.iam.userArn` |
///
/// (fields of `requestContext`; empty values count as absent.) An assumed role's ARN
/// (`arn:aws:sts::<account>:assumed-role/<role>/<session>`) counts without its session
/// name: a client's retry may come with fresh credentials under another session name, and
/// must still find its record.
///
/// Requests with none: an Application Load Balancer's, and those of API routes without an
/// authorizer (API keys are not identities), or whose Lambda authorizer returns no
/// principal; also requests built by hand, without a request context.
///
/// The identity is text that tells its kinds apart: a JSON array of the kind (`jwt`,
/// `lambda`, `cognito`, `iam`) and its values, e.g.
/// `["jwt","https://issuer.example.com","user-1"]`.
pub fn caller_identity(request: &Request) -> Option<String> {
    match request.request_context_ref()? {
        RequestContext::ApiGatewayV1(context) => rest_api_caller(context),
        RequestContext::ApiGatewayV2(context) => http_api_caller(context),
        // An ALB's requests (and those of other sources) carry no identity.
        _ => None,
    }
}

/// A REST API's caller: its authorizer's claims or principal, else its IAM identity.
fn rest_api_caller(context: &ApiGatewayProxyRequestContext) -> Option<String> {
    let authorizer = &context.authorizer.fields;
    let claims = authorizer.get("claims");
    if let Some(subject) = text(claims.and_then(|claims| claims.get("sub"))) {
        return Some(jwt(
            text(claims.and_then(|claims| claims.get("iss"))),
            subject,
        ));
    }
    if let Some(principal) = text(authorizer.get("principalId")) {
        return Some(identity("lambda", &[principal]));
    }
    let identity_of = &context.identity;
    iam(
        identity_of.cognito_identity_id.as_deref(),
        identity_of.user_arn.as_deref(),
    )
}

/// `value`'s text, when it is a string and not empty.
fn text(value: Option<&Value>) -> Option<&str> {
    value.and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// An HTTP API's (or a Function URL's) caller: its JWT, Lambda or IAM authorizer's.
fn http_api_caller(context: &ApiGatewayV2httpRequestContext) -> Option<String> {
    let ApiGatewayRequestAuthorizer {
        jwt: jwt_authorizer,
        fields: lambda,
        iam: iam_authorizer,
        ..
    } = context.authorizer.as_ref()?;
    if let Some(claims) = jwt_authorizer.as_ref().map(|jwt| &jwt.claims) {
        let text = |name: &str| {
            claims
                .get(name)
                .map(String::as_str)
                .filter(|s| !s.is_empty())
        };
        if let Some(subject) = text("sub") {
            return Some(jwt(text("iss"), subject));
        }
    }
    if let Some(principal) = text(lambda.get("principalId")) {
        return Some(identity("lambda", &[principal]));
    }
    let iam_authorizer = iam_authorizer.as_ref()?;
    let cognito = iam_authorizer.cognito_identity.as_ref();
    iam(
        cognito.and_then(|cognito| cognito.identity_id.as_deref()),
        iam_authorizer.user_arn.as_deref(),
    )
}

fn jwt(issuer: Option<&str>, subject: &str) -> String {
    identity("jwt", &[issuer.unwrap_or_default(), subject])
}

/// An IAM caller: its Cognito identity when it has one (every identity of a pool assumes the
/// pool's role), else its ARN, an assumed role's without the session name.
fn iam(cognito_identity_id: Option<&str>, user_arn: Option<&str>) -> Option<String> {
    if let Some(id) = cognito_identity_id.filter(|id| !id.is_empty()) {
        return Some(identity("cognito", &[id]));
    }
    let arn = user_arn.filter(|arn| !arn.is_empty())?;
    Some(identity("iam", &[without_session(arn)]))
}

/// `arn:<partition>:sts::<account>:assumed-role/<role>/<session>` without `/<session>`;
/// other ARNs as they are.
fn without_session(arn: &str) -> &str {
    const ASSUMED_ROLE: &str = ":assumed-role/";
    let Some(at) = arn.find(ASSUMED_ROLE) else {
        return arn;
    };
    let role_start = at + ASSUMED_ROLE.len();
    match arn[role_start..].find('/') {
        Some(end) => &arn[..role_start + end],
        None => arn,
    }
}

/// The identity's text: a JSON array of its kind and values.
fn identity(kind: &str, values: &[&str]) -> String {
    let mut parts = Vec::with_capacity(values.len() + 1);
    parts.push(kind);
    parts.extend_from_slice(values);
    serde_json::to_string(&parts).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// An HTTP API request (payload 2.0) whose request context has `authorizer`.
    fn http_api(authorizer: Value) -> Request {
        let mut event = json!({
            "version": "2.0",
            "routeKey": "POST /payments",
            "rawPath": "/payments",
            "rawQueryString": "",
            "headers": {"idempotency-key": "k"},
            "requestContext": {
                "accountId": "123456789012",
                "apiId": "abc123",
                "http": {"method": "POST", "path": "/payments", "protocol": "HTTP/1.1",
                         "sourceIp": "203.0.113.7", "userAgent": "curl/8.5.0"},
                "requestId": "r-1",
                "routeKey": "POST /payments",
                "stage": "$default",
                "time": "22/Nov/2026:10:00:00 +0000",
                "timeEpoch": 1795000000000_u64
            },
            "body": "{}",
            "isBase64Encoded": false
        });
        if !authorizer.is_null() {
            event["requestContext"]["authorizer"] = authorizer;
        }
        lambda_http::request::from_str(&event.to_string()).unwrap()
    }

    /// A REST API request (payload 1.0) with `authorizer` and `identity` in its context.
    fn rest_api(authorizer: Value, identity: Value) -> Request {
        let event = json!({
            "resource": "/payments",
            "path": "/payments",
            "httpMethod": "POST",
            "headers": {"Idempotency-Key": "k"},
            "multiValueHeaders": {"Idempotency-Key": ["k"]},
            "requestContext": {
                "accountId": "123456789012",
                "resourceId": "r1",
                "stage": "prod",
                "requestId": "r-1",
                "identity": identity,
                "authorizer": authorizer,
                "resourcePath": "/payments",
                "httpMethod": "POST",
                "apiId": "abc123"
            },
            "body": "{}",
            "isBase64Encoded": false
        });
        lambda_http::request::from_str(&event.to_string()).unwrap()
    }

    #[test]
    fn http_api_identities_in_their_order() {
        let jwt =
            json!({"jwt": {"claims": {"sub": "u-1", "iss": "https://issuer"}, "scopes": null}});
        assert_eq!(
            caller_identity(&http_api(jwt)).as_deref(),
            Some(r#"["jwt","https://issuer","u-1"]"#)
        );
        let no_iss = json!({"jwt": {"claims": {"sub": "u-1"}, "scopes": null}});
        assert_eq!(
            caller_identity(&http_api(no_iss)).as_deref(),
            Some(r#"["jwt","","u-1"]"#)
        );
        let lambda = json!({"lambda": {"principalId": "p-1", "tenant": "t"}});
        assert_eq!(
            caller_identity(&http_api(lambda)).as_deref(),
            Some(r#"["lambda","p-1"]"#)
        );
        let iam = |arn: &str, cognito: Value| {
            json!({"iam": {"accessKey": "AKIA", "accountId": "123456789012",
                           "callerId": "AROA:s", "cognitoIdentity": cognito,
                           "principalOrgId": null, "userArn": arn, "userId": "AROA"}})
        };
        assert_eq!(
            caller_identity(&http_api(iam(
                "arn:aws:iam::123456789012:user/ann",
                Value::Null
            )))
            .as_deref(),
            Some(r#"["iam","arn:aws:iam::123456789012:user/ann"]"#)
        );
        let pool = json!({"amr": ["authenticated"], "identityId": "eu-west-1:id-1",
                          "identityPoolId": "eu-west-1:pool"});
        let role = "arn:aws:sts::123456789012:assumed-role/Cognito_Auth/CognitoIdentityCredentials";
        assert_eq!(
            caller_identity(&http_api(iam(role, pool))).as_deref(),
            Some(r#"["cognito","eu-west-1:id-1"]"#)
        );
        // A JWT's subject first, then a Lambda principal.
        let both = json!({"jwt": {"claims": {"sub": "u-2"}, "scopes": null},
                          "lambda": {"principalId": "p-2"}});
        assert_eq!(
            caller_identity(&http_api(both)).as_deref(),
            Some(r#"["jwt","","u-2"]"#)
        );
        // None: no authorizer, a Lambda context without a principal, empty values.
        for authorizer in [
            Value::Null,
            json!({"lambda": {"tenant": "t"}}),
            json!({"jwt": {"claims": {"sub": ""}, "scopes": null}}),
        ] {
            assert_eq!(
                caller_identity(&http_api(authorizer.clone())),
                None,
                "{authorizer}"
            );
        }
    }

    #[test]
    fn rest_api_identities_in_their_order() {
        let no_identity = json!({"sourceIp": "203.0.113.7", "apiKey": "key-1"});
        let claims = json!({"claims": {"sub": "u-1", "iss": "https://cognito"}});
        assert_eq!(
            caller_identity(&rest_api(claims, no_identity.clone())).as_deref(),
            Some(r#"["jwt","https://cognito","u-1"]"#)
        );
        let lambda = json!({"principalId": "p-1", "tenant": "t"});
        assert_eq!(
            caller_identity(&rest_api(lambda, no_identity.clone())).as_deref(),
            Some(r#"["lambda","p-1"]"#)
        );
        let user = json!({"userArn": "arn:aws:sts::123456789012:assumed-role/Api/s-1"});
        assert_eq!(
            caller_identity(&rest_api(Value::Null, user)).as_deref(),
            Some(r#"["iam","arn:aws:sts::123456789012:assumed-role/Api"]"#)
        );
        let cognito = json!({"cognitoIdentityId": "eu-west-1:id-1",
                             "userArn": "arn:aws:sts::1:assumed-role/Cognito_Auth/x"});
        assert_eq!(
            caller_identity(&rest_api(Value::Null, cognito)).as_deref(),
            Some(r#"["cognito","eu-west-1:id-1"]"#)
        );
        // An API key is not an identity.
        assert_eq!(caller_identity(&rest_api(Value::Null, no_identity)), None);
    }

    #[test]
    fn requests_without_a_request_context_have_no_caller() {
        let request = lambda_http::http::Request::builder()
            .uri("/payments")
            .body(lambda_http::Body::Empty)
            .unwrap();
        assert_eq!(caller_identity(&request), None);
    }

    #[test]
    fn assumed_roles_count_without_their_session() {
        for (arn, caller) in [
            (
                "arn:aws:sts::123456789012:assumed-role/Api/botocore-session-1",
                "arn:aws:sts::123456789012:assumed-role/Api",
            ),
            (
                "arn:aws-cn:sts::123456789012:assumed-role/Api",
                "arn:aws-cn:sts::123456789012:assumed-role/Api",
            ),
            (
                "arn:aws:iam::123456789012:user/ann",
                "arn:aws:iam::123456789012:user/ann",
            ),
            (
                "arn:aws:sts::123456789012:federated-user/ann",
                "arn:aws:sts::123456789012:federated-user/ann",
            ),
        ] {
            assert_eq!(without_session(arn), caller, "{arn}");
        }
    }
}
