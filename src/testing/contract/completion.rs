//! Contract cases on finished records: completion, replay, mismatches, failures, expiry.

use std::time::Duration;

use crate::clock::{epoch_ms, epoch_secs, Clock, ManualClock};
use crate::key::PayloadHash;
use crate::record::{decide, Decision, OwnerToken, Status};
use crate::store::{Acquire, CompleteRequest, ExtendRequest, Fenced, Store};

use super::{acquire, acquire_request, complete, complete_request, key, Seed, HOUR, LEASE};

/// Contract case: expired record is taken over before ttl deletes it.
pub async fn expired_record_is_taken_over_before_ttl_deletes_it<S: Store>(store: &S) {
    let clock = ManualClock::starting_now();
    let k = key("expired");
    let (a, b) = (OwnerToken::generate(), OwnerToken::generate());
    acquire(store, &clock, &k, &a, None).await;
    let window = Duration::from_secs(60);
    assert_eq!(
        complete(store, &clock, &k, &a, "\"old\"", window).await,
        Fenced::Applied
    );
    // Within the window: a duplicate sees the completed record.
    clock.advance(window);
    let Acquire::Existing(record) = acquire(store, &clock, &k, &b, None).await else {
        panic!("record still counts at its expiration second")
    };
    assert_eq!(record.status, Status::Completed);
    // Past it, the record is still stored (no TTL sweep), but it no longer counts.
    clock.advance(Duration::from_secs(1));
    assert!(store.get(&k).await.unwrap().is_some());
    assert_eq!(
        acquire(store, &clock, &k, &b, None).await,
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
    acquire(store, &clock, &k, &a, Some("v2:hash-1")).await;
    let data = r#"{"balance":42,"note":"é ✓"}"#;
    assert_eq!(
        complete(store, &clock, &k, &a, data, HOUR).await,
        Fenced::Applied
    );
    // Long after the lease, but within the window: still a replay.
    clock.advance(Duration::from_secs(600));
    let Acquire::Existing(record) = acquire(store, &clock, &k, &b, Some("v2:hash-1")).await else {
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
        complete(store, &clock, &k, &a, "2", HOUR).await,
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
    acquire(store, &clock, &k, &a, None).await;
    assert_eq!(
        complete(store, &clock, &k, &intruder, "1", HOUR).await,
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
        complete(store, &clock, &never, &a, "1", HOUR).await,
        Fenced::LeaseLost
    );
    assert_eq!(store.release(&never, &a).await.unwrap(), Fenced::LeaseLost);
    assert_eq!(store.get(&never).await.unwrap(), None);
}

/// Contract case: payload mismatch is detected.
pub async fn payload_mismatch_is_detected<S: Store>(store: &S) {
    let clock = ManualClock::starting_now();
    let k = key("mismatch");
    let (a, b) = (OwnerToken::generate(), OwnerToken::generate());
    acquire(store, &clock, &k, &a, Some("v2:hash-a")).await;
    let Acquire::Existing(in_progress) = acquire(store, &clock, &k, &b, Some("v2:hash-b")).await
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
    complete(store, &clock, &k, &a, "1", HOUR).await;
    let Acquire::Existing(done) = acquire(store, &clock, &k, &b, Some("v2:hash-b")).await else {
        panic!("existing record expected")
    };
    assert_eq!(done.validation.as_deref(), Some("v2:hash-a"));
    assert_eq!(
        decide(&done, clock.now(), Some(&PayloadHash::new("v2:hash-b"))),
        Decision::PayloadMismatch
    );
}

/// Contract case: a permanent failure is stored and replayed.
pub async fn a_permanent_failure_is_stored_and_replayed<S: Store>(store: &S) {
    let clock = ManualClock::starting_now();
    let k = key("failed");
    let (a, b) = (OwnerToken::generate(), OwnerToken::generate());
    acquire(store, &clock, &k, &a, None).await;
    let mut request = complete_request(&clock, &k, &a, "\"card declined\"", HOUR);
    request.status = Status::Failed;
    assert_eq!(store.complete(&request).await.unwrap(), Fenced::Applied);
    let Acquire::Existing(record) = acquire(store, &clock, &k, &b, None).await else {
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

/// Contract case: extend and release leave finished records alone.
pub async fn extend_and_release_leave_finished_records_alone<S: Seed>(store: &S) {
    for status in [Status::Completed, Status::Failed] {
        let clock = ManualClock::starting_now();
        let k = key(status.as_str());
        let a = OwnerToken::generate();
        acquire(store, &clock, &k, &a, None).await;
        let mut done = complete_request(&clock, &k, &a, "\"done\"", HOUR);
        done.status = status;
        assert_eq!(store.complete(&done).await.unwrap(), Fenced::Applied);
        let before = store.get(&k).await.unwrap().expect("record");
        // The holder's own late extension too: refused, the record still finished under the
        // holder, which is how its heartbeat tells its finished record from a lease taken
        // over.
        let extend = ExtendRequest {
            key: k.clone(),
            owner: a.clone(),
            lease_expiration_ms: epoch_ms(clock.now() + LEASE),
            expiration_secs: epoch_secs(clock.now() + HOUR * 2),
            now: clock.now(),
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

/// Contract case: `get_many` answers every record it holds among the keys (over one
/// DynamoDB call's 100), whatever their status, once each, and nothing for absent keys.
pub async fn get_many_reads_every_record_it_holds<S: Store>(store: &S) {
    let clock = ManualClock::starting_now();
    let owner = OwnerToken::generate();
    let keys: Vec<_> = (0..105).map(|i| key(&format!("many-{i}"))).collect();
    for (i, k) in keys.iter().enumerate() {
        let request = acquire_request(&clock, k, &owner, LEASE, None);
        assert_eq!(store.acquire(&request).await.unwrap(), Acquire::Acquired);
        if i % 2 == 0 {
            let request = complete_request(&clock, k, &owner, &i.to_string(), HOUR);
            assert_eq!(store.complete(&request).await.unwrap(), Fenced::Applied);
        }
    }
    let mut asked = keys.clone();
    asked.push(keys[0].clone());
    asked.extend((0..3).map(|i| key(&format!("many-absent-{i}"))));
    let mut found = store.get_many(&asked).await.unwrap();
    found.sort_by(|a, b| a.key.cmp(&b.key));
    let mut expected = keys.clone();
    expected.sort();
    let found_keys: Vec<_> = found.iter().map(|r| r.key.clone()).collect();
    assert_eq!(found_keys.len(), expected.len(), "each held record once");
    assert!(
        found_keys == expected,
        "only the held records, no absent key"
    );
    for record in &found {
        let i = keys.iter().position(|k| *k == record.key).unwrap();
        if i % 2 == 0 {
            assert_eq!(record.status, Status::Completed);
            assert_eq!(record.data.as_deref(), Some(i.to_string().as_str()));
        } else {
            assert_eq!(record.status, Status::InProgress);
            assert_eq!(record.owner.as_ref(), Some(&owner));
        }
    }
    assert!(store.get_many(&[]).await.unwrap().is_empty());
}
