//! [`InMemoryStore`]: the embedded store, for local runs and tests: the records in a map,
//! and (with the `testing` feature) the DynamoDB expression emulator for transactional
//! handlers' writes.

#[cfg(any(test, feature = "testing"))]
mod emulator;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::key::IdempotencyKey;
use crate::record::{OwnerToken, Record};
use crate::store::item_size::{check_item_size, completed_size_bytes, record_size_bytes};
use crate::store::AttributeNames;
use crate::store::{
    is_our_completion, Acquire, AcquireRequest, CompleteRequest, ExtendRequest, Fenced, Store,
    StoreError,
};

/// An in-process store with the same record semantics as
/// [`DynamoDbStore`](crate::store::DynamoDbStore): one contract suite runs on both.
///
/// Always compiled, it is a map of records: owner-fenced leases, expiry checked by every
/// conditional write, and DynamoDB's 400 KB item limit counted as DynamoDB counts it.
/// Records live as long as the store (and its clones, which share them). Use it for quick
/// local runs, unit tests and examples of plain handlers; it does not coordinate separate
/// processes.
///
/// With the `testing` feature (enable it in your `[dev-dependencies]`) it also:
/// - makes every call fail on `set_unavailable`, to test
///   how a handler behaves when the store is down;
/// - is a [`TransactionalStore`](crate::store::TransactionalStore) and a
///   [`GuardedWrite`](crate::store::GuardedWrite), through a DynamoDB expression emulator, for
///   handlers with writes and sequence-guarded effects: declare the tables they write to with
///   `define_table`, read them back with `item` and `items`. A handler's
///   [`Write`](crate::store::Write)s are applied to in-memory tables together with the
///   record, all or nothing, in DynamoDB's order (an invalid or inapplicable write, then the
///   record's condition, then the writes' conditions), with DynamoDB's condition and update
///   expressions, exact numbers, 400 KB items and 32 nesting levels. The contract suite runs
///   the same transactional cases here and on DynamoDB Local. Not modelled: key attribute
///   types (any of S, N, B is accepted for a key), the 300-operator and name-length limits of
///   expressions, and DynamoDB's choice of which write a validation error names. A table
///   that is not declared is an invalid request here and on DynamoDB
///   (`ResourceNotFoundException`).
///
/// Without `testing`, none of the emulator (about 3,300 lines) is compiled.
///
/// ```
/// use lambda_idempotency::store::InMemoryStore;
/// use lambda_idempotency::IdempotencyLayer;
/// let layer = IdempotencyLayer::new(InMemoryStore::new());
/// # let _ = layer;
/// ```
#[derive(Debug, Clone, Default)]
pub struct InMemoryStore {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    contents: Mutex<Contents>,
    unavailable: AtomicBool,
}

/// The records and (with the emulator) the tables, behind one lock so that a commit changes
/// both at once.
#[derive(Debug, Default)]
struct Contents {
    records: HashMap<IdempotencyKey, Record>,
    #[cfg(any(test, feature = "testing"))]
    tables: emulator::Tables,
}

impl InMemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes every later call fail with [`StoreError::Unavailable`] (`true`) or work again
    /// (`false`). With the `testing` feature.
    #[cfg(any(test, feature = "testing"))]
    #[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
    pub fn set_unavailable(&self, unavailable: bool) {
        self.inner.unavailable.store(unavailable, Ordering::SeqCst);
    }

    /// A copy of every stored record, for inspection in tests.
    pub fn records(&self) -> Vec<Record> {
        let mut all: Vec<Record> = self.lock().records.values().cloned().collect();
        all.sort_by(|a, b| a.key.cmp(&b.key));
        all
    }

    /// Writes `record` as it is, bypassing the protocol, as another tool (or an earlier
    /// version) might have written it: for tests of what the stores do with such records.
    pub fn insert_record(&self, record: Record) {
        self.lock().records.insert(record.key.clone(), record);
    }

    fn lock(&self) -> MutexGuard<'_, Contents> {
        // A panic while holding the lock cannot leave a half-written record: every
        // mutation is a single insert or remove, and a commit checks everything before it
        // changes anything.
        self.inner
            .contents
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
        // The same item size limit, counted the same way, as DynamoDB.
        check_item_size(record_size_bytes(
            &AttributeNames::default(),
            &request.shape(),
        ))?;
        let record = request.record();
        let mut contents = self.lock();
        let records = &mut contents.records;
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
        let mut contents = self.lock();
        let records = &mut contents.records;
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
        let mut contents = self.lock();
        let records = &mut contents.records;
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
        let mut contents = self.lock();
        let records = &mut contents.records;
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
        Ok(self.lock().records.get(key).cloned())
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
