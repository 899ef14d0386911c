//! `TransactWriteItems` over the in-memory tables, in DynamoDB's order: a malformed
//! request, or a write that cannot be applied, is refused before any condition counts
//! ([`Tables::stage`]); then every condition is checked ([`Tables::check_conditions`]); then
//! every write is stored, or none ([`Tables::store`]).

use std::collections::BTreeSet;
use std::fmt;

use super::ast::{Path, SetValue, UpdateExpression};
use super::document::{canonical, check_value};
use super::evaluate::{apply_update, condition_holds};
use super::expression::check_placeholders;
use super::parser::{parse_condition, parse_update};
use super::tables::{ItemKey, Tables, INVALID};
use crate::store::item_size::{attr_size_bytes, item_size_bytes, MAX_ITEM_BYTES};
use crate::store::MAX_NESTING;
use crate::store::{Item, Write, WriteKind};

/// Why a transaction was refused; nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TransactionRefusal {
    /// A malformed request (DynamoDB's ValidationException), with the write at fault.
    Invalid {
        /// The index of the write at fault, if one is.
        write_index: Option<usize>,
        /// What is wrong, in DynamoDB's words where it has them.
        reason: String,
    },
    /// A condition does not hold (TransactionCanceledException, ConditionalCheckFailed).
    ConditionFailed {
        /// The lowest index of a write whose condition does not hold.
        write_index: usize,
    },
    /// A write names a table that was never defined (DynamoDB's
    /// ResourceNotFoundException): the store is not set up for it.
    NoSuchTable {
        /// The table.
        table: String,
    },
}

impl fmt::Display for TransactionRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Invalid { reason, .. } => write!(f, "invalid transaction: {reason}"),
            Self::ConditionFailed { write_index } => {
                write!(
                    f,
                    "transaction canceled: the condition of write {write_index} failed"
                )
            }
            Self::NoSuchTable { table } => write!(f, "requested resource not found: table {table}"),
        }
    }
}

impl std::error::Error for TransactionRefusal {}

/// A transaction's writes with the items they leave, computed by [`Tables::stage`].
#[derive(Debug)]
pub(crate) struct Staged(Vec<StagedWrite>);

/// One staged write.
#[derive(Debug)]
struct StagedWrite {
    /// The table written to.
    table: String,
    /// The item's key.
    key: ItemKey,
    /// What the write does.
    kind: WriteKind,
    /// The item after the write (`None`: deleted, or a condition check).
    new_item: Option<Item>,
}

impl Tables {
    /// Refuses a transaction DynamoDB would reject as malformed, whatever the items hold, as
    /// [`keys`](Self::keys) does.
    #[cfg(test)]
    pub(crate) fn validate(&self, writes: &[Write]) -> Result<(), TransactionRefusal> {
        self.keys(writes).map(drop)
    }

    /// Runs a transaction: [`stage`](Tables::stage) it, check its conditions, and store it.
    #[cfg(test)]
    pub(crate) fn apply(&mut self, writes: &[Write]) -> Result<(), TransactionRefusal> {
        let staged = self.stage(writes)?;
        self.check_conditions(writes, &staged)?;
        self.store(staged);
        Ok(())
    }

    /// Validates the writes and computes the items they would leave (Put replaces, Update
    /// creates the item from its key if missing, Delete removes, ConditionCheck only
    /// checks), changing nothing. As on DynamoDB, a write that cannot be applied (an update
    /// of the wrong type, an item over 400 KB or nested too deep) is refused here, before any
    /// condition counts.
    pub(crate) fn stage(&self, writes: &[Write]) -> Result<Staged, TransactionRefusal> {
        let keys = self.keys(writes)?;
        let mut items = Vec::with_capacity(writes.len());
        for (index, (write, key)) in writes.iter().zip(&keys).enumerate() {
            let item = self.tables.get(&write.table).and_then(|t| t.items.get(key));
            let new_item = match write.kind {
                WriteKind::Put => Some(canonical_item(&write.item)),
                WriteKind::Update => {
                    let mut updated = item.cloned().unwrap_or_else(|| canonical_item(&write.item));
                    let expression = write.update_expression.as_deref().unwrap_or_default();
                    apply_update(expression, &mut updated, &write.names, &write.values)
                        .map_err(|e| invalid(index, e.to_string()))?;
                    Some(updated)
                }
                WriteKind::Delete | WriteKind::ConditionCheck => None,
            };
            if let Some(new_item) = &new_item {
                if new_item.values().any(|v| v.deeper_than(MAX_NESTING)) {
                    let reason = "Nesting Levels have exceeded supported limits";
                    return Err(invalid(index, format!("{INVALID} {reason}")));
                }
                if item_size_bytes(new_item) > MAX_ITEM_BYTES {
                    let reason = "Item size has exceeded the maximum allowed size";
                    return Err(invalid(index, reason.to_owned()));
                }
            }
            items.push(StagedWrite {
                table: write.table.clone(),
                key: key.clone(),
                kind: write.kind,
                new_item,
            });
        }
        Ok(Staged(items))
    }

    /// Checks every write's condition against the current items: the lowest failing index.
    pub(crate) fn check_conditions(
        &self,
        writes: &[Write],
        staged: &Staged,
    ) -> Result<(), TransactionRefusal> {
        for (index, (write, staged)) in writes.iter().zip(&staged.0).enumerate() {
            self.check_condition(index, write, &staged.key)?;
        }
        Ok(())
    }

    fn check_condition(
        &self,
        index: usize,
        write: &Write,
        key: &ItemKey,
    ) -> Result<(), TransactionRefusal> {
        let item = self.tables.get(&write.table).and_then(|t| t.items.get(key));
        if let Some(condition) = &write.condition_expression {
            let holds = condition_holds(condition, item, &write.names, &write.values)
                .map_err(|e| invalid(index, format!("Invalid ConditionExpression: {e}")))?;
            if !holds {
                return Err(TransactionRefusal::ConditionFailed { write_index: index });
            }
        }
        Ok(())
    }

    /// One write alone, as DynamoDB runs a single conditional `PutItem` or `UpdateItem`: a
    /// malformed write is refused first (as [`keys`](Self::keys) does), then its condition
    /// is checked against the current item, and only then is the write computed
    /// ([`stage`](Tables::stage)) and stored. So a write whose condition fails is refused
    /// even when it could not have applied to the item as it is (an update's arithmetic on
    /// a missing attribute, an item it would grow past 400 KB), where a transaction fails as
    /// invalid; a put's item, or what an update sets, over 400 KB alone is malformed.
    pub(crate) fn apply_single(&mut self, write: &Write) -> Result<(), TransactionRefusal> {
        let writes = std::slice::from_ref(write);
        let keys = self.keys(writes)?;
        // What the write carries alone past the item limit is refused before the condition,
        // as DynamoDB does: a put's item, or what an update sets on an empty item (its
        // attributes' names and the values it assigns, not the key, nor values only its
        // condition reads). An item that would only grow past the limit is judged after.
        let carried = match write.kind {
            WriteKind::Put => item_size_bytes(&write.item),
            _ => {
                let mut alone = Item::new();
                let expression = write.update_expression.as_deref().unwrap_or_default();
                match apply_update(expression, &mut alone, &write.names, &write.values) {
                    Ok(()) => item_size_bytes(&alone),
                    // An update that needs the item's own attributes: what its SET and ADD
                    // actions carry (their attributes' names and every value they name).
                    Err(_) => parse_update(expression, &write.names, &write.values)
                        .map_or(0, |update| carried_bytes(&update)),
                }
            }
        };
        if carried > MAX_ITEM_BYTES {
            let reason = "Item size has exceeded the maximum allowed size";
            return Err(invalid(0, reason.to_owned()));
        }
        self.check_condition(0, write, &keys[0])?;
        let staged = self.stage(writes)?;
        self.store(staged);
        Ok(())
    }

    /// Stores what [`stage`](Tables::stage) computed (for writes of these tables).
    pub(crate) fn store(&mut self, staged: Staged) {
        for write in staged.0 {
            let Some(table) = self.tables.get_mut(&write.table) else {
                continue;
            };
            match (write.kind, write.new_item) {
                (WriteKind::ConditionCheck, _) => {}
                (_, Some(new_item)) => {
                    table.items.insert(write.key, new_item);
                }
                (_, None) => {
                    table.items.remove(&write.key);
                }
            }
        }
    }

    /// The key each write addresses, once the transaction is checked for what DynamoDB
    /// rejects as malformed, whatever the items hold: an undefined table, a key that does not
    /// match the schema, an invalid value, an expression that does not parse, an undefined or
    /// unused placeholder, an update of a key attribute, or two writes on one item.
    fn keys(&self, writes: &[Write]) -> Result<Vec<ItemKey>, TransactionRefusal> {
        let mut addressed = BTreeSet::new();
        let mut keys = Vec::with_capacity(writes.len());
        for (index, write) in writes.iter().enumerate() {
            if !self.tables.contains_key(&write.table) {
                let table = write.table.clone();
                return Err(TransactionRefusal::NoSuchTable { table });
            }
            let key = self.check(write).map_err(|reason| invalid(index, reason))?;
            if !addressed.insert((write.table.as_str(), key.clone())) {
                let reason = "Transaction request cannot include multiple operations on one item";
                return Err(invalid(index, reason.to_owned()));
            }
            keys.push(key);
        }
        Ok(keys)
    }

    /// The key `write` addresses, or why DynamoDB would refuse it.
    fn check(&self, write: &Write) -> Result<ItemKey, String> {
        let not_found = || format!("Requested resource not found: table {}", write.table);
        let table = self.tables.get(&write.table).ok_or_else(not_found)?;
        let is_key_attribute = |name: &str| table.key_schema.iter().any(|k| k == name);
        if write.kind != WriteKind::Put && !write.item.keys().all(|name| is_key_attribute(name)) {
            return Err("The provided key element does not match the schema".into());
        }
        if write
            .item
            .keys()
            .chain(write.names.values())
            .any(String::is_empty)
        {
            return Err(format!("{INVALID} Empty attribute name"));
        }
        if write.too_deeply_nested() {
            return Err(format!(
                "{INVALID} Nesting Levels have exceeded supported limits"
            ));
        }
        let key = table.key_of(&write.item)?;
        for (name, value) in write.item.iter().chain(&write.values) {
            check_value(value).map_err(|e| format!("{INVALID} {e} for key {name}"))?;
        }
        let (condition, update) = (
            write.condition_expression.as_deref(),
            write.update_expression.as_deref(),
        );
        match (write.kind, condition, update) {
            (WriteKind::Update, _, None) => {
                return Err("An Update needs an update expression".into());
            }
            (WriteKind::ConditionCheck, None, _) => {
                return Err("A ConditionCheck needs a condition expression".into());
            }
            (WriteKind::Put | WriteKind::Delete | WriteKind::ConditionCheck, _, Some(_)) => {
                return Err("Only an Update can have an update expression".into());
            }
            _ => {}
        }
        if let Some(condition) = condition {
            parse_condition(condition, &write.names, &write.values)
                .map_err(|e| format!("Invalid ConditionExpression: {e}"))?;
        }
        if let Some(update) = update {
            let update = parse_update(update, &write.names, &write.values)
                .map_err(|e| format!("Invalid UpdateExpression: {e}"))?;
            let mut targets = update.targets().filter_map(|path| path.attribute());
            if let Some(name) = targets.find(|name| is_key_attribute(name)) {
                let reason = "This attribute is part of the key";
                return Err(format!(
                    "{INVALID} Cannot update attribute {name}. {reason}"
                ));
            }
        }
        let expressions: Vec<&str> = condition.into_iter().chain(update).collect();
        check_placeholders(&expressions, &write.names, &write.values).map_err(|e| e.to_string())?;
        Ok(key)
    }
}

/// An [`TransactionRefusal::Invalid`] for the write at `index`.
fn invalid(index: usize, reason: String) -> TransactionRefusal {
    TransactionRefusal::Invalid {
        write_index: Some(index),
        reason,
    }
}

/// `item` with its numbers in canonical text, as DynamoDB stores them.
fn canonical_item(item: &Item) -> Item {
    item.iter()
        .map(|(name, value)| (name.clone(), canonical(value.clone())))
        .collect()
}

/// What an update's SET and ADD actions carry, as DynamoDB counts it before the condition:
/// each target attribute's name and each value an action names, every time it names it
/// (REMOVE and DELETE write nothing new).
fn carried_bytes(update: &UpdateExpression) -> usize {
    fn name(path: &Path) -> usize {
        path.attribute().map_or(0, str::len)
    }
    fn values(value: &SetValue) -> usize {
        match value {
            SetValue::Path(_) => 0,
            SetValue::Value(v) => attr_size_bytes(v),
            SetValue::IfNotExists(_, default) => values(default),
            SetValue::ListAppend(a, b) | SetValue::Plus(a, b) | SetValue::Minus(a, b) => {
                values(a) + values(b)
            }
        }
    }
    let set = update.set.iter().map(|(p, v)| name(p) + values(v));
    let add = update.add.iter().map(|(p, v)| name(p) + attr_size_bytes(v));
    set.chain(add).sum()
}

#[cfg(test)]
mod tests;
