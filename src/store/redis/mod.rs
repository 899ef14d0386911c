//! [`RedisStore`]: the records in Redis or Valkey (feature `redis`), one hash per record, each
//! transition one server-side Lua script.
//!
//! A record lives at `<namespace>{<stored key>}` (default namespace `idempotency:`) as a hash
//! with the fields of the DynamoDB layout: `status`, `expiration` (epoch seconds),
//! `in_progress_expiration` (epoch milliseconds), `lease_owner`, `data`, `validation`. Every
//! script touches that one key, and the braces make the stored key its hash tag, so the
//! store works on Redis Cluster as on a single node.
//!
//! As on DynamoDB, the record's own times decide: each script compares them with the times
//! the caller passes (the layer's clock), never the server's. The key's TTL (`PEXPIREAT`) is
//! garbage collection only, set [`GC_GRACE`] after the record expires, so a server clock
//! ahead of the function's by less than that never deletes a record that still counts.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use lambda_idempotency::store::RedisStore;
//! use lambda_idempotency::IdempotencyLayer;
//!
//! let client = redis::Client::open("redis://127.0.0.1:6379/")?;
//! let store = RedisStore::new(client.get_connection_manager().await?);
//! let layer = IdempotencyLayer::new(store);
//! # let _ = layer;
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::sync::LazyLock;
use std::time::Duration;

use ::redis::aio::{ConnectionLike, ConnectionManager};
use ::redis::Script;

use super::item_size::{check_item_size, completed_size_bytes, record_size_bytes};
use super::{
    Acquire, AcquireRequest, AttributeNames, CompleteRequest, ExtendRequest, Fenced, Store,
    StoreError,
};
use crate::clock::{epoch_ms, epoch_secs};
use crate::key::IdempotencyKey;
use crate::record::{OwnerToken, Record, Status};

/// How long after a record expires its key's TTL deletes it.
pub const GC_GRACE: Duration = Duration::from_secs(300);

/// The latest TTL set, in epoch milliseconds (the end of year 9999); a record expiring later
/// gets no TTL.
const LATEST_TTL_MS: u64 = 253_402_300_799_999;

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("acquire.lua")));
static COMPLETE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("complete.lua")));
static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("extend.lua")));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("release.lua")));

/// The idempotency records in Redis or Valkey, through any async connection of the `redis`
/// crate (by default its [`ConnectionManager`], which reconnects). See the
/// [module](crate::store::redis) docs.
#[derive(Clone)]
pub struct RedisStore<C = ConnectionManager> {
    connection: C,
    namespace: String,
}

impl<C> std::fmt::Debug for RedisStore<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl<C> RedisStore<C> {
    /// A store on `connection`, with the namespace `idempotency:`.
    pub fn new(connection: C) -> Self {
        Self {
            connection,
            namespace: "idempotency:".into(),
        }
    }

    /// Puts the records under `namespace` instead (a prefix of every Redis key).
    pub fn with_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// The Redis key of the record stored under `key`.
    pub fn redis_key(&self, key: &IdempotencyKey) -> String {
        format!("{}{{{}}}", self.namespace, key.as_str())
    }

    /// The connection.
    pub fn connection(&self) -> &C {
        &self.connection
    }
}

/// When the key of a record expiring at `expiration_secs` is deleted, in epoch milliseconds
/// (`0`: never): a whole second after the record stops counting, plus [`GC_GRACE`].
fn gc_at_ms(expiration_secs: u64) -> u64 {
    let grace_ms = u64::try_from(GC_GRACE.as_millis()).unwrap_or(u64::MAX);
    expiration_secs
        .checked_add(1)
        .and_then(|secs| secs.checked_mul(1000))
        .and_then(|ms| ms.checked_add(grace_ms))
        .filter(|ms| *ms <= LATEST_TTL_MS)
        .unwrap_or(0)
}

fn unavailable(err: ::redis::RedisError) -> StoreError {
    StoreError::Unavailable(Box::new(err))
}

/// The record in the hash `fields` (field, value, field, value, ...) stored under `key`.
fn parse(key: &IdempotencyKey, fields: &[String]) -> Result<Record, StoreError> {
    let malformed = |reason: String| StoreError::Malformed {
        key: key.as_str().to_string(),
        reason,
    };
    if !fields.len().is_multiple_of(2) {
        return Err(malformed("an odd number of hash fields".into()));
    }
    let map: HashMap<&str, &str> = fields
        .chunks(2)
        .map(|pair| (pair[0].as_str(), pair[1].as_str()))
        .collect();
    let number = |name: &str| -> Result<Option<u64>, StoreError> {
        map.get(name)
            .map(|raw| {
                raw.parse::<u64>()
                    .map_err(|_| malformed(format!("{name} is not an integer: {raw}")))
            })
            .transpose()
    };
    let status_text = map
        .get("status")
        .ok_or_else(|| malformed("no status".into()))?;
    let status = Status::parse(status_text)
        .ok_or_else(|| malformed(format!("unknown status {status_text:?}")))?;
    Ok(Record {
        key: key.clone(),
        status,
        expiration_secs: number("expiration")?.ok_or_else(|| malformed("no expiration".into()))?,
        lease_expiration_ms: number("in_progress_expiration")?,
        owner: map.get("lease_owner").map(|o| OwnerToken::new(*o)),
        data: map.get("data").map(|d| (*d).to_string()),
        validation: map.get("validation").map(|v| (*v).to_string()),
    })
}

impl<C> RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    async fn acquire_inner(&self, request: &AcquireRequest) -> Result<Acquire, StoreError> {
        // The same item size limit, counted the same way, as DynamoDB.
        check_item_size(record_size_bytes(
            &AttributeNames::default(),
            &request.record(),
        ))?;
        let mut connection = self.connection.clone();
        let answer: Vec<String> = ACQUIRE
            .key(self.redis_key(&request.key))
            .arg(request.owner.as_str())
            .arg(epoch_ms(request.now))
            .arg(epoch_secs(request.now))
            .arg(request.lease_expiration_ms)
            .arg(request.expiration_secs)
            .arg(gc_at_ms(request.expiration_secs))
            .arg(if request.validation.is_some() {
                "1"
            } else {
                "0"
            })
            .arg(request.validation.as_deref().unwrap_or(""))
            .invoke_async(&mut connection)
            .await
            .map_err(unavailable)?;
        match answer.split_first() {
            Some((tag, [])) if tag == "acquired" => Ok(Acquire::Acquired),
            Some((tag, fields)) if tag == "existing" => {
                Ok(Acquire::Existing(parse(&request.key, fields)?))
            }
            _ => Err(StoreError::Malformed {
                key: request.key.as_str().to_string(),
                reason: format!("unexpected acquire answer {answer:?}"),
            }),
        }
    }

    async fn complete_inner(&self, request: &CompleteRequest) -> Result<Fenced, StoreError> {
        check_item_size(completed_size_bytes(&AttributeNames::default(), request))?;
        let mut connection = self.connection.clone();
        let applied: i64 = COMPLETE
            .key(self.redis_key(&request.key))
            .arg(request.owner.as_str())
            .arg(request.status.as_str())
            .arg(&request.data)
            .arg(request.expiration_secs)
            .arg(gc_at_ms(request.expiration_secs))
            .invoke_async(&mut connection)
            .await
            .map_err(unavailable)?;
        Ok(fenced(applied))
    }

    async fn extend_inner(&self, request: &ExtendRequest) -> Result<Fenced, StoreError> {
        let mut connection = self.connection.clone();
        let applied: i64 = EXTEND
            .key(self.redis_key(&request.key))
            .arg(request.owner.as_str())
            .arg(request.lease_expiration_ms)
            .arg(request.expiration_secs)
            .arg(gc_at_ms(request.expiration_secs))
            .invoke_async(&mut connection)
            .await
            .map_err(unavailable)?;
        Ok(fenced(applied))
    }

    async fn release_inner(
        &self,
        key: &IdempotencyKey,
        owner: &OwnerToken,
    ) -> Result<Fenced, StoreError> {
        let mut connection = self.connection.clone();
        let applied: i64 = RELEASE
            .key(self.redis_key(key))
            .arg(owner.as_str())
            .invoke_async(&mut connection)
            .await
            .map_err(unavailable)?;
        Ok(fenced(applied))
    }

    async fn get_inner(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        let mut connection = self.connection.clone();
        let fields: Vec<String> = ::redis::cmd("HGETALL")
            .arg(self.redis_key(key))
            .query_async(&mut connection)
            .await
            .map_err(unavailable)?;
        if fields.is_empty() {
            return Ok(None);
        }
        parse(key, &fields).map(Some)
    }
}

fn fenced(applied: i64) -> Fenced {
    if applied == 1 {
        Fenced::Applied
    } else {
        Fenced::LeaseLost
    }
}

impl<C> Store for RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    fn acquire(
        &self,
        request: &AcquireRequest,
    ) -> impl Future<Output = Result<Acquire, StoreError>> + Send {
        self.acquire_inner(request)
    }

    fn complete(
        &self,
        request: &CompleteRequest,
    ) -> impl Future<Output = Result<Fenced, StoreError>> + Send {
        self.complete_inner(request)
    }

    fn extend(
        &self,
        request: &ExtendRequest,
    ) -> impl Future<Output = Result<Fenced, StoreError>> + Send {
        self.extend_inner(request)
    }

    fn release(
        &self,
        key: &IdempotencyKey,
        owner: &OwnerToken,
    ) -> impl Future<Output = Result<Fenced, StoreError>> + Send {
        self.release_inner(key, owner)
    }

    fn get(
        &self,
        key: &IdempotencyKey,
    ) -> impl Future<Output = Result<Option<Record>, StoreError>> + Send {
        self.get_inner(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_collection_waits_past_expiry_and_saturates() {
        assert_eq!(gc_at_ms(1_000), 1_001_000 + 300_000);
        assert_eq!(gc_at_ms(u64::MAX), 0);
        assert_eq!(gc_at_ms(LATEST_TTL_MS / 1000), 0);
        assert!(gc_at_ms(4_000_000_000) > 0);
    }

    #[test]
    fn hashes_parse_back_and_damaged_ones_are_malformed() {
        let key = IdempotencyKey::from_stored("p#k");
        let fields: Vec<String> = ["status", "COMPLETED", "expiration", "10", "data", "1"]
            .map(String::from)
            .into();
        let record = parse(&key, &fields).unwrap();
        assert_eq!(record.status, Status::Completed);
        assert_eq!(record.expiration_secs, 10);
        assert_eq!(record.data.as_deref(), Some("1"));
        for damaged in [
            vec!["status", "NOPE", "expiration", "1"],
            vec!["status", "COMPLETED"],
            vec!["status", "COMPLETED", "expiration", "x"],
            vec!["status"],
        ] {
            let fields: Vec<String> = damaged.into_iter().map(String::from).collect();
            assert!(matches!(
                parse(&key, &fields),
                Err(StoreError::Malformed { .. })
            ));
        }
    }
}
