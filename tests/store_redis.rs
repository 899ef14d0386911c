//! The store contract on `RedisStore`, against the Redis server `scripts/test.sh` starts.
use lambda_idempotency_test_support as support;
use support::store_contract_suite;

store_contract_suite!(support::redis::fresh_store().await);

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_lambda_events::sqs::SqsMessage;
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::clock::{epoch_ms, epoch_secs};
use lambda_idempotency::key::IdempotencyKey;
use lambda_idempotency::record::{OwnerToken, Status};
use lambda_idempotency::store::{
    Acquire, AcquireRequest, CompleteRequest, ExtendRequest, Fenced, RedisStore, Store, StoreError,
};
use lambda_idempotency::{BoxError, Config, IdempotencyLayer, Outcome};
use support::{invocation, load_event, outcomes};

/// Two processes (two layers on one Redis) get the same batch: each record's handler runs
/// once, the second process replays, and the records are COMPLETED without an owner's lease.
#[tokio::test]
async fn two_processes_run_each_record_once() {
    let Some(store) = support::redis::fresh_store().await else {
        return;
    };
    let runs = Arc::new(AtomicUsize::new(0));
    let process = || {
        let runs = Arc::clone(&runs);
        let handler = IdempotencyLayer::new(store.clone())
            .with_config(Config::new().with_key_prefix("orders"))
            .handler(move |message: SqsMessage| {
                runs.fetch_add(1, Ordering::SeqCst);
                async move { Ok::<_, BoxError>(message.body.unwrap_or_default().len()) }
            });
        BatchProcessor::new(handler)
    };
    let deliver = || {
        invocation(
            load_event("batch.json"),
            SystemTime::now(),
            Duration::from_secs(30),
        )
    };
    let first = process().process(deliver()).await;
    assert_eq!(outcomes(&first), [Outcome::Executed; 3]);
    let second = process().process(deliver()).await;
    assert_eq!(outcomes(&second), [Outcome::Replayed; 3]);
    assert_eq!(second.records[0].value, first.records[0].value);
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    let id = load_event("batch.json").records[0]
        .message_id
        .clone()
        .unwrap();
    let key = lambda_idempotency::key::IdempotencyKey::derive("orders", id.as_bytes());
    let record = store.get(&key).await.unwrap().expect("the record");
    assert_eq!(record.status, Status::Completed);
    assert_eq!(record.lease_expiration_ms, None);
}

/// The key's TTL is garbage collection: it outlives the record's own expiry.
#[tokio::test]
async fn the_ttl_comes_after_the_record_expires() {
    let Some(store) = support::redis::fresh_store().await else {
        return;
    };
    let now = SystemTime::now();
    let key = lambda_idempotency::key::IdempotencyKey::derive("ttl", b"k");
    let expiration_secs = epoch_secs(now) + 60;
    let request = AcquireRequest {
        key: key.clone(),
        owner: OwnerToken::generate(),
        now,
        lease_expiration_ms: epoch_ms(now) + 30_000,
        expiration_secs,
        validation: None,
    };
    assert_eq!(store.acquire(&request).await.unwrap(), Acquire::Acquired);
    let mut connection = store.connection().clone();
    let expire_at_ms: i64 = redis::cmd("PEXPIRETIME")
        .arg(store.redis_key(&key))
        .query_async(&mut connection)
        .await
        .unwrap();
    let expire_at_ms = u64::try_from(expire_at_ms).expect("a TTL is set");
    assert!(
        expire_at_ms >= (expiration_secs + 1) * 1000 + 300_000,
        "{expire_at_ms}"
    );
}

fn acquire_at(key: &IdempotencyKey, owner: &OwnerToken, now: SystemTime) -> AcquireRequest {
    AcquireRequest {
        key: key.clone(),
        owner: owner.clone(),
        now,
        lease_expiration_ms: epoch_ms(now + Duration::from_secs(30)),
        expiration_secs: epoch_secs(now + Duration::from_secs(60)),
        validation: None,
    }
}

async fn pttl_ms(store: &RedisStore, key: &IdempotencyKey) -> i64 {
    redis::cmd("PTTL")
        .arg(store.redis_key(key))
        .query_async(&mut store.connection().clone())
        .await
        .unwrap()
}

/// A function whose clock is a day behind the server's (or a manual clock in a test) keeps
/// its records: the TTL runs from the caller's now, not to an instant on the server's clock.
/// (With `PEXPIREAT` at the caller's times, the server deleted each record as it was written,
/// and every delivery ran the handler again.)
#[tokio::test]
async fn a_caller_clock_behind_the_server_keeps_its_records() {
    let Some(store) = support::redis::fresh_store().await else {
        return;
    };
    let now = SystemTime::now() - Duration::from_secs(86_400);
    let key = IdempotencyKey::derive("skew", b"k");
    let owner = OwnerToken::generate();
    assert_eq!(
        store.acquire(&acquire_at(&key, &owner, now)).await.unwrap(),
        Acquire::Acquired
    );
    let held = store
        .get(&key)
        .await
        .unwrap()
        .expect("the in-progress record");
    assert_eq!(held.status, Status::InProgress);
    assert_eq!(held.owner.as_ref(), Some(&owner));
    // 60 s of record, 1 s rounding and 5 min of grace, from the caller's now.
    let ttl = pttl_ms(&store, &key).await;
    assert!((360_000 - 5_000..=361_000).contains(&ttl), "{ttl}");

    let extend = ExtendRequest {
        key: key.clone(),
        owner: owner.clone(),
        lease_expiration_ms: epoch_ms(now + Duration::from_secs(90)),
        expiration_secs: epoch_secs(now + Duration::from_secs(120)),
        now,
    };
    assert_eq!(store.extend(&extend).await.unwrap(), Fenced::Applied);
    let ttl = pttl_ms(&store, &key).await;
    assert!((420_000 - 5_000..=421_000).contains(&ttl), "{ttl}");

    let complete = CompleteRequest {
        key: key.clone(),
        owner: owner.clone(),
        status: Status::Completed,
        data: "7".into(),
        expiration_secs: epoch_secs(now + Duration::from_secs(3_600)),
        now,
    };
    assert_eq!(store.complete(&complete).await.unwrap(), Fenced::Applied);
    let done = store
        .get(&key)
        .await
        .unwrap()
        .expect("the completed record");
    assert_eq!(done.status, Status::Completed);
    assert_eq!(done.data.as_deref(), Some("7"));
    let ttl = pttl_ms(&store, &key).await;
    assert!((3_901_000 - 5_000..=3_901_000).contains(&ttl), "{ttl}");
    // A duplicate from the same clock is answered by the record, not let through.
    let duplicate = store
        .acquire(&acquire_at(&key, &OwnerToken::generate(), now))
        .await
        .unwrap();
    assert!(matches!(duplicate, Acquire::Existing(r) if r.status == Status::Completed));
}

async fn raw(store: &RedisStore, command: &[&[u8]]) {
    let mut cmd = redis::cmd(std::str::from_utf8(command[0]).unwrap());
    for arg in &command[1..] {
        cmd.arg(*arg);
    }
    let () = cmd
        .query_async(&mut store.connection().clone())
        .await
        .unwrap();
}

fn malformed<T: std::fmt::Debug>(answer: Result<T, StoreError>) {
    assert!(
        matches!(answer, Err(StoreError::Malformed { .. })),
        "{answer:?}"
    );
}

/// Keys the store did not write are reported malformed (a typed error: the record fails
/// alone and reaches the dead-letter queue) and are never overwritten while they could count.
#[tokio::test]
async fn foreign_keys_are_malformed_and_left_as_they_are() {
    let Some(store) = support::redis::fresh_store().await else {
        return;
    };
    let now = SystemTime::now();
    let owner = OwnerToken::generate();
    let later = epoch_secs(now + Duration::from_secs(3_600)).to_string();

    // A hash without a status that has not expired: DynamoDB's condition refuses it too.
    let no_status = IdempotencyKey::derive("foreign", b"no-status");
    let name = store.redis_key(&no_status);
    raw(
        &store,
        &[
            b"HSET",
            name.as_bytes(),
            b"expiration",
            later.as_bytes(),
            b"data",
            b"1",
        ],
    )
    .await;
    malformed(store.acquire(&acquire_at(&no_status, &owner, now)).await);
    let left: Vec<String> = redis::cmd("HGETALL")
        .arg(&name)
        .query_async(&mut store.connection().clone())
        .await
        .unwrap();
    assert_eq!(left, ["expiration", later.as_str(), "data", "1"]);

    // A string where a hash belongs (WRONGTYPE from the server).
    let string = IdempotencyKey::derive("foreign", b"string");
    raw(&store, &[b"SET", store.redis_key(&string).as_bytes(), b"x"]).await;
    malformed(store.acquire(&acquire_at(&string, &owner, now)).await);
    malformed(store.get(&string).await);
    malformed(store.release(&string, &owner).await);
    // Read among others (one pipeline), each is left out of the answer and the others are
    // read: the pre-check sends it on to its conditional write, which names it (above).
    let readable = IdempotencyKey::derive("foreign", b"readable");
    let taken = store.acquire(&acquire_at(&readable, &owner, now)).await;
    assert_eq!(taken.unwrap(), Acquire::Acquired);
    let absent = IdempotencyKey::derive("foreign", b"absent");
    let among = [no_status.clone(), string.clone(), readable.clone(), absent];
    let found = store.get_many(&among).await.unwrap();
    let keys: Vec<&IdempotencyKey> = found.iter().map(|r| &r.key).collect();
    assert_eq!(keys, [&readable]);

    // Text that is not UTF-8.
    let bytes = IdempotencyKey::derive("foreign", b"bytes");
    let name = store.redis_key(&bytes);
    raw(
        &store,
        &[
            b"HSET",
            name.as_bytes(),
            b"status",
            b"COMPLETED",
            b"expiration",
            later.as_bytes(),
            b"data",
            b"\xff",
        ],
    )
    .await;
    malformed(store.get(&bytes).await);
    malformed(store.acquire(&acquire_at(&bytes, &owner, now)).await);
}

#[test]
#[should_panic(expected = "braces")]
fn namespaces_cannot_hold_braces() {
    let client = redis::Client::open("redis://127.0.0.1:1/").unwrap();
    let _ = RedisStore::new(client).with_namespace("a{b}");
}

/// A Redis server of this test's own, with a password and a user whose ACL allows other
/// keys only: a client without the password, a user the ACL denies, and a password rotated
/// under a running client are each the store's misconfiguration (`NOAUTH`, `NOPERM`,
/// `AuthenticationFailed`), never a record's fault or an outage.
#[tokio::test]
async fn a_server_that_refuses_the_client_is_misconfigured_with_its_code() {
    if support::redis::fresh_store().await.is_none() {
        return;
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = std::process::Command::new("redis-server")
        .args([
            "--bind",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--save",
            "",
        ])
        .args(["--appendonly", "no", "--requirepass", "sekret"])
        .args(["--user", "limited", "on", ">pw", "~other:*", "+@all"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("redis-server (scripts/redis.sh installs it)");
    let url = |auth: &str| format!("redis://{auth}127.0.0.1:{port}/");
    let connect = |auth: &'static str| {
        let url = url(auth);
        async move {
            let client = redis::Client::open(url.as_str()).unwrap();
            for _ in 0..50 {
                if let Ok(manager) = client.get_connection_manager().await {
                    return manager;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            panic!("the test's own Redis at {url} did not start")
        }
    };
    let request = || AcquireRequest {
        key: IdempotencyKey::derive("setup", b"k"),
        owner: OwnerToken::generate(),
        now: SystemTime::now(),
        lease_expiration_ms: epoch_ms(SystemTime::now() + Duration::from_secs(30)),
        expiration_secs: epoch_secs(SystemTime::now() + Duration::from_secs(3_600)),
        validation: None,
    };
    let code = |answer: Result<Acquire, StoreError>| match answer {
        Err(StoreError::Misconfigured(fault)) => {
            assert_eq!(fault.store, "Redis");
            fault.code
        }
        other => format!("not misconfigured: {other:?}"),
    };
    let admin = connect(":sekret@").await;
    let checks = async {
        let no_password = RedisStore::new(connect("").await).acquire(&request()).await;
        let limited = RedisStore::new(connect("limited:pw@").await)
            .acquire(&request())
            .await;
        let running = RedisStore::new(connect(":sekret@").await);
        assert!(matches!(
            running.acquire(&request()).await,
            Ok(Acquire::Acquired)
        ));
        let mut admin = admin;
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("requirepass")
            .arg("rotated")
            .query_async(&mut admin)
            .await
            .unwrap();
        let _: redis::Value = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("normal")
            .query_async(&mut admin)
            .await
            .unwrap_or(redis::Value::Nil);
        // The client reconnects with the old password: refused, once it notices.
        let mut rotated = Vec::new();
        for _ in 0..5 {
            rotated.push(code(running.acquire(&request()).await));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (code(no_password), code(limited), rotated)
    }
    .await;
    let _ = server.kill();
    let _ = server.wait();
    let (no_password, limited, rotated) = checks;
    assert_eq!(no_password, "NOAUTH");
    assert_eq!(limited, "NOPERM");
    assert!(
        rotated.iter().any(|c| c == "AuthenticationFailed"),
        "{rotated:?}"
    );
}
