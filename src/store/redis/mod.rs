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
//! the caller passes (the layer's clock), never the server's. The key's TTL is garbage
//! collection only: it is set relative to the caller's clock (`PEXPIRE`, the time from now
//! until [`GC_GRACE`] after the record expires), so neither a server clock nor a function
//! clock that runs ahead or behind deletes a record that still counts.
//!
//! A key the store did not write (another type, a hash without a status, times that are not
//! integers, text that is not UTF-8) is never taken over while it could count: calls on it
//! answer [`StoreError::Malformed`].
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
use std::sync::LazyLock;
use std::time::{Duration, SystemTime};

use ::redis::aio::{ConnectionLike, ConnectionManager};
use ::redis::{Script, ScriptInvocation};

use super::item_size::{check_item_size, completed_size_bytes, record_size_bytes};
use super::{
    get_each, readable, Acquire, AcquireRequest, AttributeNames, CompleteRequest, ExtendRequest,
    Fenced, Misconfiguration, Store, StoreError,
};
use crate::clock::{epoch_ms, epoch_secs};
use crate::key::IdempotencyKey;
use crate::record::{OwnerToken, Record, Status};

/// How long after a record expires its key's TTL deletes it.
pub const GC_GRACE: Duration = Duration::from_secs(300);

/// The latest TTL set, in epoch milliseconds (the end of year 9999); a record expiring later
/// gets no TTL.
const LATEST_TTL_MS: u64 = 253_402_300_799_999;

/// The scripts that write a record, each after `ttl.lua` (the key's TTL, set one way).
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("ttl.lua"),
        include_str!("acquire.lua")
    ))
});
static COMPLETE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("ttl.lua"),
        include_str!("complete.lua")
    ))
});
static EXTEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(concat!(include_str!("ttl.lua"), include_str!("extend.lua"))));
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
    ///
    /// # Panics
    ///
    /// If `namespace` contains `{` or `}`: the store's braces around the stored key are what
    /// keeps the keys of two namespaces apart (and the key's Redis Cluster hash tag).
    pub fn with_namespace(mut self, namespace: impl Into<String>) -> Self {
        let namespace = namespace.into();
        assert!(
            !namespace.contains(['{', '}']),
            "a RedisStore namespace cannot contain braces: {namespace:?}"
        );
        self.namespace = namespace;
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

/// How long from `now` the key of a record expiring at `expiration_secs` lives, in
/// milliseconds (`0`: no TTL): until a whole second after the record stops counting, plus
/// [`GC_GRACE`]; at least 1 ms (a record already past that is deleted at once); no TTL past
/// the end of year 9999.
fn ttl_ms(now: SystemTime, expiration_secs: u64) -> u64 {
    let grace_ms = u64::try_from(GC_GRACE.as_millis()).unwrap_or(u64::MAX);
    expiration_secs
        .checked_add(1)
        .and_then(|secs| secs.checked_mul(1000))
        .and_then(|ms| ms.checked_add(grace_ms))
        .filter(|ms| *ms <= LATEST_TTL_MS)
        .map_or(0, |gc_at_ms| gc_at_ms.saturating_sub(epoch_ms(now)).max(1))
}

/// Redis's error codes for a command refused because the server is not set up for this
/// function: a password required or wrong, an ACL that denies the command or the key.
const MISCONFIGURED_CODES: [&str; 3] = ["NOAUTH", "WRONGPASS", "NOPERM"];

/// The error of a call on `key`: the server not set up for this function
/// ([`StoreError::Misconfigured`]: authentication or an ACL refused), a key of another type is
/// malformed, anything else leaves the store unavailable.
fn store_error(key: &IdempotencyKey, err: ::redis::RedisError) -> StoreError {
    let code = match err.code() {
        Some(code) if MISCONFIGURED_CODES.contains(&code) => Some(code.to_string()),
        _ if err.kind() == ::redis::ErrorKind::AuthenticationFailed => {
            Some("AuthenticationFailed".to_string())
        }
        // Redis 6.2 and later cut an unauthenticated client's longer commands (a script
        // call with its keys and arguments) with this protocol error instead of NOAUTH.
        _ if err.to_string().contains("unauthenticated") => Some("NOAUTH".to_string()),
        _ => None,
    };
    if let Some(code) = code {
        let reason = err.detail().map_or_else(|| err.to_string(), str::to_string);
        return StoreError::Misconfigured(Misconfiguration::new("Redis", "", code, reason));
    }
    if err.code() == Some("WRONGTYPE") {
        return StoreError::Malformed {
            key: key.as_str().to_string(),
            reason: "the Redis key holds another type than a hash".into(),
        };
    }
    StoreError::Unavailable(Box::new(err))
}

/// The record in the hash `fields` (field, value, field, value, ...) stored under `key`.
fn parse(key: &IdempotencyKey, fields: &[Vec<u8>]) -> Result<Record, StoreError> {
    let malformed = |reason: String| StoreError::Malformed {
        key: key.as_str().to_string(),
        reason,
    };
    if !fields.len().is_multiple_of(2) {
        return Err(malformed("an odd number of hash fields".into()));
    }
    let texts = fields
        .iter()
        .map(|bytes| std::str::from_utf8(bytes))
        .collect::<Result<Vec<&str>, _>>()
        .map_err(|_| malformed("a hash field is not UTF-8".into()))?;
    let map: HashMap<&str, &str> = texts.chunks(2).map(|pair| (pair[0], pair[1])).collect();
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

/// The answer of a fenced script (complete, extend, release) run on `key`'s record over
/// `connection`: applied when it answers 1, the lease lost otherwise.
async fn fenced<C: ConnectionLike>(
    script: &ScriptInvocation<'_>,
    key: &IdempotencyKey,
    mut connection: C,
) -> Result<Fenced, StoreError> {
    let applied: i64 = script
        .invoke_async(&mut connection)
        .await
        .map_err(|err| store_error(key, err))?;
    Ok(if applied == 1 {
        Fenced::Applied
    } else {
        Fenced::LeaseLost
    })
}

impl<C> Store for RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    async fn acquire(&self, request: &AcquireRequest) -> Result<Acquire, StoreError> {
        // The same item size limit, counted the same way, as DynamoDB.
        check_item_size(record_size_bytes(
            &AttributeNames::default(),
            &request.shape(),
        ))?;
        let answer: Vec<Vec<u8>> = ACQUIRE
            .key(self.redis_key(&request.key))
            .arg(request.owner.as_str())
            .arg(epoch_ms(request.now))
            .arg(epoch_secs(request.now))
            .arg(request.lease_expiration_ms)
            .arg(request.expiration_secs)
            .arg(ttl_ms(request.now, request.expiration_secs))
            .arg(if request.validation.is_some() {
                "1"
            } else {
                "0"
            })
            .arg(request.validation.as_deref().unwrap_or(""))
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(|err| store_error(&request.key, err))?;
        match answer.split_first() {
            Some((tag, [])) if tag == b"acquired" => Ok(Acquire::Acquired),
            Some((tag, fields)) if tag == b"existing" => {
                Ok(Acquire::Existing(parse(&request.key, fields)?))
            }
            _ => Err(StoreError::Malformed {
                key: request.key.as_str().to_string(),
                reason: format!("unexpected acquire answer {answer:?}"),
            }),
        }
    }

    async fn complete(&self, request: &CompleteRequest) -> Result<Fenced, StoreError> {
        check_item_size(completed_size_bytes(&AttributeNames::default(), request))?;
        fenced(
            COMPLETE
                .key(self.redis_key(&request.key))
                .arg(request.owner.as_str())
                .arg(request.status.as_str())
                .arg(&request.data)
                .arg(request.expiration_secs)
                .arg(ttl_ms(request.now, request.expiration_secs)),
            &request.key,
            self.connection.clone(),
        )
        .await
    }

    async fn extend(&self, request: &ExtendRequest) -> Result<Fenced, StoreError> {
        fenced(
            EXTEND
                .key(self.redis_key(&request.key))
                .arg(request.owner.as_str())
                .arg(request.lease_expiration_ms)
                .arg(request.expiration_secs)
                .arg(ttl_ms(request.now, request.expiration_secs)),
            &request.key,
            self.connection.clone(),
        )
        .await
    }

    async fn release(
        &self,
        key: &IdempotencyKey,
        owner: &OwnerToken,
    ) -> Result<Fenced, StoreError> {
        fenced(
            RELEASE.key(self.redis_key(key)).arg(owner.as_str()),
            key,
            self.connection.clone(),
        )
        .await
    }

    async fn get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        let fields: Vec<Vec<u8>> = ::redis::cmd("HGETALL")
            .arg(self.redis_key(key))
            .query_async(&mut self.connection.clone())
            .await
            .map_err(|err| store_error(key, err))?;
        if fields.is_empty() {
            return Ok(None);
        }
        parse(key, &fields).map(Some)
    }

    /// One pipeline of `HGETALL`s, each key once: one round trip (on a Redis Cluster, one
    /// read per key, all at once).
    async fn get_many(&self, keys: &[IdempotencyKey]) -> Result<Vec<Record>, StoreError> {
        let unique: std::collections::BTreeSet<&IdempotencyKey> = keys.iter().collect();
        let Some(first) = unique.first().copied() else {
            return Ok(Vec::new());
        };
        let mut pipeline = ::redis::pipe();
        for key in &unique {
            pipeline.cmd("HGETALL").arg(self.redis_key(key));
        }
        // Each command answers on its own, so a key holding another type is named.
        let answers: Vec<::redis::RedisResult<Vec<Vec<u8>>>> = match pipeline
            .ignore_errors()
            .query_async(&mut self.connection.clone())
            .await
        {
            Ok(answers) => answers,
            // A Redis Cluster connection sends a pipeline to one slot only, and every key is
            // its own hash tag: read key by key, each routed to its node.
            Err(err) if err.code() == Some("CROSSSLOT") => return get_each(self, unique).await,
            Err(err) => return Err(store_error(first, err)),
        };
        // A key that cannot be read (another type, a malformed record) is left absent: the
        // conditional write then meets it and fails its record alone.
        let mut found = Vec::with_capacity(answers.len());
        for (key, answer) in unique.into_iter().zip(answers) {
            let read = answer
                .map_err(|err| store_error(key, err))
                .and_then(|fields| {
                    if fields.is_empty() {
                        Ok(None)
                    } else {
                        parse(key, &fields).map(Some)
                    }
                });
            found.extend(readable(read));
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_collection_waits_past_expiry_relative_to_the_caller_and_saturates() {
        let at = |secs| std::time::UNIX_EPOCH + Duration::from_secs(secs);
        assert_eq!(ttl_ms(at(1_000), 1_000), 1_000 + 300_000);
        assert_eq!(ttl_ms(at(0), 1_000), 1_001_000 + 300_000);
        // Past its garbage collection already: deleted at once, never "no TTL".
        assert_eq!(ttl_ms(at(2_000), 1_000), 1);
        assert_eq!(ttl_ms(at(0), u64::MAX), 0);
        assert_eq!(ttl_ms(at(0), LATEST_TTL_MS / 1000), 0);
        assert!(ttl_ms(at(0), 4_000_000_000) > 0);
    }

    #[test]
    fn hashes_parse_back_and_damaged_ones_are_malformed() {
        let key = IdempotencyKey::from_stored("p#k");
        let fields: Vec<Vec<u8>> = ["status", "COMPLETED", "expiration", "10", "data", "1"]
            .map(|f| f.as_bytes().to_vec())
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
            let fields: Vec<Vec<u8>> = damaged.into_iter().map(|f| f.as_bytes().to_vec()).collect();
            assert!(matches!(
                parse(&key, &fields),
                Err(StoreError::Malformed { .. })
            ));
        }
        let not_text: Vec<Vec<u8>> = vec![b"status".to_vec(), b"COMPLETED\xff".to_vec()];
        assert!(matches!(
            parse(&key, &not_text),
            Err(StoreError::Malformed { .. })
        ));
    }

    #[test]
    #[should_panic(expected = "braces")]
    fn a_namespace_with_braces_is_refused() {
        let _ = RedisStore::new(()).with_namespace("tenant{a}:");
    }
}
