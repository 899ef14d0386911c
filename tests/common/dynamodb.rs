//! DynamoDB Local access for the integration tests.
//!
//! The endpoint comes from `AWS_ENDPOINT_URL_DYNAMODB` (scripts/test.sh starts DynamoDB
//! Local and sets it). When it is unset, the tests are skipped with a notice, unless
//! `LAMBDA_IDEMPOTENCY_REQUIRE_DYNAMODB=1` or `CI` is set: then they fail. An endpoint that
//! is set but unreachable always fails.

use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};
use aws_sdk_dynamodb::Client;
use lambda_idempotency::DynamoDbStore;

fn required() -> bool {
    std::env::var("LAMBDA_IDEMPOTENCY_REQUIRE_DYNAMODB").is_ok_and(|v| v == "1")
        || std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false")
}

/// A client for DynamoDB Local, or `None` (test skipped) when no endpoint is configured and
/// DynamoDB Local is not required.
pub async fn client() -> Option<Client> {
    let endpoint = match std::env::var("AWS_ENDPOINT_URL_DYNAMODB") {
        Ok(endpoint) if !endpoint.is_empty() => endpoint,
        _ if required() => panic!(
            "AWS_ENDPOINT_URL_DYNAMODB is not set but DynamoDB Local is required: run scripts/test.sh"
        ),
        _ => {
            eprintln!("SKIPPED: AWS_ENDPOINT_URL_DYNAMODB is not set (scripts/test.sh starts DynamoDB Local)");
            return None;
        }
    };
    let config = aws_config::defaults(BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "local", "local", None, None, "tests",
        ))
        .endpoint_url(&endpoint)
        .timeout_config(
            aws_config::timeout::TimeoutConfig::builder()
                .operation_attempt_timeout(Duration::from_secs(5))
                .build(),
        )
        .load()
        .await;
    let client = Client::new(&config);
    client
        .list_tables()
        .limit(1)
        .send()
        .await
        .unwrap_or_else(|e| panic!("DynamoDB Local at {endpoint} is unreachable: {e:?}"));
    Some(client)
}

/// Creates a fresh table with the idempotency schema (partition key `id` (S), on-demand).
pub async fn create_table(client: &Client) -> String {
    let table = format!("idempotency-{}", uuid::Uuid::new_v4().simple());
    client
        .create_table()
        .table_name(&table)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .expect("create table");
    table
}

/// A store on a fresh table in DynamoDB Local, or `None` when skipped.
pub async fn fresh_store() -> Option<DynamoDbStore> {
    let client = client().await?;
    let table = create_table(&client).await;
    Some(DynamoDbStore::new(client, table))
}
