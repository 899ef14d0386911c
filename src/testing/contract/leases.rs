//! Contract cases on leases: acquiring, elapsing, extending, releasing, resent acquires.

use std::time::Duration;

use crate::clock::{epoch_ms, epoch_secs, Clock, ManualClock};
use crate::record::{decide, Decision, OwnerToken, Record, Status};
use crate::store::{Acquire, ExtendRequest, Fenced, Store};

use super::{acquire, acquire_request, complete, key, Seed, HOUR, LEASE};

/// Contract case: first acquire wins and second sees in progress.
pub async fn first_acquire_wins_and_second_sees_in_progress<S: Store>(store: &S) {
    let clock = ManualClock::starting_now();
    let k = key("first-wins");
    let (a, b) = (OwnerToken::generate(), OwnerToken::generate());
    let first = acquire(store, &clock, &k, &a, None).await;
    assert_eq!(first, Acquire::Acquired);
    let second = acquire(store, &clock, &k, &b, None).await;
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
        acquire(store, &clock, &k, &b, None).await,
        Acquire::Existing(_)
    ));
    clock.advance(Duration::from_millis(1));
    assert_eq!(
        acquire(store, &clock, &k, &b, None).await,
        Acquire::Acquired
    );
    // The old holder can neither complete nor release any more.
    assert_eq!(
        complete(store, &clock, &k, &a, "1", HOUR).await,
        Fenced::LeaseLost
    );
    assert_eq!(store.release(&k, &a).await.unwrap(), Fenced::LeaseLost);
    let record = store.get(&k).await.unwrap().expect("record");
    assert_eq!(record.owner.as_ref(), Some(&b));
    assert_eq!(record.status, Status::InProgress);
}

/// Contract case: release lets the next acquire win.
pub async fn release_lets_the_next_acquire_win<S: Store>(store: &S) {
    let clock = ManualClock::starting_now();
    let k = key("release");
    let (a, b) = (OwnerToken::generate(), OwnerToken::generate());
    acquire(store, &clock, &k, &a, None).await;
    assert_eq!(store.release(&k, &a).await.unwrap(), Fenced::Applied);
    assert_eq!(store.get(&k).await.unwrap(), None);
    assert_eq!(
        acquire(store, &clock, &k, &b, None).await,
        Acquire::Acquired
    );
    // A completed record cannot be released: release only undoes a lease.
    complete(store, &clock, &k, &b, "1", HOUR).await;
    assert_eq!(store.release(&k, &b).await.unwrap(), Fenced::LeaseLost);
    assert!(store.get(&k).await.unwrap().is_some());
}

/// Contract case: extend moves the lease only for its holder.
pub async fn extend_moves_the_lease_only_for_its_holder<S: Store>(store: &S) {
    let clock = ManualClock::starting_now();
    let k = key("extend");
    let (a, b) = (OwnerToken::generate(), OwnerToken::generate());
    acquire(store, &clock, &k, &a, None).await;
    let extend = |owner: &OwnerToken, until: Duration| ExtendRequest {
        key: k.clone(),
        owner: owner.clone(),
        lease_expiration_ms: epoch_ms(clock.now() + until),
        expiration_secs: epoch_secs(clock.now() + HOUR),
        now: clock.now(),
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
        acquire(store, &clock, &k, &b, None).await,
        Acquire::Existing(_)
    ));
    clock.advance(LEASE);
    assert_eq!(
        acquire(store, &clock, &k, &b, None).await,
        Acquire::Acquired
    );
    assert_eq!(
        store.extend(&extend(&a, LEASE)).await.unwrap(),
        Fenced::LeaseLost
    );
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
        acquire(store, &clock, &k, &b, None).await,
        Acquire::Existing(_)
    ));
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
    let Acquire::Existing(record) = acquire(store, &clock, &k, &b, None).await else {
        panic!("a record without a lease time never elapses")
    };
    assert_eq!(record.lease_expiration_ms, None);
    assert_eq!(decide(&record, clock.now(), None), Decision::InProgress);
    clock.advance(Duration::from_secs(2));
    assert_eq!(
        acquire(store, &clock, &k, &b, None).await,
        Acquire::Acquired
    );
}
