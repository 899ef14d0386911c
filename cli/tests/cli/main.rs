//! The `lambda-idempotency` binary against DynamoDB Local, on records the library itself
//! wrote (skipped without DynamoDB Local, failed when it is required: see
//! `lambda_idempotency_test_support::dynamodb`).
mod common;
mod evict;
mod key;
mod layout;
mod list;
mod records;
mod renamed;
