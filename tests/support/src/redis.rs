//! Redis for the store tests: a [`RedisStore`] on the server `scripts/test.sh` starts
//! (`LAMBDA_IDEMPOTENCY_REDIS_URL`), each under a fresh namespace so tests never share a key.

use lambda_idempotency::store::RedisStore;

fn required() -> bool {
    std::env::var("LAMBDA_IDEMPOTENCY_REQUIRE_REDIS").is_ok_and(|v| v == "1")
        || std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false")
}

/// The value of `variable`, or `None` (test skipped) when it is unset and Redis is not
/// required. Panics when it is required and unset.
fn configured(variable: &str, server: &str) -> Option<String> {
    match std::env::var(variable) {
        Ok(value) if !value.is_empty() => Some(value),
        _ if required() => {
            panic!("{variable} is not set but Redis is required: run scripts/test.sh")
        }
        _ => {
            eprintln!("SKIPPED: {variable} is not set (scripts/test.sh starts {server})");
            None
        }
    }
}

/// A store on the test Redis under a fresh namespace, or `None` (test skipped) when no server
/// is configured and Redis is not required. Panics when the server is required and missing
/// or unreachable.
pub async fn fresh_store() -> Option<RedisStore> {
    let url = configured("LAMBDA_IDEMPOTENCY_REDIS_URL", "Redis")?;
    let client = redis::Client::open(url.as_str()).unwrap_or_else(|e| panic!("{url}: {e}"));
    let connection = client
        .get_connection_manager()
        .await
        .unwrap_or_else(|e| panic!("Redis at {url} is unreachable: {e}"));
    Some(fresh_namespace(connection))
}

/// A store on the test Redis Cluster (`LAMBDA_IDEMPOTENCY_REDIS_CLUSTER_URLS`, three
/// primaries that `scripts/test.sh` starts) under a fresh namespace, or `None` as
/// [`fresh_store`]. Its keys spread over the cluster's slots and nodes.
pub async fn fresh_cluster_store() -> Option<RedisStore<redis::cluster_async::ClusterConnection>> {
    let urls = configured("LAMBDA_IDEMPOTENCY_REDIS_CLUSTER_URLS", "a Redis Cluster")?;
    let client = redis::cluster::ClusterClient::new(urls.split(',').collect::<Vec<_>>())
        .unwrap_or_else(|e| panic!("{urls}: {e}"));
    let connection = client
        .get_async_connection()
        .await
        .unwrap_or_else(|e| panic!("the Redis Cluster at {urls} is unreachable: {e}"));
    Some(fresh_namespace(connection))
}

/// A store on `connection` under a namespace of its own, so tests never share a key.
fn fresh_namespace<C>(connection: C) -> RedisStore<C> {
    let namespace = format!(
        "test-{}:",
        lambda_idempotency::record::OwnerToken::generate()
    );
    RedisStore::new(connection).with_namespace(namespace)
}
