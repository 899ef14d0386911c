//! The store contract: one suite, run against every `Store` implementation
//! (the library's `tests/store_memory.rs` and `tests/store_dynamodb.rs`).

mod completion;
mod item_size;
mod leases;

pub use completion::{
    a_permanent_failure_is_stored_and_replayed, complete_and_release_refuse_a_foreign_owner,
    complete_then_replay, expired_record_is_taken_over_before_ttl_deletes_it,
    extend_and_release_leave_finished_records_alone, payload_mismatch_is_detected,
};
pub use item_size::{
    a_result_over_the_item_limit_is_refused_and_changes_nothing,
    the_item_size_limit_is_the_same_on_every_store,
};
pub use leases::{
    an_in_progress_record_without_a_lease_time_holds_until_it_expires, elapsed_lease_is_taken_over,
    extend_moves_the_lease_only_for_its_holder, first_acquire_wins_and_second_sees_in_progress,
    release_lets_the_next_acquire_win, the_same_owner_acquiring_twice_holds_one_lease,
};

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use lambda_idempotency::clock::{epoch_ms, epoch_secs, Clock, ManualClock};
use lambda_idempotency::key::IdempotencyKey;
use lambda_idempotency::record::{OwnerToken, Record, Status};
use lambda_idempotency::store::{
    AcquireRequest, CompleteRequest, DynamoDbStore, InMemoryStore, Store,
};

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
