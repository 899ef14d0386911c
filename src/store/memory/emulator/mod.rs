//! The DynamoDB expression emulator behind [`InMemoryStore`]'s transactional writes (with
//! the `testing` feature): in-memory tables, DynamoDB's condition and update expressions
//! (lexer, parser, syntax tree, evaluation), exact 38-digit numbers, and transactions and
//! single guarded writes over the tables, with DynamoDB's order of checks.

mod ast;
mod decimal;
mod document;
mod evaluate;
mod expression;
mod guarded;
mod lexer;
mod parser;
mod tables;
mod transaction;

use std::collections::HashMap;
use std::future::Future;

use crate::key::IdempotencyKey;
use crate::record::Record;
use crate::store::item_size::check_commit_size;
use crate::store::{
    AttributeNames, Commit, CommitRequest, InMemoryStore, Item, StoreError, TransactionalStore,
};
pub(super) use tables::Tables;
use transaction::TransactionRefusal;

impl InMemoryStore {
    /// Declares an in-memory table for transactional writes, keyed by `key_attributes` (the
    /// partition key, then the sort key if any; further names are ignored, and no name
    /// declares nothing). Declaring it again with the same key keeps its items; with another
    /// key it starts empty. With the `testing` feature.
    ///
    /// ```
    /// use lambda_idempotency::store::{Attr, InMemoryStore};
    /// let store = InMemoryStore::new();
    /// store.define_table("ledger", &["account"]);
    /// let key = [("account".to_string(), Attr::s("acct-1"))].into();
    /// assert!(store.item("ledger", &key).is_none());
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
    pub fn define_table(&self, table: &str, key_attributes: &[&str]) {
        let (partition, sort) = match key_attributes {
            [partition] => (*partition, None),
            [partition, sort, ..] => (*partition, Some(*sort)),
            [] => return,
        };
        self.lock().tables.define(table, partition, sort);
    }

    /// The item of `table` at `key` (an item holding the key attributes), if any. With the
    /// `testing` feature.
    #[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
    pub fn item(&self, table: &str, key: &Item) -> Option<Item> {
        self.lock().tables.item(table, key).cloned()
    }

    /// Every item of `table`, in key order (none if the table is not declared). With the
    /// `testing` feature.
    #[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
    pub fn items(&self, table: &str) -> Vec<Item> {
        self.lock()
            .tables
            .items(table)
            .into_iter()
            .cloned()
            .collect()
    }

    fn commit_now(&self, request: &CommitRequest, fresh: bool) -> Result<Commit, StoreError> {
        self.check_available()?;
        check_commit_size(&AttributeNames::default(), request)?;
        let mut contents = self.lock();
        // As DynamoDB: an invalid request, or a write that cannot be applied (wrong type,
        // too large, too deep), fails before any condition counts, the record's included.
        let staged = contents.tables.stage(&request.writes).map_err(refused)?;
        let existing = contents.records.get(&request.key);
        let allowed = if fresh {
            existing.is_none_or(|r| r.can_be_taken_over(request.now))
        } else {
            existing.is_some_and(|r| r.is_held_by(&request.owner))
        };
        if !allowed {
            return Ok(Commit::RecordRefused(existing.cloned()));
        }
        match contents.tables.check_conditions(&request.writes, &staged) {
            Ok(()) => {}
            Err(TransactionRefusal::ConditionFailed { write_index }) => {
                return Ok(Commit::ConditionFailed { write_index })
            }
            Err(invalid) => return Err(refused(invalid)),
        }
        contents.tables.store(staged);
        let validation = if fresh {
            request.validation.clone()
        } else {
            existing_validation(&contents.records, request)
        };
        contents
            .records
            .insert(request.key.clone(), request.record(validation));
        Ok(Commit::Applied)
    }
}

/// The payload hash a lease-mode commit keeps: the one stored when the lease was taken.
fn existing_validation(
    records: &HashMap<IdempotencyKey, Record>,
    request: &CommitRequest,
) -> Option<String> {
    records.get(&request.key).and_then(|r| r.validation.clone())
}

/// A refused transaction as the store error DynamoDB's `ValidationException` becomes.
fn refused(refusal: TransactionRefusal) -> StoreError {
    let write_index = match &refusal {
        TransactionRefusal::Invalid { write_index, .. } => *write_index,
        TransactionRefusal::ConditionFailed { write_index } => Some(*write_index),
        TransactionRefusal::NoSuchTable { table } => {
            return StoreError::Misconfigured(
                crate::store::Misconfiguration::new(
                    "memory",
                    table.clone(),
                    "ResourceNotFoundException",
                    refusal.to_string(),
                )
                .for_handler_write(),
            )
        }
    };
    StoreError::InvalidRequest {
        write_index,
        reason: Box::new(refusal),
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
impl TransactionalStore for InMemoryStore {
    fn commit(
        &self,
        request: &CommitRequest,
    ) -> impl Future<Output = Result<Commit, StoreError>> + Send {
        std::future::ready(self.commit_now(request, false))
    }

    fn commit_fresh(
        &self,
        request: &CommitRequest,
    ) -> impl Future<Output = Result<Commit, StoreError>> + Send {
        std::future::ready(self.commit_now(request, true))
    }
}
