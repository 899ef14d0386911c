//! The store contract on `InMemoryStore`.
use lambda_idempotency_test_support::{store_contract_suite, transactional_contract_suite};

use lambda_idempotency::store::InMemoryStore;

store_contract_suite!(Some(InMemoryStore::new()));

transactional_contract_suite!(Some(lambda_idempotency::store::InMemoryStore::new()));
