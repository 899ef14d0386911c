//! Contract cases on the 400 KB item limit: refused unchanged, at one size on every store.

use crate::clock::ManualClock;
use crate::record::{OwnerToken, Status};
use crate::store::{AttributeNames, CompleteRequest, Fenced, Store, StoreError, MAX_ITEM_BYTES};

use super::{acquire, complete_request, key, Seed, HOUR};

/// Contract case: a result over the item limit is refused and changes nothing.
pub async fn a_result_over_the_item_limit_is_refused_and_changes_nothing<S: Store>(store: &S) {
    let clock = ManualClock::starting_now();
    let k = key("too-large");
    let a = OwnerToken::generate();
    acquire(store, &clock, &k, &a, None).await;
    let huge = format!("\"{}\"", "x".repeat(410 * 1024));
    match store
        .complete(&complete_request(&clock, &k, &a, &huge, HOUR))
        .await
    {
        Err(crate::store::StoreError::ItemTooLarge { limit_bytes, .. }) => {
            assert_eq!(limit_bytes, 400 * 1024)
        }
        other => panic!("expected ItemTooLarge, got {other:?}"),
    }
    let record = store.get(&k).await.unwrap().expect("record kept");
    assert_eq!(record.status, Status::InProgress);
    assert_eq!(store.release(&k, &a).await.unwrap(), Fenced::Applied);
}

/// The size of a completed record as every store counts it: attribute names and values in
/// UTF-8 bytes (the key attributes of the store's layout), 21 bytes per number, and room for
/// a 67-byte payload hash.
fn completed_size(layout: &AttributeNames, request: &CompleteRequest) -> usize {
    let key: usize = layout
        .item_key(request.key.as_str())
        .iter()
        .map(|(name, value)| name.len() + value.len())
        .sum();
    key + "status".len()
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
        acquire(store, &clock, &k, &a, None).await;
        let mut request = complete_request(&clock, &k, &a, "", HOUR);
        let layout = store.layout();
        let overhead = completed_size(&layout, &request);
        request.data = format!("\"{}\"", "x".repeat(MAX_ITEM_BYTES - overhead - 2 + extra));
        assert_eq!(completed_size(&layout, &request), MAX_ITEM_BYTES + extra);
        match store.complete(&request).await {
            Ok(Fenced::Applied) if fits => {}
            Err(StoreError::ItemTooLarge { size_bytes, .. }) if !fits => {
                assert_eq!(size_bytes, MAX_ITEM_BYTES + 1)
            }
            other => panic!("{name}: {other:?}"),
        }
    }
}
