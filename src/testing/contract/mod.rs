//! The store contract, one suite of cases every [`Store`] must pass. It runs here against
//! [`InMemoryStore`] and [`DynamoDbStore`] (DynamoDB Local), and is exported for third-party
//! stores: implement [`Seed`] for your store, then call [`store_contract_suite!`](crate::store_contract_suite)
//! in a test file (add [`transactional_contract_suite!`](crate::transactional_contract_suite)
//! for a [`TransactionalStore`](crate::store::TransactionalStore), with
//! [`Ledger`](super::transactional::Ledger)). Each case is also a function of this module, to
//! call from your own tests.

mod completion;
mod item_size;
mod leases;

pub use completion::{
    a_permanent_failure_is_stored_and_replayed, complete_and_release_refuse_a_foreign_owner,
    complete_then_replay, expired_record_is_taken_over_before_ttl_deletes_it,
    extend_and_release_leave_finished_records_alone, get_many_reads_every_record_it_holds,
    payload_mismatch_is_detected,
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

#[cfg(feature = "dynamodb")]
use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use crate::clock::{epoch_ms, epoch_secs, Clock, ManualClock};
use crate::key::IdempotencyKey;
use crate::record::{OwnerToken, Record, Status};
#[cfg(feature = "dynamodb")]
use crate::store::DynamoDbStore;
use crate::store::{Acquire, AcquireRequest, CompleteRequest, Fenced, InMemoryStore, Store};
#[cfg(feature = "dynamodb")]
use aws_sdk_dynamodb::types::AttributeValue;

/// Writes a record as it is, bypassing the protocol (as another tool might have).
pub trait Seed: Store {
    /// Writes `record` as it is.
    fn seed(&self, record: &Record) -> impl Future<Output = ()> + Send;

    /// The attribute names the store writes with, by which the item size limit is counted
    /// (the default layout unless the store says otherwise).
    fn layout(&self) -> crate::store::AttributeNames {
        crate::store::AttributeNames::default()
    }
}

impl Seed for InMemoryStore {
    async fn seed(&self, record: &Record) {
        self.insert_record(record.clone());
    }
}

#[cfg(feature = "dynamodb")]
#[cfg_attr(docsrs, doc(cfg(feature = "dynamodb")))]
impl Seed for DynamoDbStore {
    fn layout(&self) -> crate::store::AttributeNames {
        self.attribute_names().clone()
    }

    async fn seed(&self, record: &Record) {
        let n = self.attribute_names();
        let mut item: HashMap<String, AttributeValue> = n
            .item_key(record.key.as_str())
            .into_iter()
            .map(|(name, value)| (name.to_string(), AttributeValue::S(value.into())))
            .collect();
        item.extend([
            (
                n.status.clone(),
                AttributeValue::S(record.status.as_str().into()),
            ),
            (
                n.expiration.clone(),
                AttributeValue::N(record.expiration_secs.to_string()),
            ),
        ]);
        if let Some(validation) = &record.validation {
            item.insert(n.validation.clone(), AttributeValue::S(validation.clone()));
        }
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

#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
impl<C> Seed for crate::store::RedisStore<C>
where
    C: ::redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    async fn seed(&self, record: &Record) {
        let mut fields = vec![
            ("status", record.status.as_str().to_string()),
            ("expiration", record.expiration_secs.to_string()),
        ];
        if let Some(lease) = record.lease_expiration_ms {
            fields.push(("in_progress_expiration", lease.to_string()));
        }
        if let Some(owner) = &record.owner {
            fields.push(("lease_owner", owner.as_str().to_string()));
        }
        if let Some(data) = &record.data {
            fields.push(("data", data.clone()));
        }
        if let Some(validation) = &record.validation {
            fields.push(("validation", validation.clone()));
        }
        let key = self.redis_key(&record.key);
        let mut connection = self.connection().clone();
        let () = ::redis::cmd("DEL")
            .arg(&key)
            .exec_async(&mut connection)
            .await
            .expect("clear the record's key");
        let () = ::redis::cmd("HSET")
            .arg(&key)
            .arg(fields)
            .exec_async(&mut connection)
            .await
            .expect("seed a record");
    }
}

#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
impl Seed for crate::store::PostgresStore {
    async fn seed(&self, record: &Record) {
        let client = self.pool().get().await.expect("a PostgreSQL connection");
        let time = |value: u64| i64::try_from(value).unwrap_or(i64::MAX);
        let sql = format!(
            "INSERT INTO {table} (id, status, expiration, in_progress_expiration, lease_owner, data, validation) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO UPDATE SET \
             status = EXCLUDED.status, expiration = EXCLUDED.expiration, \
             in_progress_expiration = EXCLUDED.in_progress_expiration, \
             lease_owner = EXCLUDED.lease_owner, data = EXCLUDED.data, validation = EXCLUDED.validation",
            table = self.table()
        );
        client
            .execute(
                &sql,
                &[
                    &record.key.as_str(),
                    &record.status.as_str(),
                    &time(record.expiration_secs),
                    &record.lease_expiration_ms.map(time),
                    &record.owner.as_ref().map(|owner| owner.as_str()),
                    &record.data,
                    &record.validation,
                ],
            )
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
        now: clock.now(),
    }
}

/// The store's answer to [`acquire_request`] with a lease of [`LEASE`].
async fn acquire<S: Store>(
    store: &S,
    clock: &ManualClock,
    key: &IdempotencyKey,
    owner: &OwnerToken,
    validation: Option<&str>,
) -> Acquire {
    let request = acquire_request(clock, key, owner, LEASE, validation);
    store.acquire(&request).await.unwrap()
}

/// The store's answer to [`complete_request`].
async fn complete<S: Store>(
    store: &S,
    clock: &ManualClock,
    key: &IdempotencyKey,
    owner: &OwnerToken,
    data: &str,
    window: Duration,
) -> Fenced {
    let request = complete_request(clock, key, owner, data, window);
    store.complete(&request).await.unwrap()
}

const LEASE: Duration = Duration::from_secs(30);
const HOUR: Duration = Duration::from_secs(3600);

/// Generates one `#[tokio::test]` per [contract](crate::testing::contract) case; `$store` is
/// an expression giving an `Option<impl Seed>` (`None` skips the cases). The crate that calls
/// it needs `tokio` with the `macros` and `rt` features among its dev-dependencies.
///
/// ```ignore
/// // tests/my_store_contract.rs
/// lambda_idempotency::store_contract_suite!(Some(my_store::MyStore::for_tests()));
/// ```
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
            get_many_reads_every_record_it_holds,
        );
    };
    (@cases $store:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                if let Some(store) = $store {
                    $crate::testing::contract::$case(&store).await;
                }
            }
        )*
    };
}
