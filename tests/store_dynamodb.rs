//! The store contract on `DynamoDbStore`, against DynamoDB Local.
mod common;

store_contract_suite!(common::dynamodb::fresh_store().await);
