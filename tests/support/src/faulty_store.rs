//! A store wrapper that injects faults, queued, each for the next call of its kind (a slow
//! extension for every one): an answer lost after the call was applied (as when the SDK
//! resends a request whose response never came), an answer that never comes (a hung
//! connection), a transient failure, a refusal as invalid,
//! a panic, a slow or lost-lease heartbeat, a commit cut by a kill, meeting a concurrent
//! transaction or resent with another request token. It counts every call.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lambda_idempotency::key::IdempotencyKey;
use lambda_idempotency::record::{OwnerToken, Record, Status};
use lambda_idempotency::store::{
    Acquire, AcquireRequest, Commit, CommitRequest, CompleteRequest, ExtendRequest, Fenced, Store,
    StoreError, TransactionScope, TransactionalStore,
};

/// A fault for the next call of its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inject {
    /// The acquire is applied, its answer lost, and the SDK sends it again: the caller gets
    /// the second answer.
    AcquireResent,
    /// The acquire is applied, then the call fails (the answer never came, no resend).
    AcquireFailsAfterApply,
    /// The acquire fails before reaching the store.
    AcquireFails,
    /// The acquire is applied, and its answer never comes (a connection that hangs, past
    /// any client timeout).
    AcquireHangs,
    /// The completion fails before reaching the store.
    CompleteFails,
    /// The completion is applied, its answer lost, and it is sent again.
    CompleteResent,
    /// The completion answers that the lease was lost (taken over meanwhile).
    CompleteLeaseLost,
    /// The completion is applied, and its answer takes this long (tokio time) to come.
    CompleteAnswerSlow(Duration),
    /// The completion is refused as invalid (DynamoDB's `ValidationException`): nothing is
    /// applied.
    CompleteInvalid,
    /// The completion panics (a user's store with a bug).
    CompletePanics,
    /// The completion is applied, and its answer never comes.
    CompleteHangs,
    /// Every extension takes this long (then is applied).
    ExtendSlow(Duration),
    /// The extension answers that the lease is lost.
    ExtendLeaseLost,
    /// The next `get_many` (a batch's pre-check) fails.
    GetManyFails,
    /// The next `get_many` panics (a user's store with a bug).
    GetManyPanics,
    /// The next `get_many` takes this long (tokio time), then answers.
    GetManySlow(Duration),
    /// The next `get_many` answers each record twice, breaking its contract: first a copy
    /// in progress under a lease that ends at `lease_ends_ms` (epoch ms), then the record.
    GetManyLiveCopyFirst {
        /// When the copy's lease ends.
        lease_ends_ms: u64,
    },
    /// The process dies before the commit is sent: it never answers, nothing is applied.
    CommitNeverSent,
    /// The commit is applied, then the process dies before it sees the answer: it never
    /// answers.
    CommitAppliedThenDies,
    /// The commit is applied, but its answer is lost (a connection reset): the caller gets
    /// a store fault.
    CommitAnswerLost,
    /// The commit meets a concurrent transaction (DynamoDB's `TransactionConflict`) and
    /// applies nothing. Queue it once per commit it strikes.
    CommitConflicts,
    /// The commit is sent a millisecond later than asked, so with another request token:
    /// after `CommitAnswerLost`, a resend DynamoDB no longer recognises by its token (it
    /// keeps one for ten minutes), which meets the record the first send wrote.
    CommitAtAFreshTime,
}

/// The calls the wrapper saw, by kind.
#[derive(Debug, Default)]
pub struct Calls {
    /// `acquire` and `acquire_in` calls.
    pub acquire: AtomicUsize,
    /// `complete` calls.
    pub complete: AtomicUsize,
    /// `extend` calls.
    pub extend: AtomicUsize,
    /// `release` calls.
    pub release: AtomicUsize,
    /// `get_many` calls.
    pub get_many: AtomicUsize,
    /// `get` calls.
    pub get: AtomicUsize,
    /// `commit`, `commit_fresh` and `complete_in` calls.
    pub commit: AtomicUsize,
}

/// `inner` with faults injected.
#[derive(Debug, Clone)]
pub struct FaultyStore<S> {
    /// The wrapped store.
    pub inner: S,
    plan: Arc<Mutex<VecDeque<Inject>>>,
    /// Every call, counted.
    pub calls: Arc<Calls>,
}

fn down() -> StoreError {
    StoreError::Unavailable("injected: the store did not answer".into())
}

impl<S: Store> FaultyStore<S> {
    /// `inner`, no fault queued.
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            plan: Arc::default(),
            calls: Arc::default(),
        }
    }

    /// Queues a fault.
    pub fn inject(&self, fault: Inject) {
        self.plan.lock().unwrap().push_back(fault);
    }

    /// Takes the first queued fault matching `pick`.
    fn take(&self, pick: impl Fn(&Inject) -> bool) -> Option<Inject> {
        let mut plan = self.plan.lock().unwrap();
        let at = plan.iter().position(pick)?;
        plan.remove(at)
    }

    /// Faults not yet used.
    pub fn pending(&self) -> Vec<Inject> {
        self.plan.lock().unwrap().iter().cloned().collect()
    }
}

impl<S: Store> Store for FaultyStore<S> {
    async fn acquire(&self, request: &AcquireRequest) -> Result<Acquire, StoreError> {
        self.calls.acquire.fetch_add(1, Ordering::SeqCst);
        match self.take(|f| {
            matches!(
                f,
                Inject::AcquireResent
                    | Inject::AcquireFailsAfterApply
                    | Inject::AcquireFails
                    | Inject::AcquireHangs
            )
        }) {
            Some(Inject::AcquireHangs) => {
                self.inner.acquire(request).await?;
                std::future::pending().await
            }
            Some(Inject::AcquireResent) => {
                self.inner.acquire(request).await?;
                self.inner.acquire(request).await
            }
            Some(Inject::AcquireFails) => Err(down()),
            Some(_) => {
                self.inner.acquire(request).await?;
                Err(down())
            }
            None => self.inner.acquire(request).await,
        }
    }

    async fn complete(&self, request: &CompleteRequest) -> Result<Fenced, StoreError> {
        self.calls.complete.fetch_add(1, Ordering::SeqCst);
        match self.take(|f| {
            matches!(
                f,
                Inject::CompleteFails
                    | Inject::CompleteResent
                    | Inject::CompleteLeaseLost
                    | Inject::CompleteAnswerSlow(_)
                    | Inject::CompleteInvalid
                    | Inject::CompletePanics
                    | Inject::CompleteHangs
            )
        }) {
            Some(Inject::CompleteHangs) => {
                self.inner.complete(request).await?;
                std::future::pending().await
            }
            Some(Inject::CompleteFails) => Err(down()),
            Some(Inject::CompleteInvalid) => Err(StoreError::InvalidRequest {
                write_index: None,
                reason: "injected: ValidationException".into(),
            }),
            Some(Inject::CompletePanics) => panic!("injected: the store panicked"),
            Some(Inject::CompleteLeaseLost) => Ok(Fenced::LeaseLost),
            Some(Inject::CompleteAnswerSlow(by)) => {
                let answer = self.inner.complete(request).await;
                tokio::time::sleep(by).await;
                answer
            }
            Some(_) => {
                self.inner.complete(request).await?;
                self.inner.complete(request).await
            }
            None => self.inner.complete(request).await,
        }
    }

    async fn extend(&self, request: &ExtendRequest) -> Result<Fenced, StoreError> {
        self.calls.extend.fetch_add(1, Ordering::SeqCst);
        let slow = self.plan.lock().unwrap().iter().find_map(|f| match f {
            Inject::ExtendSlow(by) => Some(*by),
            _ => None,
        });
        if let Some(by) = slow {
            tokio::time::sleep(by).await;
        }
        if self.take(|f| *f == Inject::ExtendLeaseLost).is_some() {
            return Ok(Fenced::LeaseLost);
        }
        self.inner.extend(request).await
    }

    async fn release(
        &self,
        key: &IdempotencyKey,
        owner: &OwnerToken,
    ) -> Result<Fenced, StoreError> {
        self.calls.release.fetch_add(1, Ordering::SeqCst);
        self.inner.release(key, owner).await
    }

    async fn get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        self.calls.get.fetch_add(1, Ordering::SeqCst);
        self.inner.get(key).await
    }

    async fn get_many(&self, keys: &[IdempotencyKey]) -> Result<Vec<Record>, StoreError> {
        self.calls.get_many.fetch_add(1, Ordering::SeqCst);
        let injected = self.take(|f| {
            matches!(
                f,
                Inject::GetManyFails
                    | Inject::GetManyPanics
                    | Inject::GetManySlow(_)
                    | Inject::GetManyLiveCopyFirst { .. }
            )
        });
        match injected {
            Some(Inject::GetManyPanics) => panic!("injected: get_many panicked"),
            Some(Inject::GetManySlow(delay)) => {
                tokio::time::sleep(delay).await;
                self.inner.get_many(keys).await
            }
            Some(Inject::GetManyLiveCopyFirst { lease_ends_ms }) => {
                let mut answer = Vec::new();
                for record in self.inner.get_many(keys).await? {
                    let mut copy = record.clone();
                    copy.status = Status::InProgress;
                    copy.data = None;
                    copy.lease_expiration_ms = Some(lease_ends_ms);
                    answer.extend([copy, record]);
                }
                Ok(answer)
            }
            Some(_) => Err(down()),
            None => self.inner.get_many(keys).await,
        }
    }
}

/// A final write sent at a time of its own: its `now` enters its request token.
trait SentAt: Clone {
    /// The same write, a millisecond later.
    fn later(&self) -> Self;
}

impl SentAt for CommitRequest {
    fn later(&self) -> Self {
        let mut later = self.clone();
        later.now += Duration::from_millis(1);
        later
    }
}

impl SentAt for CompleteRequest {
    fn later(&self) -> Self {
        let mut later = self.clone();
        later.now += Duration::from_millis(1);
        later
    }
}

impl<S: Store> FaultyStore<S> {
    /// One commit of `request` through `send`, with the first queued commit fault.
    async fn commit_with_fault<R, Fut>(
        &self,
        request: &R,
        send: impl Fn(R) -> Fut,
    ) -> Result<Commit, StoreError>
    where
        R: SentAt,
        Fut: Future<Output = Result<Commit, StoreError>>,
    {
        self.calls.commit.fetch_add(1, Ordering::SeqCst);
        let injected = self.take(|f| {
            matches!(
                f,
                Inject::CommitNeverSent
                    | Inject::CommitAppliedThenDies
                    | Inject::CommitAnswerLost
                    | Inject::CommitConflicts
                    | Inject::CommitAtAFreshTime
            )
        });
        // Sends the commit, which the fault injected on it expects to apply.
        let apply = |request: &R| {
            let sent = send(request.clone());
            async move {
                let applied = sent.await.unwrap();
                assert_eq!(
                    applied,
                    Commit::Applied,
                    "injected on a commit that applies"
                );
            }
        };
        match injected {
            Some(Inject::CommitNeverSent) => std::future::pending().await,
            Some(Inject::CommitAppliedThenDies) => {
                apply(request).await;
                std::future::pending().await
            }
            Some(Inject::CommitAnswerLost) => {
                apply(request).await;
                Err(StoreError::Unavailable(
                    "injected: connection reset by peer".into(),
                ))
            }
            Some(Inject::CommitConflicts) => Ok(Commit::Conflict),
            Some(_) => send(request.later()).await,
            None => send(request.clone()).await,
        }
    }
}

impl<S: TransactionalStore> TransactionalStore for FaultyStore<S> {
    async fn commit(&self, request: &CommitRequest) -> Result<Commit, StoreError> {
        self.commit_with_fault(request, |request| async move {
            self.inner.commit(&request).await
        })
        .await
    }

    async fn commit_fresh(&self, request: &CommitRequest) -> Result<Commit, StoreError> {
        self.commit_with_fault(request, |request| async move {
            self.inner.commit_fresh(&request).await
        })
        .await
    }
}

/// The commit faults strike `complete_in`, the write that commits the transaction.
impl<S: TransactionScope> TransactionScope for FaultyStore<S> {
    type Transaction = S::Transaction;

    fn check_transactions(&self) -> Result<(), StoreError> {
        self.inner.check_transactions()
    }

    async fn begin(&self, hold_for: Duration) -> Result<S::Transaction, StoreError> {
        self.inner.begin(hold_for).await
    }

    async fn acquire_in(
        &self,
        transaction: &S::Transaction,
        request: &AcquireRequest,
    ) -> Result<Acquire, StoreError> {
        self.calls.acquire.fetch_add(1, Ordering::SeqCst);
        self.inner.acquire_in(transaction, request).await
    }

    async fn complete_in(
        &self,
        transaction: &S::Transaction,
        request: &CompleteRequest,
    ) -> Result<Commit, StoreError> {
        self.commit_with_fault(request, |request| async move {
            self.inner.complete_in(transaction, &request).await
        })
        .await
    }

    async fn rollback(&self, transaction: &S::Transaction) {
        self.inner.rollback(transaction).await;
    }
}
