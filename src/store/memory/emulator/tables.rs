//! In-memory DynamoDB tables: their key schemas and items. Transactions over them are in
//! [`super::transaction`].

use std::collections::BTreeMap;

use super::decimal::Decimal;
use crate::store::{Attr, Item};

/// How DynamoDB's messages about invalid parameter values begin.
pub(super) const INVALID: &str = "One or more parameter values were invalid:";

/// In-memory tables by name.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tables {
    /// The tables by name.
    pub(super) tables: BTreeMap<String, Table>,
}

/// One table: its key schema and its items.
#[derive(Debug, Clone)]
pub(super) struct Table {
    /// The partition key attribute, then the sort key attribute if any.
    pub(super) key_schema: Vec<String>,
    /// The items by key.
    pub(super) items: BTreeMap<ItemKey, Item>,
}

/// An item's key attribute values; numbers by value, so `1` and `1.0` are one item.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct ItemKey(Vec<KeyValue>);

/// One key attribute's value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum KeyValue {
    /// A string key.
    S(String),
    /// A number key.
    N(Decimal),
    /// A binary key.
    B(Vec<u8>),
}

impl Table {
    /// The key of `item` (a whole item, or a key), or why it has none.
    pub(super) fn key_of(&self, item: &Item) -> Result<ItemKey, String> {
        let key_value = |name: &String| match item.get(name) {
            None => Err(format!("{INVALID} Missing the key {name} in the item")),
            Some(Attr::S(s)) if s.is_empty() => Err(format!("{INVALID} empty string key {name}")),
            Some(Attr::B(b)) if b.is_empty() => Err(format!("{INVALID} empty binary key {name}")),
            Some(Attr::S(s)) => Ok(KeyValue::S(s.clone())),
            Some(Attr::B(b)) => Ok(KeyValue::B(b.clone())),
            Some(Attr::N(n)) => Decimal::parse(n)
                .map(KeyValue::N)
                .map_err(|e| e.to_string()),
            Some(_) => Err(format!(
                "{INVALID} Type mismatch for key {name}: not S, N or B"
            )),
        };
        let values = self.key_schema.iter().map(key_value);
        values.collect::<Result<_, _>>().map(ItemKey)
    }
}

impl Tables {
    /// Defines `table` with its key schema. An existing table with the same schema keeps its
    /// items; one with another schema is replaced by an empty table.
    pub(crate) fn define(&mut self, table: &str, partition_key: &str, sort_key: Option<&str>) {
        let key = [Some(partition_key), sort_key].into_iter().flatten();
        let key_schema: Vec<String> = key.map(str::to_owned).collect();
        let existing = self.tables.get(table).map(|t| &t.key_schema);
        if existing != Some(&key_schema) {
            let items = BTreeMap::new();
            self.tables
                .insert(table.to_owned(), Table { key_schema, items });
        }
    }

    /// The item of `table` whose key attributes are those of `key` (other attributes ignored).
    pub(crate) fn item(&self, table: &str, key: &Item) -> Option<&Item> {
        let table = self.tables.get(table)?;
        table.items.get(&table.key_of(key).ok()?)
    }

    /// Every item of `table`, in key order (none if the table is not defined).
    pub(crate) fn items(&self, table: &str) -> Vec<&Item> {
        self.tables
            .get(table)
            .map_or_else(Vec::new, |t| t.items.values().collect())
    }
}
