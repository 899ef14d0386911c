//! The store contract on `InMemoryStore`.
mod common;

use lambda_idempotency::InMemoryStore;

store_contract_suite!(Some(InMemoryStore::new()));

transactional_contract_suite!(Some(lambda_idempotency::InMemoryStore::new()));
