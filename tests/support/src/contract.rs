//! The store contract: one suite, run against every `Store` implementation
//! (the library's `tests/store_memory.rs` and `tests/store_dynamodb.rs`).

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use lambda_idempotency::clock::{epoch_ms, epoch_secs, Clock, ManualClock};
use lambda_idempotency::key::IdempotencyKey;
use lambda_idempotency::record::{decide, Decision, OwnerToken, Record, Status};
use lambda_idempotency::store::{
    Acquire, AcquireRequest, CompleteRequest, DynamoDbStore, ExtendRequest, Fenced, InMemoryStore,
    Store, StoreError, MAX_ITEM_BYTES,
};
use lambda_idempotency::validation::PayloadHash;

/// Writes a record as it is, bypassing the protocol (as another tool might have).
pub trait Seed: Store {
    /// Writes `record` as it is.
    fn seed(&self, record: &Record) -> impl Future<Output = ()> + Send;
}

impl Seed for InMemoryStore {
    async fn seed(&self, record: &Record) {
        self.insert_record(record.clone());
    }
}

impl Seed for DynamoDbStore {
    async fn seed(&self, record: &Record) {
        let n = self.attribute_names();
        let mut item = HashMap::from([
            (n.key.clone(), AttributeValue::S(record.key.as_str().into())),
            (
                n.status.clone(),
                AttributeValue::S(record.status.as_str().into()),
            ),
            (
                n.expiration.clone(),
                AttributeValue::N(record.expiration_secs.to_string()),
            ),
        ]);
        if let Some(lease) = record.lease_expiration_ms {
            item.insert(
                n.in_progress_expiration.clone(),
                AttributeValue::N(lease.to_string()),
            );
        }
        if let Some(owner) = &record.owner {
            item.insert(n.owner.clone(), AttributeValue::S(owner.as_str().into()));
        }
        if let Some(data) = &record.data {
            item.insert(n.data.clone(), AttributeValue::S(data.clone()));
        }
        self.client()
            .put_item()
            .table_name(self.table())
            .set_item(Some(item))
            .send()
            .await
            .expect("seed a record");
    }
}

fn key(name: &str) -> IdempotencyKey {
    IdempotencyKey::derive("contract", name.as_bytes())
}

/// An acquire at the clock's time, with a lease of `lease` and a record window of 1 hour.
fn acquire_request(
    clock: &ManualClock,
    key: &IdempotencyKey,
    owner: &OwnerToken,
    lease: Duration,
    validation: Option<&str>,
) -> AcquireRequest {
    let now = clock.now();
    AcquireRequest {
        key: key.clone(),
        owner: owner.clone(),
        now,
        lease_expiration_ms: epoch_ms(now + lease),
        expiration_secs: epoch_secs(now + Duration::from_secs(3600)),
        validation: validation.map(str::to_string),
    }
}

fn complete_request(
    clock: &ManualClock,
    key: &IdempotencyKey,
    owner: &OwnerToken,
    data: &str,
    window: Duration,
) -> CompleteRequest {
    CompleteRequest {
        key: key.clone(),
        owner: owner.clone(),
        status: Status::Completed,
        data: data.to_string(),
        expiration_secs: epoch_secs(clock.now() + window),
    }
}

const LEASE: Duration = Duration::from_secs(30);
const HOUR: Duration = Duration::from_secs(3600);

/// Contract case: first acquire wins and second sees in progress.
pub async fn first_acquire_wins_and_second_sees_in_progress<S: Store>(store: &S) {
    let clock = ManualClock::starting_now();
    let k = key("first-wins");
    let (a, b) = (OwnerToken::generate(), OwnerToken::generate());
    let first = store
        .acquire(&acquire_request(&clock, &k, &a, LEASE, None))
        .await
        .unwrap();
    assert_eq!(first, Acquire::Acquired);
    let second = store
        .acquire(&acquire_request(&clock, &k, &b, LEASE, None))
        .await
        .unwrap();
    let Acquire::Existing(record) = second else {
        panic!("second acquire must see the first: {second:?}")
    };
    assert_eq!(record.key, k);
    assert_eq!(record.status, Status::InProgress);
    assert_eq!(record.owner.as_ref(), Some(&a));
    assert_eq!(
        record.lease_expiration_ms,
        Some(epoch_ms(clock.now() + LEASE))
    );
    assert_eq!(decide(&record, clock.now(), None), Decision::InProgress);
}

/// Contract case: elapsed lease is taken over.
pub async fn elapsed_lease_is_taken_over<S: Store>(store: &S) {
    let clock = ManualClock::starting_now();
    let k = key("elapsed-lease");
    let (a, b) = (OwnerToken::generate(), OwnerToken::generate());
    let req = acquire_request(&clock, &k, &a, LEASE, None);
    assert_eq!(store.acquire(&req).await.unwrap(), Acquire::Acquired);
    // At the last millisecond of the lease it still holds.
    clock.advance(LEASE);
    assert!(matches!(
        store
            .acquire(&acquire_request(&clock, &k, &b, LEASE, None))
            .await
            .unwrap(),
        Acquire::Existing(_)
    ));
    clock.advance(Duration::from_millis(1));
    assert_eq!(
        store
            .acquire(&acquire_request(&clock, &k, &b, LEASE, None))
            .await
            .unwrap(),
        Acquire::Acquired
    );
    // The old holder can neither complete nor release any more.
    assert_eq!(
        store
            .complete(&complete_request(&clock, &k, &a, "1", HOUR))
            .await
            .unwrap(),
        Fenced::LeaseLost
    );
    assert_eq!(store.release(&k, &a).await.unwrap(), Fenced::LeaseLost);
    let record = store.get(&k).await.unwrap().expect("record");
    assert_eq!(record.owner.as_ref(), Some(&b));
    assert_eq!(record.status, Status::InProgress);
}

/// Contract case: expired record is taken over before ttl deletes it.
pub async fn expired_record_is_taken_over_before_ttl_deletes_it<S: Store>(store: &S) {
    let clock = ManualClock::starting_now();
    let k = key("expired");
    let (a, b) = (OwnerToken::generate(), OwnerToken::generate());
    store
        .acquire(&acquire_request(&clock, &k, &a, LEASE, None))
        .await
        .unwrap();
    let window = Duration::from_secs(60);
    assert_eq!(
        store
            .complete(&complete_request(&clock, &k, &a, "\"old\"", window))
            .await
            .unwrap(),
        Fenced::Applied
    );
    // Within the window: a duplicate sees the completed record.
    clock.advance(window);
    let Acquire::Existing(record) = store
        .acquire(&acquire_request(&clock, &k, &b, LEASE, None))
        .await
        .unwrap()
    else {
        panic!("record still counts at its expiration second")
    };
    assert_eq!(record.status, Status::Completed);
    // Past it, the record is still stored (no TTL sweep), but it no longer counts.
    clock.advance(Duration::from_secs(1));
    assert!(store.get(&k).await.unwrap().is_some());
    assert_eq!(
        store
            .acquire(&acquire_request(&clock, &k, &b, LEASE, None))
            .await
            .unwrap(),
        Acquire::Acquired
    );
    let record = store.get(&k).await.unwrap().expect("record");
    assert_eq!(record.status, Status::InProgress);
    assert_eq!(record.data, None);
}

/// Contract case: complete then replay.
pub async fn complete_then_replay<S: Store>(store: &S) {
    let clock = ManualClock::starting_now();
    let k = key("replay");
    let (a, b) = (OwnerToken::generate(), OwnerToken::generate());
    store
        .acquire(&acquire_request(&clock, &k, &a, LEASE, Some("v2:hash-1")))
        .await
        .unwrap();
    let data = r#"{"balance":42,"note":"é ✓"}"#;
    assert_eq!(
        store
            .complete(&complete_request(&clock, &k, &a, data, HOUR))
            .await
            .unwrap(),
        Fenced::Applied
    );
    // Long after the lease, but within the window: still a replay.
    clock.advance(Duration::from_secs(600));
    let Acquire::Existing(record) = store
        .acquire(&acquire_request(&clock, &k, &b, LEASE, Some("v2:hash-1")))
        .await
        .unwrap()
    else {
        panic!("completed record must be returned")
    };
    assert_eq!(record.status, Status::Completed);
    assert_eq!(record.lease_expiration_ms, None);
    assert_eq!(
        decide(&record, clock.now(), Some(&PayloadHash::new("v2:hash-1"))),
        Decision::Replay {
            data: Some(data.to_string())
        }
    );
    // Completing again with other data is refused: the record is no longer in progress.
    assert_eq!(
        store
            .complete(&complete_request(&clock, &k, &a, "2", HOUR))
            .await
            .unwrap(),
        Fenced::LeaseLost
    );
    // The same completion sent again (its first answer lost) is recognised as applied,
    // and changes nothing; another owner's is not.
    let resent = CompleteRequest {
        expiration_secs: epoch_secs(clock.now() + HOUR),
        ..complete_request(&clock, &k, &a, data, HOUR)
    };
    assert_eq!(store.complete(&resent).await.unwrap(), Fenced::Applied);
    let foreign = complete_request(&clock, &k, &b, data, HOUR);
    assert_eq!(store.complete(&foreign).await.unwrap(), Fenced::LeaseLost);
    let after = store.get(&k).await.unwrap().expect("record");
    assert_eq!(after.data.as_deref(), Some(data));
    assert_eq!(after.owner.as_ref(), Some(&a));
}

/// Contract case: complete and release refuse a foreign owner.
pub async fn complete_and_release_refuse_a_foreign_owner<S: Store>(store: &S) {
    let clock = ManualClock::starting_now();
    let k = key("foreign");
    let (a, intruder) = (OwnerToken::generate(), OwnerToken::generate());
    store
        .acquire(&acquire_request(&clock, &k, &a, LEASE, None))
        .await
        .unwrap();
    assert_eq!(
        store
            .complete(&complete_request(&clock, &k, &intruder, "1", HOUR))
            .await
            .unwrap(),
        Fenced::LeaseLost
    );
    assert_eq!(
        store.release(&k, &intruder).await.unwrap(),
        Fenced::LeaseLost
    );
    let record = store.get(&k).await.unwrap().expect("record untouched");
    assert_eq!(record.status, Status::InProgress);
    assert_eq!(record.owner.as_ref(), Some(&a));
    // Nothing to complete or release on a key that was never acquired.
    let never = key("never");
    assert_eq!(
        store
            .complete(&complete_request(&clock, &never, &a, "1", HOUR))
            .await
            .unwrap(),
        Fenced::LeaseLost
    );
    assert_eq!(store.release(&never, &a).await.unwrap(), Fenced::LeaseLost);
    assert_eq!(store.get(&never).await.unwrap(), None);
}

/// Contract case: release lets the next acquire win.
pub async fn release_lets_the_next_acquire_win<S: Store>(store: &S) {
    let clock = ManualClock::starting_now();
    let k = key("release");
    let (a, b) = (OwnerToken::generate(), OwnerToken::generate());
    store
        .acquire(&acquire_request(&clock, &k, &a, LEASE, None))
        .await
        .unwrap();
    assert_eq!(store.release(&k, &a).await.unwrap(), Fenced::Applied);
    assert_eq!(store.get(&k).await.unwrap(), None);
    assert_eq!(
        store
            .acquire(&acquire_request(&clock, &k, &b, LEASE, None))
            .await
            .unwrap(),
        Acquire::Acquired
    );
    // A completed record cannot be released: release only undoes a lease.
    store
        .complete(&complete_request(&clock, &k, &b, "1", HOUR))
        .await
        .unwrap();
    assert_eq!(store.release(&k, &b).await.unwrap(), Fenced::LeaseLost);
    assert!(store.get(&k).await.unwrap().is_some());
}

/// Contract case: payload mismatch is detected.
pub async fn payload_mismatch_is_detected<S: Store>(store: &S) {
    let clock = ManualClock::starting_now();
    let k = key("mismatch");
    let (a, b) = (OwnerToken::generate(), OwnerToken::generate());
    store
        .acquire(&acquire_request(&clock, &k, &a, LEASE, Some("v2:hash-a")))
        .await
        .unwrap();
    let Acquire::Existing(in_progress) = store
        .acquire(&acquire_request(&clock, &k, &b, LEASE, Some("v2:hash-b")))
        .await
        .unwrap()
    else {
        panic!("existing record expected")
    };
    assert_eq!(in_progress.validation.as_deref(), Some("v2:hash-a"));
    assert_eq!(
        decide(
            &in_progress,
            clock.now(),
            Some(&PayloadHash::new("v2:hash-b"))
        ),
        Decision::PayloadMismatch
    );
    store
        .complete(&complete_request(&clock, &k, &a, "1", HOUR))
        .await
        .unwrap();
    let Acquire::Existing(done) = store
        .acquire(&acquire_request(&clock, &k, &b, LEASE, Some("v2:hash-b")))
        .await
        .unwrap()
    else {
        panic!("existing record expected")
    };
    assert_eq!(done.validation.as_deref(), Some("v2:hash-a"));
    assert_eq!(
        decide(&done, clock.now(), Some(&PayloadHash::new("v2:hash-b"))),
        Decision::PayloadMismatch
    );
}

/// Contract case: extend moves the lease only for its holder.
pub async fn extend_moves_the_lease_only_for_its_holder<S: Store>(store: &S) {
    let clock = ManualClock::starting_now();
    let k = key("extend");
    let (a, b) = (OwnerToken::generate(), OwnerToken::generate());
    store
        .acquire(&acquire_request(&clock, &k, &a, LEASE, None))
        .await
        .unwrap();
    let extend = |owner: &OwnerToken, until: Duration| ExtendRequest {
        key: k.clone(),
        owner: owner.clone(),
        lease_expiration_ms: epoch_ms(clock.now() + until),
        expiration_secs: epoch_secs(clock.now() + HOUR),
    };
    assert_eq!(
        store.extend(&extend(&b, LEASE * 4)).await.unwrap(),
        Fenced::LeaseLost
    );
    clock.advance(LEASE / 2);
    assert_eq!(
        store.extend(&extend(&a, LEASE)).await.unwrap(),
        Fenced::Applied
    );
    // Past the first lease end, the extended lease still holds.
    clock.advance(LEASE);
    assert!(matches!(
        store
            .acquire(&acquire_request(&clock, &k, &b, LEASE, None))
            .await
            .unwrap(),
        Acquire::Existing(_)
    ));
    clock.advance(LEASE);
    assert_eq!(
        store
            .acquire(&acquire_request(&clock, &k, &b, LEASE, None))
            .await
            .unwrap(),
        Acquire::Acquired
    );
    assert_eq!(
        store.extend(&extend(&a, LEASE)).await.unwrap(),
        Fenced::LeaseLost
    );
}

/// Contract case: a permanent failure is stored and replayed.
pub async fn a_permanent_failure_is_stored_and_replayed<S: Store>(store: &S) {
    let clock = ManualClock::starting_now();
    let k = key("failed");
    let (a, b) = (OwnerToken::generate(), OwnerToken::generate());
    store
        .acquire(&acquire_request(&clock, &k, &a, LEASE, None))
        .await
        .unwrap();
    let mut request = complete_request(&clock, &k, &a, "\"card declined\"", HOUR);
    request.status = Status::Failed;
    assert_eq!(store.complete(&request).await.unwrap(), Fenced::Applied);
    let Acquire::Existing(record) = store
        .acquire(&acquire_request(&clock, &k, &b, LEASE, None))
        .await
        .unwrap()
    else {
        panic!("failed record must be returned")
    };
    assert_eq!(record.status, Status::Failed);
    assert_eq!(
        decide(&record, clock.now(), None),
        Decision::ReplayFailure {
            data: Some("\"card declined\"".into())
        }
    );
}

/// Contract case: a result over the item limit is refused and changes nothing.
pub async fn a_result_over_the_item_limit_is_refused_and_changes_nothing<S: Store>(store: &S) {
    let clock = ManualClock::starting_now();
    let k = key("too-large");
    let a = OwnerToken::generate();
    store
        .acquire(&acquire_request(&clock, &k, &a, LEASE, None))
        .await
        .unwrap();
    let huge = format!("\"{}\"", "x".repeat(410 * 1024));
    match store
        .complete(&complete_request(&clock, &k, &a, &huge, HOUR))
        .await
    {
        Err(lambda_idempotency::store::StoreError::ItemTooLarge { limit_bytes, .. }) => {
            assert_eq!(limit_bytes, 400 * 1024)
        }
        other => panic!("expected ItemTooLarge, got {other:?}"),
    }
    let record = store.get(&k).await.unwrap().expect("record kept");
    assert_eq!(record.status, Status::InProgress);
    assert_eq!(store.release(&k, &a).await.unwrap(), Fenced::Applied);
}

/// Contract case: the same owner acquiring twice holds one lease.
pub async fn the_same_owner_acquiring_twice_holds_one_lease<S: Seed>(store: &S) {
    let clock = ManualClock::starting_now();
    let k = key("same-owner");
    let (a, b) = (OwnerToken::generate(), OwnerToken::generate());
    let request = acquire_request(&clock, &k, &a, LEASE, None);
    assert_eq!(store.acquire(&request).await.unwrap(), Acquire::Acquired);
    // The same acquire sent again (its answer lost): the lease is ours, unchanged.
    clock.advance(Duration::from_secs(1));
    let resent = acquire_request(&clock, &k, &a, LEASE, None);
    assert_eq!(store.acquire(&resent).await.unwrap(), Acquire::Acquired);
    let record = store.get(&k).await.unwrap().expect("record");
    assert_eq!(record.owner.as_ref(), Some(&a));
    assert_eq!(record.status, Status::InProgress);
    assert!(matches!(
        store
            .acquire(&acquire_request(&clock, &k, &b, LEASE, None))
            .await
            .unwrap(),
        Acquire::Existing(_)
    ));
}

/// Contract case: extend and release leave finished records alone.
pub async fn extend_and_release_leave_finished_records_alone<S: Seed>(store: &S) {
    for status in [Status::Completed, Status::Failed] {
        let clock = ManualClock::starting_now();
        let k = key(status.as_str());
        let a = OwnerToken::generate();
        store
            .acquire(&acquire_request(&clock, &k, &a, LEASE, None))
            .await
            .unwrap();
        let mut done = complete_request(&clock, &k, &a, "\"done\"", HOUR);
        done.status = status;
        assert_eq!(store.complete(&done).await.unwrap(), Fenced::Applied);
        let before = store.get(&k).await.unwrap().expect("record");
        let extend = ExtendRequest {
            key: k.clone(),
            owner: a.clone(),
            lease_expiration_ms: epoch_ms(clock.now() + LEASE),
            expiration_secs: epoch_secs(clock.now() + HOUR * 2),
        };
        assert_eq!(
            store.extend(&extend).await.unwrap(),
            Fenced::LeaseLost,
            "{status}"
        );
        assert_eq!(
            store.release(&k, &a).await.unwrap(),
            Fenced::LeaseLost,
            "{status}"
        );
        assert_eq!(store.get(&k).await.unwrap(), Some(before), "{status}");
    }
}

/// Contract case: an in progress record without a lease time holds until it expires.
pub async fn an_in_progress_record_without_a_lease_time_holds_until_it_expires<S: Seed>(store: &S) {
    let clock = ManualClock::starting_now();
    let k = key("no-lease-time");
    store
        .seed(&Record {
            key: k.clone(),
            status: Status::InProgress,
            expiration_secs: epoch_secs(clock.now()) + 60,
            lease_expiration_ms: None,
            owner: Some(OwnerToken::new("another-tool")),
            data: None,
            validation: None,
        })
        .await;
    let b = OwnerToken::generate();
    clock.advance(Duration::from_secs(59));
    let Acquire::Existing(record) = store
        .acquire(&acquire_request(&clock, &k, &b, LEASE, None))
        .await
        .unwrap()
    else {
        panic!("a record without a lease time never elapses")
    };
    assert_eq!(record.lease_expiration_ms, None);
    assert_eq!(decide(&record, clock.now(), None), Decision::InProgress);
    clock.advance(Duration::from_secs(2));
    assert_eq!(
        store
            .acquire(&acquire_request(&clock, &k, &b, LEASE, None))
            .await
            .unwrap(),
        Acquire::Acquired
    );
}

/// The size of a completed record as every store counts it: attribute names and values in
/// UTF-8 bytes, 21 bytes per number, and room for a 67-byte payload hash.
fn completed_size(request: &CompleteRequest) -> usize {
    "id".len()
        + request.key.as_str().len()
        + "status".len()
        + request.status.as_str().len()
        + "expiration".len()
        + 21
        + "lease_owner".len()
        + request.owner.as_str().len()
        + "data".len()
        + request.data.len()
        + "validation".len()
        + 67
}

/// Contract case: the item size limit is the same on every store.
pub async fn the_item_size_limit_is_the_same_on_every_store<S: Seed>(store: &S) {
    for (name, extra, fits) in [("at-limit", 0, true), ("over-limit", 1, false)] {
        let clock = ManualClock::starting_now();
        let k = key(name);
        let a = OwnerToken::generate();
        store
            .acquire(&acquire_request(&clock, &k, &a, LEASE, None))
            .await
            .unwrap();
        let mut request = complete_request(&clock, &k, &a, "", HOUR);
        let overhead = completed_size(&request);
        request.data = format!("\"{}\"", "x".repeat(MAX_ITEM_BYTES - overhead - 2 + extra));
        assert_eq!(completed_size(&request), MAX_ITEM_BYTES + extra);
        match store.complete(&request).await {
            Ok(Fenced::Applied) if fits => {}
            Err(StoreError::ItemTooLarge { size_bytes, .. }) if !fits => {
                assert_eq!(size_bytes, MAX_ITEM_BYTES + 1)
            }
            other => panic!("{name}: {other:?}"),
        }
    }
}

/// Generates one `#[tokio::test]` per contract case; `$store` is an expression giving an
/// `Option<impl Store>` (None: skipped).
#[macro_export]
macro_rules! store_contract_suite {
    ($store:expr) => {
        $crate::store_contract_suite!(@cases $store;
            first_acquire_wins_and_second_sees_in_progress,
            elapsed_lease_is_taken_over,
            expired_record_is_taken_over_before_ttl_deletes_it,
            complete_then_replay,
            complete_and_release_refuse_a_foreign_owner,
            release_lets_the_next_acquire_win,
            payload_mismatch_is_detected,
            extend_moves_the_lease_only_for_its_holder,
            a_permanent_failure_is_stored_and_replayed,
            a_result_over_the_item_limit_is_refused_and_changes_nothing,
            the_same_owner_acquiring_twice_holds_one_lease,
            extend_and_release_leave_finished_records_alone,
            an_in_progress_record_without_a_lease_time_holds_until_it_expires,
            the_item_size_limit_is_the_same_on_every_store,
        );
    };
    (@cases $store:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                if let Some(store) = $store {
                    $crate::contract::$case(&store).await;
                }
            }
        )*
    };
}
