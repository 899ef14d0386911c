//! The store contract on `RedisStore` over a Redis Cluster connection, against the three-node
//! cluster `scripts/test.sh` starts: every key is its own hash tag, so the keys of one call
//! (a batch's pre-check) live on different slots and nodes.
use lambda_idempotency_test_support as support;
use support::store_contract_suite;

store_contract_suite!(support::redis::fresh_cluster_store().await);
