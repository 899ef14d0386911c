//! The transactional store contract, one suite every [`TransactionalStore`] must pass:
//! `commit` (lease mode) and `commit_fresh` (optimistic mode). It runs here against
//! [`InMemoryStore`] and `DynamoDbStore`, and is exported for third-party stores: implement
//! [`Ledger`] and call [`transactional_contract_suite!`](crate::transactional_contract_suite).

use std::future::Future;
use std::time::Duration;

use crate::clock::{epoch_ms, epoch_secs, Clock, ManualClock};
use crate::key::IdempotencyKey;
use crate::record::{OwnerToken, Status};
use crate::store::{
    Acquire, AcquireRequest, Attr, Commit, CommitRequest, InMemoryStore, StoreError,
    TransactionalStore, Write,
};

/// A ledger table beside the store's records: `account` (S) keys, a numeric `balance`.
pub trait Ledger: TransactionalStore {
    /// Creates (or names) a fresh ledger table.
    fn ledger(&self) -> impl Future<Output = String> + Send;
    /// The balance of `account` (0 when there is no item).
    fn balance(&self, table: &str, account: &str) -> impl Future<Output = i64> + Send;
}

impl Ledger for InMemoryStore {
    async fn ledger(&self) -> String {
        let table = format!("ledger-{}", uuid::Uuid::new_v4().simple());
        self.define_table(&table, &["account"]);
        table
    }

    async fn balance(&self, table: &str, account: &str) -> i64 {
        let key = [("account".to_string(), Attr::s(account))].into();
        match self
            .item(table, &key)
            .and_then(|item| item.get("balance").cloned())
        {
            Some(Attr::N(n)) => n.parse().expect("numeric balance"),
            _ => 0,
        }
    }
}

#[cfg(feature = "dynamodb")]
#[cfg_attr(docsrs, doc(cfg(feature = "dynamodb")))]
impl Ledger for crate::store::DynamoDbStore {
    async fn ledger(&self) -> String {
        super::dynamodb::create_table(self.client(), "ledger", "account").await
    }

    async fn balance(&self, table: &str, account: &str) -> i64 {
        super::dynamodb::balance(self.client(), table, account).await
    }
}

const LEASE: Duration = Duration::from_secs(30);
const HOUR: Duration = Duration::from_secs(3600);

fn key(name: &str) -> IdempotencyKey {
    IdempotencyKey::derive(
        "txn-contract",
        format!("{name}-{}", uuid::Uuid::new_v4()).as_bytes(),
    )
}

fn credit(ledger: &str, amount: i64) -> Write {
    Write::update(ledger, [("account", Attr::s("acct-1"))], "ADD #b :a")
        .name("#b", "balance")
        .value(":a", Attr::n(amount))
}

/// A commit of `writes` for `key` by `owner` at the clock's time, completing with `5`.
pub fn commit_request(
    clock: &ManualClock,
    key: &IdempotencyKey,
    owner: &OwnerToken,
    writes: Vec<Write>,
) -> CommitRequest {
    let now = clock.now();
    CommitRequest {
        key: key.clone(),
        owner: owner.clone(),
        now,
        status: Status::Completed,
        data: "5".into(),
        expiration_secs: epoch_secs(now + HOUR),
        validation: None,
        writes,
    }
}

async fn lease<S: TransactionalStore>(
    store: &S,
    clock: &ManualClock,
    key: &IdempotencyKey,
) -> OwnerToken {
    let owner = OwnerToken::generate();
    let now = clock.now();
    let answer = store
        .acquire(&AcquireRequest {
            key: key.clone(),
            owner: owner.clone(),
            now,
            lease_expiration_ms: epoch_ms(now + LEASE),
            expiration_secs: epoch_secs(now + HOUR),
            validation: None,
        })
        .await
        .unwrap();
    assert_eq!(answer, Acquire::Acquired);
    owner
}

/// Contract case: a lease commit applies the writes with the record.
pub async fn a_lease_commit_applies_the_writes_with_the_record<S: Ledger>(store: &S) {
    let clock = ManualClock::starting_now();
    let ledger = store.ledger().await;
    let k = key("lease-commit");
    let a = lease(store, &clock, &k).await;
    let request = commit_request(&clock, &k, &a, vec![credit(&ledger, 5)]);
    assert_eq!(store.commit(&request).await.unwrap(), Commit::Applied);
    let record = store.get(&k).await.unwrap().expect("record");
    assert_eq!(record.status, Status::Completed);
    assert_eq!(record.data.as_deref(), Some("5"));
    assert_eq!(record.lease_expiration_ms, None);
    assert_eq!(store.balance(&ledger, "acct-1").await, 5);
    // Sent again unchanged (its answer lost): recognised by its request token (DynamoDB
    // answers success without applying it again) or refused by the record, which shows it
    // is ours. Either way the writes are not applied twice.
    match store.commit(&request).await.unwrap() {
        Commit::Applied => {}
        Commit::RecordRefused(Some(mine)) => {
            assert_eq!(mine.owner.as_ref(), Some(&a));
            assert_eq!(mine.status, Status::Completed);
        }
        other => panic!("a resent commit must be recognised: {other:?}"),
    }
    assert_eq!(store.balance(&ledger, "acct-1").await, 5);
}

/// Contract case: a lease commit by another owner applies nothing.
pub async fn a_lease_commit_by_another_owner_applies_nothing<S: Ledger>(store: &S) {
    let clock = ManualClock::starting_now();
    let ledger = store.ledger().await;
    let k = key("foreign-commit");
    let a = lease(store, &clock, &k).await;
    let intruder = OwnerToken::generate();
    let request = commit_request(&clock, &k, &intruder, vec![credit(&ledger, 5)]);
    let Commit::RecordRefused(Some(record)) = store.commit(&request).await.unwrap() else {
        panic!("refused by the record")
    };
    assert_eq!(record.owner.as_ref(), Some(&a));
    assert_eq!(record.status, Status::InProgress);
    assert_eq!(store.balance(&ledger, "acct-1").await, 0);
}

/// Contract case: a fresh commit resent with a later now finds its own record.
pub async fn a_fresh_commit_resent_with_a_later_now_finds_its_own_record<S: Ledger>(store: &S) {
    let clock = ManualClock::starting_now();
    let ledger = store.ledger().await;
    let k = key("fresh-resent");
    let a = OwnerToken::generate();
    let first = commit_request(&clock, &k, &a, vec![credit(&ledger, 5)]);
    assert_eq!(store.commit_fresh(&first).await.unwrap(), Commit::Applied);
    // A later attempt of the same commit (new `now`, so new parameters): refused by our own
    // record, never an error about a reused request token.
    clock.advance(Duration::from_millis(1));
    let again = commit_request(&clock, &k, &a, vec![credit(&ledger, 5)]);
    match store.commit_fresh(&again).await {
        Ok(Commit::RecordRefused(Some(record))) => {
            assert_eq!(record.owner.as_ref(), Some(&a));
            assert_eq!(record.status, Status::Completed);
        }
        other => panic!("expected our own record, got {other:?}"),
    }
    assert_eq!(store.balance(&ledger, "acct-1").await, 5);
}

/// Contract case: a fresh commit is refused by a live record and takes over an expired one.
pub async fn a_fresh_commit_is_refused_by_a_live_record_and_takes_over_an_expired_one<S: Ledger>(
    store: &S,
) {
    let clock = ManualClock::starting_now();
    let ledger = store.ledger().await;
    let k = key("fresh-live");
    let holder = lease(store, &clock, &k).await;
    let b = OwnerToken::generate();
    let request = commit_request(&clock, &k, &b, vec![credit(&ledger, 5)]);
    let Commit::RecordRefused(Some(record)) = store.commit_fresh(&request).await.unwrap() else {
        panic!("a live lease refuses an optimistic commit")
    };
    assert_eq!(record.owner.as_ref(), Some(&holder));
    assert_eq!(store.balance(&ledger, "acct-1").await, 0);
    // Once the lease has elapsed, the commit takes the record over.
    clock.advance(LEASE + Duration::from_millis(1));
    let later = commit_request(&clock, &k, &b, vec![credit(&ledger, 5)]);
    assert_eq!(store.commit_fresh(&later).await.unwrap(), Commit::Applied);
    let record = store.get(&k).await.unwrap().expect("record");
    assert_eq!(record.owner.as_ref(), Some(&b));
    assert_eq!(record.status, Status::Completed);
    assert_eq!(store.balance(&ledger, "acct-1").await, 5);
}

/// Contract case: a failed business condition applies nothing.
pub async fn a_failed_business_condition_applies_nothing<S: Ledger>(store: &S) {
    let clock = ManualClock::starting_now();
    let ledger = store.ledger().await;
    for fresh in [false, true] {
        let k = key("condition");
        let a = if fresh {
            OwnerToken::generate()
        } else {
            lease(store, &clock, &k).await
        };
        let guarded = Write::update(&ledger, [("account", Attr::s("acct-ghost"))], "ADD #b :a")
            .name("#b", "balance")
            .value(":a", Attr::n(1))
            .condition("attribute_exists(account)");
        let request = commit_request(&clock, &k, &a, vec![credit(&ledger, 5), guarded]);
        let answer = if fresh {
            store.commit_fresh(&request).await
        } else {
            store.commit(&request).await
        };
        assert_eq!(
            answer.unwrap(),
            Commit::ConditionFailed { write_index: 1 },
            "fresh={fresh}"
        );
        assert_eq!(store.balance(&ledger, "acct-1").await, 0, "fresh={fresh}");
        let record = store.get(&k).await.unwrap();
        if fresh {
            assert_eq!(record, None);
        } else {
            assert_eq!(record.expect("record").status, Status::InProgress);
        }
    }
}

/// Contract case: invalid writes are refused as invalid.
pub async fn invalid_writes_are_refused_as_invalid<S: Ledger>(store: &S) {
    let clock = ManualClock::starting_now();
    let ledger = store.ledger().await;
    let k = key("invalid");
    let a = lease(store, &clock, &k).await;
    let account = || [("account", Attr::s("acct-1"))];
    let request = commit_request(
        &clock,
        &k,
        &a,
        vec![
            Write::put(&ledger, account()),
            Write::delete(&ledger, account()),
        ],
    );
    match store.commit(&request).await {
        Err(StoreError::InvalidRequest { .. }) => {}
        other => panic!("expected an invalid request, got {other:?}"),
    }
    let record = store.get(&k).await.unwrap().expect("record");
    assert_eq!(record.status, Status::InProgress);
}

/// Contract case: writes nested too deep are refused before they are walked.
pub async fn writes_nested_too_deep_are_refused_before_they_are_walked<S: Ledger>(store: &S) {
    let clock = ManualClock::starting_now();
    let ledger = store.ledger().await;
    let k = key("deep");
    let a = OwnerToken::generate();
    let mut deep = Attr::n(1);
    for _ in 0..1_000 {
        deep = Attr::L(vec![deep]);
    }
    let put = Write::put(&ledger, [("account", Attr::s("acct-1")), ("deep", deep)]);
    match store
        .commit_fresh(&commit_request(&clock, &k, &a, vec![put]))
        .await
    {
        Err(StoreError::InvalidRequest { .. }) => {}
        other => panic!("expected an invalid request, got {other:?}"),
    }
    assert_eq!(store.get(&k).await.unwrap(), None);
}

/// Generates one `#[tokio::test]` per [transactional contract](crate::testing::transactional)
/// case, in a module `transactional`; `$store` is an expression giving an
/// `Option<impl Ledger>` (`None` skips the cases). Needs `tokio` with `macros` and `rt`.
#[macro_export]
macro_rules! transactional_contract_suite {
    ($store:expr) => {
        $crate::transactional_contract_suite!(@cases $store;
            a_lease_commit_applies_the_writes_with_the_record,
            a_lease_commit_by_another_owner_applies_nothing,
            a_fresh_commit_resent_with_a_later_now_finds_its_own_record,
            a_fresh_commit_is_refused_by_a_live_record_and_takes_over_an_expired_one,
            a_failed_business_condition_applies_nothing,
            invalid_writes_are_refused_as_invalid,
            writes_nested_too_deep_are_refused_before_they_are_walked,
        );
    };
    (@cases $store:expr; $($case:ident),* $(,)?) => {
        mod transactional {
            $(
                #[tokio::test]
                async fn $case() {
                    if let Some(store) = $store {
                        $crate::testing::transactional::$case(&store).await;
                    }
                }
            )*
        }
    };
}
