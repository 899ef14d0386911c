//! Tables in DynamoDB Local (or any DynamoDB) for tests: a fresh table per test, and the
//! ledger balance the transactional contract reads.

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType,
};
use aws_sdk_dynamodb::Client;

/// Creates a fresh on-demand table named `<prefix>-<random>` with the string partition key
/// `key`, and answers its name. Panics when the table cannot be created (a test helper). A
/// call the SDK sends again after losing its answer finds the table made: that is success.
pub async fn create_table(client: &Client, prefix: &str, key: &str) -> String {
    create_table_with_keys(client, prefix, key, None).await
}

/// As [`create_table`], with the string sort key `sort_key` too (a single-table layout).
pub async fn create_table_with_keys(
    client: &Client,
    prefix: &str,
    key: &str,
    sort_key: Option<&str>,
) -> String {
    let table = format!("{prefix}-{}", uuid::Uuid::new_v4().simple());
    create_table_named(client, &table, key, sort_key).await;
    table
}

/// Creates the on-demand table `table` with the string partition key `key` and, if given,
/// the string sort key `sort_key` (a table a test names before it exists, say). Panics when
/// it cannot be created; a table already under the name (made by this very call, sent again
/// by the SDK after its first answer was lost) is success.
pub async fn create_table_named(client: &Client, table: &str, key: &str, sort_key: Option<&str>) {
    let keys = std::iter::once((key, KeyType::Hash)).chain(sort_key.map(|k| (k, KeyType::Range)));
    let mut request = client
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest);
    for (name, key_type) in keys {
        let definition = AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .expect("a complete attribute definition");
        let schema = KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(key_type)
            .build()
            .expect("a complete key schema");
        request = request.attribute_definitions(definition).key_schema(schema);
    }
    match request.send().await {
        Ok(_) => {}
        // The name is fresh: a table already under it was made by this very call, sent again
        // by the SDK after its first answer was lost (an attempt timed out).
        Err(err)
            if err
                .as_service_error()
                .is_some_and(|e| e.is_resource_in_use_exception()) => {}
        Err(err) => panic!("create table {table}: {err:?}"),
    }
}

/// The numeric `balance` of the item with partition key `account` = `account` in `table`
/// (0 when there is no item), read consistently. Panics when it cannot be read.
pub async fn balance(client: &Client, table: &str, account: &str) -> i64 {
    let item = client
        .get_item()
        .table_name(table)
        .key("account", AttributeValue::S(account.into()))
        .consistent_read(true)
        .send()
        .await
        .unwrap_or_else(|err| panic!("read {table}: {err:?}"))
        .item;
    item.and_then(|i| i.get("balance").and_then(|b| b.as_n().ok().cloned()))
        .map_or(0, |n| n.parse().expect("a numeric balance"))
}
