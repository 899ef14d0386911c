//! End to end: the compiled payments-api binary, driven through the Lambda Runtime API
//! emulator with the sample events of `events/` (API Gateway HTTP API payload 2.0 and a
//! Function URL), against DynamoDB Local, in both modes. Checks each response and the ledger.

use std::time::Duration;

use lambda_idempotency_test_support as support;
use payments_api::Tables;
use serde_json::Value;
use support::dynamodb::{balance, create_table, create_table_keyed};
use support::harness::function;
use support::harness::runtime_api::{Reply, RuntimeApi};

/// Status, headers and JSON body of an API Gateway (payload 2.0) response.
fn http_response(reply: Option<Reply>) -> (u16, Value, Value) {
    match reply {
        Some(Reply::Response(response)) => {
            let body = response["body"].as_str().expect("a text body");
            (
                response["statusCode"].as_u64().expect("a status") as u16,
                response["headers"].clone(),
                serde_json::from_str(body).expect("a JSON body"),
            )
        }
        other => panic!("expected an HTTP response, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payments_api_holds_its_contract_in_both_modes() {
    let Some(client) = support::dynamodb::client().await else {
        return;
    };
    for mode in ["lease", "optimistic"] {
        let tables = Tables {
            idempotency: create_table(&client).await,
            ledger: create_table_keyed(&client, "ledger", "account").await,
        };
        let api = RuntimeApi::start().await;
        let _container = function::spawn(
            env!("CARGO_BIN_EXE_payments-api"),
            "payments-api",
            &api.address(),
            &[
                ("IDEMPOTENCY_TABLE", &tables.idempotency),
                ("LEDGER_TABLE", &tables.ledger),
                ("IDEMPOTENCY_MODE", mode),
            ],
        );
        let invoke = |name: &str| {
            let event = support::load_event_json(name);
            let api = &api;
            async move {
                let reply = api
                    .invoke(&event, Duration::from_secs(10), Duration::from_secs(60))
                    .await;
                http_response(reply)
            }
        };

        let (status, headers, body) = invoke("payments_post.json").await;
        assert_eq!(status, 201, "{mode}: {body}");
        assert_eq!(
            body,
            serde_json::json!({"account": "acct-frank", "amount": 25, "balance": 25})
        );
        assert!(headers.get("idempotent-replayed").is_none(), "{headers}");
        // The client's retry (the same payment, other whitespace): the stored answer.
        let (status, headers, retry) = invoke("payments_retry.json").await;
        assert_eq!((status, &retry), (201, &body), "{mode}");
        assert_eq!(headers["idempotent-replayed"], "true", "{mode}");
        let (status, _, problem) = invoke("payments_reused_key.json").await;
        assert_eq!(status, 422, "{mode}: {problem}");
        assert_eq!(problem["type"], "urn:lambda-idempotency:problem:key-reused");
        let (status, _, problem) = invoke("payments_invalid.json").await;
        assert_eq!(status, 400, "{mode}");
        assert_eq!(problem["type"], "urn:payments-api:problem:invalid-payment");
        let (status, _, problem) = invoke("payments_missing_key.json").await;
        assert_eq!(status, 400, "{mode}");
        assert_eq!(
            problem["type"],
            "urn:lambda-idempotency:problem:missing-key"
        );
        let (status, _, body) = invoke("payments_function_url.json").await;
        assert_eq!(status, 201, "{mode}: {body}");
        assert_eq!(body["balance"], 30, "{mode}");

        assert_eq!(
            balance(&client, &tables.ledger, "acct-frank").await,
            30,
            "{mode}"
        );
        assert!(api.init_errors().await.is_empty());
        eprintln!("payments-api ({mode}) held its contract under the Runtime API");
    }
}
