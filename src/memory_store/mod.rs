//! [`InMemoryStore`]: the embedded store, for local runs and tests.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::key::IdempotencyKey;
use crate::record::{OwnerToken, Record, Status};
use crate::record_item::{
    check_item_size, completed_size_bytes, record_size_bytes, AttributeNames,
};
use crate::store::{
    is_our_completion, Acquire, AcquireRequest, CompleteRequest, ExtendRequest, Fenced, Store,
    StoreError,
};

/// An in-process store with the same semantics as [`DynamoDbStore`](crate::DynamoDbStore).
///
/// Records live as long as the store (and its clones, which share them). Use it for quick
/// local runs, unit tests and examples; it does not coordinate separate processes.
///
/// [`set_unavailable`](InMemoryStore::set_unavailable) makes every call fail, to test how a
/// handler behaves when the store is down.
#[derive(Debug, Clone, Default)]
pub struct InMemoryStore {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    records: Mutex<HashMap<IdempotencyKey, Record>>,
    unavailable: AtomicBool,
}

impl InMemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes every later call fail with [`StoreError::Unavailable`] (`true`) or work again
    /// (`false`).
    pub fn set_unavailable(&self, unavailable: bool) {
        self.inner.unavailable.store(unavailable, Ordering::SeqCst);
    }

    /// A copy of every stored record, for inspection in tests.
    pub fn records(&self) -> Vec<Record> {
        let mut all: Vec<Record> = self.lock().values().cloned().collect();
        all.sort_by(|a, b| a.key.cmp(&b.key));
        all
    }

    /// Writes `record` as it is, bypassing the protocol, as another tool (or an earlier
    /// version) might have written it: for tests of what the stores do with such records.
    pub fn insert_record(&self, record: Record) {
        self.lock().insert(record.key.clone(), record);
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<IdempotencyKey, Record>> {
        // A panic while holding the lock cannot leave a half-written record: every
        // mutation is a single insert or remove.
        self.inner
            .records
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn check_available(&self) -> Result<(), StoreError> {
        if self.inner.unavailable.load(Ordering::SeqCst) {
            Err(StoreError::Unavailable(
                "in-memory store set unavailable".into(),
            ))
        } else {
            Ok(())
        }
    }

    fn acquire_now(&self, request: &AcquireRequest) -> Result<Acquire, StoreError> {
        self.check_available()?;
        let record = Record {
            key: request.key.clone(),
            status: Status::InProgress,
            expiration_secs: request.expiration_secs,
            lease_expiration_ms: Some(request.lease_expiration_ms),
            owner: Some(request.owner.clone()),
            data: None,
            validation: request.validation.clone(),
        };
        // The same item size limit, counted the same way, as DynamoDB.
        check_item_size(record_size_bytes(&AttributeNames::default(), &record))?;
        let mut records = self.lock();
        if let Some(existing) = records.get(&request.key) {
            if existing.is_held_by(&request.owner) && !existing.can_be_taken_over(request.now) {
                // Sent again after a lost answer: the lease is already ours.
                return Ok(Acquire::Acquired);
            }
            if !existing.can_be_taken_over(request.now) {
                return Ok(Acquire::Existing(existing.clone()));
            }
        }
        records.insert(request.key.clone(), record);
        Ok(Acquire::Acquired)
    }

    fn complete_now(&self, request: &CompleteRequest) -> Result<Fenced, StoreError> {
        self.check_available()?;
        check_item_size(completed_size_bytes(&AttributeNames::default(), request))?;
        let mut records = self.lock();
        match records.get_mut(&request.key) {
            Some(record) if record.is_held_by(&request.owner) => {
                record.status = request.status;
                record.data = Some(request.data.clone());
                record.expiration_secs = request.expiration_secs;
                record.lease_expiration_ms = None;
                Ok(Fenced::Applied)
            }
            // Sent again after a lost answer: our own completion.
            Some(record) if is_our_completion(record, request) => Ok(Fenced::Applied),
            _ => Ok(Fenced::LeaseLost),
        }
    }

    fn extend_now(&self, request: &ExtendRequest) -> Result<Fenced, StoreError> {
        self.check_available()?;
        let mut records = self.lock();
        match records.get_mut(&request.key) {
            Some(record) if record.is_held_by(&request.owner) => {
                record.lease_expiration_ms = Some(request.lease_expiration_ms);
                record.expiration_secs = request.expiration_secs;
                Ok(Fenced::Applied)
            }
            _ => Ok(Fenced::LeaseLost),
        }
    }

    fn release_now(&self, key: &IdempotencyKey, owner: &OwnerToken) -> Result<Fenced, StoreError> {
        self.check_available()?;
        let mut records = self.lock();
        match records.get(key) {
            Some(record) if record.is_held_by(owner) => {
                records.remove(key);
                Ok(Fenced::Applied)
            }
            _ => Ok(Fenced::LeaseLost),
        }
    }

    fn get_now(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError> {
        self.check_available()?;
        Ok(self.lock().get(key).cloned())
    }
}

impl Store for InMemoryStore {
    fn acquire(
        &self,
        request: &AcquireRequest,
    ) -> impl Future<Output = Result<Acquire, StoreError>> + Send {
        std::future::ready(self.acquire_now(request))
    }

    fn complete(
        &self,
        request: &CompleteRequest,
    ) -> impl Future<Output = Result<Fenced, StoreError>> + Send {
        std::future::ready(self.complete_now(request))
    }

    fn extend(
        &self,
        request: &ExtendRequest,
    ) -> impl Future<Output = Result<Fenced, StoreError>> + Send {
        std::future::ready(self.extend_now(request))
    }

    fn release(
        &self,
        key: &IdempotencyKey,
        owner: &OwnerToken,
    ) -> impl Future<Output = Result<Fenced, StoreError>> + Send {
        std::future::ready(self.release_now(key, owner))
    }

    fn get(
        &self,
        key: &IdempotencyKey,
    ) -> impl Future<Output = Result<Option<Record>, StoreError>> + Send {
        std::future::ready(self.get_now(key))
    }
}
