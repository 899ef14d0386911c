//! Transactional completion against DynamoDB Local, in both modes: the ledger write and the
//! idempotency record commit together, so the effect happens exactly once even when the
//! process dies at any step, a commit's response is lost, or the lease is lost.
use lambda_idempotency_test_support as support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use aws_sdk_dynamodb::Client;
use lambda_idempotency::clock::{epoch_ms, epoch_secs, Clock, ManualClock};
use lambda_idempotency::key::{IdempotencyKey, KeyExtractor};
use lambda_idempotency::record::{OwnerToken, Record};
use lambda_idempotency::sqs::{BatchProcessor, BatchReport};
use lambda_idempotency::store::{
    Acquire, AcquireRequest, Attr, Commit, CommitRequest, CompleteRequest, DynamoDbStore,
    ExtendRequest, Fenced, Store, StoreError, TransactionalStore, Write,
};
use lambda_idempotency::validation::PayloadValidation;
use lambda_idempotency::{
    Completion, Config, Error, IdempotencyLayer, IdempotencyMode, Outcome, Permanent,
};
use order_consumer::{ledger_credit, order_key, Order, KEY_PREFIX};
use support::dynamodb::{balance, counted_client, create_table, create_table_keyed, CallCounter};
use support::{invocation, load_event, outcomes};

const MODES: [IdempotencyMode; 2] = [IdempotencyMode::Lease, IdempotencyMode::Optimistic];
/// The lease cap of the test containers: shorter than an invocation, so a handler can
/// outlive its lease without outliving its invocation.
const LEASE_CAP: Duration = Duration::from_secs(10);
const REMAINING: Duration = Duration::from_secs(30);

/// Where a fault strikes a commit.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    /// The process dies before the commit is sent.
    DieBeforeCommit,
    /// The commit is applied, then the process dies before it sees the response.
    DieAfterCommit,
    /// The commit is applied, but its response is lost (connection reset): the toolkit
    /// sends it again.
    LoseResponse,
    /// The next commits meet a concurrent transaction (DynamoDB's `TransactionConflict`)
    /// and apply nothing.
    Conflicts(usize),
}

/// A `DynamoDbStore` with a fault injected into the next commit.
#[derive(Clone)]
struct FaultyStore {
    inner: DynamoDbStore,
    fault: Arc<Mutex<Option<Fault>>>,
}

impl FaultyStore {
    fn take_fault(&self) -> Option<Fault> {
        let mut fault = self.fault.lock().unwrap();
        match *fault {
            Some(Fault::Conflicts(n)) if n > 1 => {
                *fault = Some(Fault::Conflicts(n - 1));
                Some(Fault::Conflicts(n))
            }
            _ => fault.take(),
        }
    }

    async fn faulty(
        &self,
        commit: impl std::future::Future<Output = Result<Commit, StoreError>>,
    ) -> Result<Commit, StoreError> {
        match self.take_fault() {
            None => commit.await,
            Some(Fault::DieBeforeCommit) => std::future::pending().await,
            Some(Fault::DieAfterCommit) => {
                let applied = commit.await;
                assert_eq!(applied.unwrap(), Commit::Applied);
                std::future::pending().await
            }
            Some(Fault::Conflicts(_)) => Ok(Commit::Conflict),
            Some(Fault::LoseResponse) => {
                let applied = commit.await;
                assert_eq!(applied.unwrap(), Commit::Applied);
                Err(StoreError::Unavailable("connection reset by peer".into()))
            }
        }
    }
}

impl Store for FaultyStore {
    async fn acquire(&self, request: &AcquireRequest) -> Result<Acquire, StoreError> {
        self.inner.acquire(request).await
    }
    async fn complete(&self, request: &CompleteRequest) -> Result<Fenced, StoreError> {
        self.inner.complete(request).await
    }
    async fn extend(&self, request: &ExtendRequest) -> Result<Fenced, StoreError> {
        self.inner.extend(request).await
    }
    async fn release(
        &self,
        key: &IdempotencyKey,
        owner: &OwnerToken,
    ) -> Result<Fenced, StoreError> {
        self.inner.release(key, owner).await
    }
    async fn get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        self.inner.get(key).await
    }
}

impl TransactionalStore for FaultyStore {
    async fn commit(&self, request: &CommitRequest) -> Result<Commit, StoreError> {
        self.faulty(self.inner.commit(request)).await
    }
    async fn commit_fresh(&self, request: &CommitRequest) -> Result<Commit, StoreError> {
        self.faulty(self.inner.commit_fresh(request)).await
    }
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Applied {
    account: String,
    amount: i64,
}

/// What the handler does besides building its ledger write.
type Hook = Arc<dyn Fn(&Order) -> Result<(), Permanent> + Send + Sync>;

struct Ledger {
    client: Client,
    counter: CallCounter,
    store: FaultyStore,
    ledger_table: String,
    clock: ManualClock,
    handler_runs: Arc<Mutex<usize>>,
}

impl Ledger {
    async fn new() -> Option<Self> {
        let counter = CallCounter::default();
        let client = counted_client(&counter).await?;
        let idempotency_table = create_table(&client).await;
        let ledger_table = create_table_keyed(&client, "ledger", "account").await;
        Some(Self {
            store: FaultyStore {
                inner: DynamoDbStore::new(client.clone(), idempotency_table),
                fault: Arc::default(),
            },
            client,
            counter,
            ledger_table,
            clock: ManualClock::starting_now(),
            handler_runs: Arc::default(),
        })
    }

    fn inject(&self, fault: Fault) {
        *self.store.fault.lock().unwrap() = Some(fault);
    }

    /// A fresh container: its own layer, no cache.
    fn container(
        &self,
        mode: IdempotencyMode,
        hook: Hook,
    ) -> BatchProcessor<
        impl tower::Service<
                lambda_runtime::LambdaEvent<SqsMessage>,
                Response = lambda_idempotency::Processed<Applied>,
                Error = Error,
            > + Clone
            + Send
            + Sync
            + 'static,
        ManualClock,
    > {
        let ledger_table = self.ledger_table.clone();
        let runs = self.handler_runs.clone();
        let layer = IdempotencyLayer::new(self.store.clone())
            .with_key(order_key())
            .with_clock(self.clock.clone())
            .with_config(
                Config::new()
                    .with_key_prefix(KEY_PREFIX)
                    .with_mode(mode)
                    .with_max_lease(LEASE_CAP)
                    .with_payload_validation(PayloadValidation::Body),
            );
        let handler = layer
            .clone()
            .with_writes()
            .handler(move |message: SqsMessage| {
                let ledger_table = ledger_table.clone();
                let runs = runs.clone();
                let hook = hook.clone();
                async move {
                    *runs.lock().unwrap() += 1;
                    let order: Order = serde_json::from_str(message.body.as_deref().unwrap_or(""))
                        .map_err(lambda_idempotency::BoxError::from)?;
                    hook(&order)?;
                    let credit = ledger_credit(ledger_table, &order);
                    Ok::<_, lambda_idempotency::BoxError>(
                        Completion::new(Applied {
                            account: order.account,
                            amount: order.amount,
                        })
                        .with_write(credit),
                    )
                }
            });
        BatchProcessor::new(handler).with_clock(self.clock.clone())
    }

    async fn deliver(&self, mode: IdempotencyMode, event: SqsEvent) -> BatchReport<Applied> {
        self.container(mode, Arc::new(|_| Ok(())))
            .process(invocation(event, self.clock.now(), REMAINING))
            .await
    }

    /// Delivers `event`, but the container dies (its future is dropped) if it has not
    /// answered within a second: nothing after that point runs, as under `kill -9`.
    async fn deliver_and_die(&self, mode: IdempotencyMode, event: SqsEvent) {
        let processor = self.container(mode, Arc::new(|_| Ok(())));
        let run = processor.process(invocation(event, self.clock.now(), REMAINING));
        assert!(
            tokio::time::timeout(Duration::from_secs(1), run)
                .await
                .is_err(),
            "the container was meant to die"
        );
    }

    async fn balance(&self, account: &str) -> i64 {
        balance(&self.client, &self.ledger_table, account).await
    }
}

fn one_record(name: &str, index: usize) -> SqsEvent {
    let mut event = load_event(name);
    let record = event.records.remove(index);
    event.records = vec![record];
    event
}

#[tokio::test]
async fn batch_and_redelivery_apply_each_event_once() {
    for mode in MODES {
        let Some(ledger) = Ledger::new().await else {
            return;
        };
        let first = ledger.deliver(mode, load_event("batch.json")).await;
        assert_eq!(outcomes(&first), [Outcome::Executed; 3], "{mode:?}");
        let again = ledger
            .deliver(mode, load_event("batch_redelivered.json"))
            .await;
        assert_eq!(outcomes(&again), [Outcome::Replayed; 3], "{mode:?}");
        let retry = ledger
            .deliver(mode, load_event("producer_retry.json"))
            .await;
        assert_eq!(outcomes(&retry), [Outcome::Replayed], "{mode:?}");
        assert_eq!(ledger.balance("acct-alice").await, 20, "{mode:?}");
        assert_eq!(ledger.balance("acct-bob").await, 40, "{mode:?}");
        // Optimistic mode computes duplicates again and learns from the refused commit that
        // they are duplicates; lease mode never runs the handler for them.
        let runs = *ledger.handler_runs.lock().unwrap();
        match mode {
            IdempotencyMode::Lease => assert_eq!(runs, 3),
            _ => assert_eq!(runs, 7),
        }
    }
}

#[tokio::test]
async fn dynamodb_calls_per_record_are_the_minimum_for_each_mode() {
    for (mode, fresh_calls) in [
        (IdempotencyMode::Optimistic, vec![("TransactWriteItems", 3)]),
        (
            IdempotencyMode::Lease,
            vec![("PutItem", 3), ("TransactWriteItems", 3)],
        ),
    ] {
        let Some(ledger) = Ledger::new().await else {
            return;
        };
        ledger.counter.reset();
        ledger.deliver(mode, load_event("batch.json")).await;
        let calls: Vec<(&str, usize)> = ledger.counter.all().into_iter().collect();
        assert_eq!(calls, fresh_calls, "{mode:?}: fresh records");
        // Duplicates: at most one call each.
        ledger.counter.reset();
        ledger
            .deliver(mode, load_event("batch_redelivered.json"))
            .await;
        let duplicate_calls: usize = ledger.counter.all().values().sum();
        assert_eq!(duplicate_calls, 3, "{mode:?}: duplicates");
    }
}

#[tokio::test]
async fn a_kill_before_the_commit_applies_the_effect_once_after_redelivery() {
    for mode in MODES {
        let Some(ledger) = Ledger::new().await else {
            return;
        };
        ledger.inject(Fault::DieBeforeCommit);
        ledger
            .deliver_and_die(mode, one_record("batch.json", 0))
            .await;
        assert_eq!(ledger.balance("acct-alice").await, 0, "{mode:?}");
        // SQS redelivers after the visibility timeout; by then the dead lease has elapsed.
        ledger.clock.advance(REMAINING + Duration::from_secs(1));
        let report = ledger.deliver(mode, one_record("batch.json", 0)).await;
        assert_eq!(outcomes(&report), [Outcome::Executed], "{mode:?}");
        assert_eq!(ledger.balance("acct-alice").await, 25, "{mode:?}");
    }
}

#[tokio::test]
async fn a_kill_after_the_commit_replays_after_redelivery() {
    for mode in MODES {
        let Some(ledger) = Ledger::new().await else {
            return;
        };
        ledger.inject(Fault::DieAfterCommit);
        ledger
            .deliver_and_die(mode, one_record("batch.json", 0))
            .await;
        assert_eq!(ledger.balance("acct-alice").await, 25, "{mode:?}");
        ledger.clock.advance(REMAINING + Duration::from_secs(1));
        let report = ledger.deliver(mode, one_record("batch.json", 0)).await;
        assert_eq!(outcomes(&report), [Outcome::Replayed], "{mode:?}");
        assert_eq!(ledger.balance("acct-alice").await, 25, "{mode:?}");
        if mode == IdempotencyMode::Lease {
            assert_eq!(*ledger.handler_runs.lock().unwrap(), 1);
        }
    }
}

#[tokio::test]
async fn a_commit_whose_response_was_lost_is_recognised_not_applied_twice() {
    for mode in MODES {
        let Some(ledger) = Ledger::new().await else {
            return;
        };
        ledger.inject(Fault::LoseResponse);
        let report = ledger.deliver(mode, one_record("batch.json", 0)).await;
        assert_eq!(outcomes(&report), [Outcome::Executed], "{mode:?}");
        assert_eq!(ledger.balance("acct-alice").await, 25, "{mode:?}");
        let again = ledger.deliver(mode, one_record("batch.json", 0)).await;
        assert_eq!(outcomes(&again), [Outcome::Replayed], "{mode:?}");
        assert_eq!(ledger.balance("acct-alice").await, 25, "{mode:?}");
    }
}

#[tokio::test]
async fn a_lease_lost_to_another_invocation_applies_nothing() {
    let Some(ledger) = Ledger::new().await else {
        return;
    };
    let (store, clock) = (ledger.store.inner.clone(), ledger.clock.clone());
    let hook: Hook = Arc::new(move |order: &Order| {
        // The handler outlives its lease (not the invocation); another invocation takes the
        // key over.
        clock.advance(LEASE_CAP + Duration::from_secs(1));
        let now = clock.now();
        let request = AcquireRequest {
            key: IdempotencyKey::derive(KEY_PREFIX, order.event_id.as_bytes()),
            owner: OwnerToken::generate(),
            now,
            lease_expiration_ms: epoch_ms(now + REMAINING),
            expiration_secs: epoch_secs(now + Duration::from_secs(3600)),
            validation: None,
        };
        let store = store.clone();
        let taken = std::thread::spawn(move || {
            tokio::runtime::Runtime::new()
                .unwrap()
                .block_on(store.acquire(&request))
        })
        .join()
        .unwrap();
        assert_eq!(taken.unwrap(), Acquire::Acquired);
        Ok(())
    });
    let report = ledger
        .container(IdempotencyMode::Lease, hook)
        .process(invocation(
            one_record("batch.json", 0),
            ledger.clock.now(),
            REMAINING,
        ))
        .await;
    assert_eq!(outcomes(&report), [Outcome::LeaseLost]);
    assert_eq!(report.response.batch_item_failures.len(), 1);
    assert_eq!(ledger.balance("acct-alice").await, 0, "nothing applied");
}

#[tokio::test]
async fn a_failed_business_condition_applies_nothing_and_is_not_retried_blindly() {
    for mode in MODES {
        let Some(ledger) = Ledger::new().await else {
            return;
        };
        let layer = IdempotencyLayer::new(ledger.store.clone())
            .with_clock(ledger.clock.clone())
            .with_config(Config::new().with_mode(mode));
        let table = ledger.ledger_table.clone();
        let processor =
            BatchProcessor::new(layer.clone().with_writes().handler(move |_m: SqsMessage| {
                let table = table.clone();
                async move {
                    // Debit an account only if it exists: here it does not.
                    let debit =
                        Write::update(table, [("account", Attr::s("acct-ghost"))], "ADD #b :a")
                            .condition("attribute_exists(account)")
                            .name("#b", "balance")
                            .value(":a", Attr::n(-10));
                    Ok::<_, std::io::Error>(Completion::new(()).with_write(debit))
                }
            }))
            .with_clock(ledger.clock.clone());
        let report = processor
            .process(invocation(
                one_record("batch.json", 0),
                ledger.clock.now(),
                REMAINING,
            ))
            .await;
        assert_eq!(outcomes(&report), [Outcome::Rejected], "{mode:?}");
        assert!(
            matches!(
                report.records[0].error,
                Some(Error::ConditionFailed { write_index: 0, .. })
            ),
            "{mode:?}: {:?}",
            report.records[0].error
        );
        assert_eq!(ledger.balance("acct-ghost").await, 0);
        // No record was left behind: the lease (lease mode) was released.
        let key = IdempotencyKey::derive(
            lambda_idempotency::idempotent::FALLBACK_KEY_PREFIX,
            b"0b1f5a52-7d3e-4c1a-9f60-2a51c1d0e001",
        );
        assert_eq!(
            ledger.store.inner.get(&key).await.unwrap(),
            None,
            "{mode:?}"
        );
    }
}

#[tokio::test]
async fn transactions_over_dynamodb_limits_fail_with_a_clear_error() {
    let Some(ledger) = Ledger::new().await else {
        return;
    };
    let layer = IdempotencyLayer::new(ledger.store.clone()).with_clock(ledger.clock.clone());
    let table = ledger.ledger_table.clone();
    let processor =
        BatchProcessor::new(layer.clone().with_writes().handler(move |_m: SqsMessage| {
            let table = table.clone();
            async move {
                // 100 writes plus the record: one over the limit.
                let writes = (0..100)
                    .map(|i| Write::put(table.clone(), [("account", Attr::s(format!("a{i}")))]));
                Ok::<_, std::io::Error>(writes.fold(Completion::new(()), Completion::with_write))
            }
        }))
        .with_clock(ledger.clock.clone());
    let report = processor
        .process(invocation(
            one_record("batch.json", 0),
            ledger.clock.now(),
            REMAINING,
        ))
        .await;
    // The handler's fault, not an outage: rejected, not retried.
    assert_eq!(outcomes(&report), [Outcome::Rejected]);
    let error = report.records[0].error.as_ref().unwrap();
    assert_eq!(error.error_type(), "Idempotency.TransactionTooLarge");
    assert!(
        matches!(
            error,
            Error::Store(StoreError::TransactionTooLarge {
                items: 101,
                item_limit: 100,
                ..
            })
        ),
        "{error:?}"
    );
    assert_eq!(ledger.balance("a0").await, 0);
}

#[tokio::test]
async fn a_permanent_failure_is_stored_acknowledged_and_replayed() {
    for mode in MODES {
        let Some(ledger) = Ledger::new().await else {
            return;
        };
        let hook: Hook = Arc::new(|order: &Order| {
            if order.amount < 0 {
                return Err(Permanent::new(format!(
                    "refunds are not allowed: {}",
                    order.amount
                )));
            }
            Ok(())
        });
        let event = load_event("batch.json");
        let report = ledger
            .container(mode, hook.clone())
            .process(invocation(event.clone(), ledger.clock.now(), REMAINING))
            .await;
        assert_eq!(
            outcomes(&report),
            [
                Outcome::Executed,
                Outcome::Executed,
                Outcome::FailedPermanently
            ],
            "{mode:?}"
        );
        assert!(
            report.response.batch_item_failures.is_empty(),
            "acknowledged"
        );
        let runs = *ledger.handler_runs.lock().unwrap();
        let again = ledger
            .container(mode, hook)
            .process(invocation(event, ledger.clock.now(), REMAINING))
            .await;
        assert_eq!(outcomes(&again)[2], Outcome::FailedPermanently, "{mode:?}");
        match &again.records[2].error {
            Some(Error::Permanent { message, replayed }) => {
                // The stored text, not the message (which may quote the input).
                assert_eq!(
                    message,
                    lambda_idempotency::idempotent::UNSTORED_FAILURE_MESSAGE
                );
                assert!(*replayed);
            }
            other => panic!("{mode:?}: {other:?}"),
        }
        if mode == IdempotencyMode::Lease {
            assert_eq!(*ledger.handler_runs.lock().unwrap(), runs, "not run again");
        }
        assert_eq!(ledger.balance("acct-alice").await, 25, "{mode:?}");
    }
}

#[tokio::test]
async fn a_tampered_duplicate_is_rejected_and_never_applied() {
    for mode in MODES {
        let Some(ledger) = Ledger::new().await else {
            return;
        };
        ledger.deliver(mode, load_event("batch.json")).await;
        let report = ledger.deliver(mode, load_event("tampered.json")).await;
        assert_eq!(outcomes(&report), [Outcome::Rejected], "{mode:?}");
        assert!(matches!(
            report.records[0].error,
            Some(Error::PayloadMismatch { .. })
        ));
        assert_eq!(report.response.batch_item_failures.len(), 1);
        assert_eq!(ledger.balance("acct-bob").await, 40, "{mode:?}");
    }
}

#[tokio::test]
async fn the_order_key_prefers_the_attribute_then_the_event_id() {
    let key = order_key();
    let event = load_event("producer_retry.json");
    assert_eq!(key.key_material(&event.records[0]).unwrap(), b"evt-1002");
}

#[tokio::test]
async fn a_transaction_conflict_is_retried_then_reported_without_applying_anything() {
    for mode in MODES {
        let Some(ledger) = Ledger::new().await else {
            return;
        };
        // A passing conflict: retried at once with the same request token, applied once.
        ledger.inject(Fault::Conflicts(1));
        let report = ledger.deliver(mode, one_record("batch.json", 0)).await;
        assert_eq!(outcomes(&report), [Outcome::Executed], "{mode:?}");
        assert_eq!(ledger.balance("acct-alice").await, 25, "{mode:?}");
        // A lasting one: after the commit attempts (3), reported for retry, nothing applied,
        // and nothing left locked: the next delivery commits.
        ledger.inject(Fault::Conflicts(3));
        let report = ledger.deliver(mode, one_record("batch.json", 1)).await;
        assert_eq!(outcomes(&report), [Outcome::Locked], "{mode:?}");
        assert!(matches!(
            report.records[0].error,
            Some(Error::Conflict { .. })
        ));
        assert_eq!(ledger.balance("acct-bob").await, 0, "{mode:?}");
        let report = ledger.deliver(mode, one_record("batch.json", 1)).await;
        assert_eq!(outcomes(&report), [Outcome::Executed], "{mode:?}");
        assert_eq!(ledger.balance("acct-bob").await, 40, "{mode:?}");
    }
}
