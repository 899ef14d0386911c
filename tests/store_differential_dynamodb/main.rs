//! The same transactional requests (and single guarded writes) on `InMemoryStore` and
//! `DynamoDbStore` (DynamoDB Local) get the same kind of answer: the embedded store refuses,
//! applies and orders refusals as DynamoDB does (an invalid or inapplicable write before any
//! condition, the record's included). Known differences, documented on `InMemoryStore`, are
//! listed in `transactions::NOT_MODELLED`.

mod single_write;
mod transactions;

use lambda_idempotency_test_support as support;

use lambda_idempotency::store::{Attr, DynamoDbStore, InMemoryStore};

fn acct(a: &str) -> [(&'static str, Attr); 1] {
    [("account", Attr::s(a))]
}

/// A fresh DynamoDB Local store with a ledger table keyed by `account`, and an embedded
/// store that knows the same table: the two stores every case is sent to.
async fn stores() -> Option<(DynamoDbStore, InMemoryStore, String)> {
    let ddb = support::dynamodb::fresh_store().await?;
    let table = support::dynamodb::create_table_keyed(ddb.client(), "ledger", "account").await;
    let memory = InMemoryStore::new();
    memory.define_table(&table, &["account"]);
    Some((ddb, memory, table))
}
