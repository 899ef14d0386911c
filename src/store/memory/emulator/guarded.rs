//! [`GuardedWrite`] on [`InMemoryStore`]: one write applied alone, with the semantics of
//! DynamoDB's single conditional write (a malformed write fails before its condition
//! counts; then the condition is checked, before the write is computed; a refused
//! condition answers the item as it was).

use std::future::Future;

use super::refused;
use super::transaction::TransactionRefusal;
use crate::store::InMemoryStore;
use crate::store::{Guarded, GuardedWrite, Item, StoreError, Write, WriteKind};

impl InMemoryStore {
    fn write_guarded_now(&self, write: &Write) -> Result<Guarded, StoreError> {
        self.check_available()?;
        if !matches!(write.kind, WriteKind::Put | WriteKind::Update) {
            return Err(StoreError::InvalidWrite {
                write_index: 0,
                reason: "a guarded write is a put or an update".into(),
            });
        }
        let mut contents = self.lock();
        match contents.tables.apply_single(write) {
            Ok(()) => Ok(Guarded::Applied),
            Err(TransactionRefusal::ConditionFailed { .. }) => {
                // The write's item holds its key (a put's whole item, an update's key).
                let old = contents.tables.item(&write.table, &write.item).cloned();
                Ok(Guarded::Refused(old))
            }
            Err(invalid) => Err(refused(invalid)),
        }
    }

    fn read_item_now(&self, table: &str, key: &Item) -> Result<Option<Item>, StoreError> {
        self.check_available()?;
        Ok(self.lock().tables.item(table, key).cloned())
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
impl GuardedWrite for InMemoryStore {
    fn write_guarded(
        &self,
        write: &Write,
    ) -> impl Future<Output = Result<Guarded, StoreError>> + Send {
        std::future::ready(self.write_guarded_now(write))
    }

    fn read_item(
        &self,
        table: &str,
        key: &Item,
    ) -> impl Future<Output = Result<Option<Item>, StoreError>> + Send {
        std::future::ready(self.read_item_now(table, key))
    }
}
