//! In-memory DynamoDB tables, and `TransactWriteItems` over them in DynamoDB's two steps:
//! [`Tables::validate`] refuses malformed requests before anything is read, then
//! [`Tables::apply`] checks every condition and writes all items or none.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::decimal::Decimal;
use super::document::{canonical, check_value};
use super::evaluate::{apply_update, condition_holds};
use super::expression::{check_placeholders, parse_condition, parse_update};
use crate::write::{Attr, Item, Write, WriteKind};

/// How DynamoDB's messages about invalid parameter values begin.
const INVALID: &str = "One or more parameter values were invalid:";

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
        }
    }
}

impl std::error::Error for TransactionRefusal {}

/// In-memory tables by name.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tables {
    /// The tables by name.
    tables: BTreeMap<String, Table>,
}

/// One table: its key schema and its items.
#[derive(Debug, Clone)]
struct Table {
    /// The partition key attribute, then the sort key attribute if any.
    key_schema: Vec<String>,
    /// The items by key.
    items: BTreeMap<ItemKey, Item>,
}

/// An item's key attribute values; numbers by value, so `1` and `1.0` are one item.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct ItemKey(Vec<KeyValue>);

/// One key attribute's value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum KeyValue {
    /// A string key.
    S(String),
    /// A number key.
    N(Decimal),
    /// A binary key.
    B(Vec<u8>),
}

impl Table {
    /// The key of `item` (a whole item, or a key), or why it has none.
    fn key_of(&self, item: &Item) -> Result<ItemKey, String> {
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

    /// Refuses a transaction DynamoDB would reject as malformed, whatever the items hold: an
    /// undefined table, a key that does not match the schema, an invalid value, an expression
    /// that does not parse, an undefined or unused placeholder, an update of a key attribute,
    /// or two writes on one item.
    pub(crate) fn validate(&self, writes: &[Write]) -> Result<(), TransactionRefusal> {
        self.keys(writes).map(drop)
    }

    /// Runs a transaction: if every condition holds for the current items, applies every
    /// write (Put replaces, Update creates the item from its key if missing, Delete removes,
    /// ConditionCheck only checks); otherwise changes nothing. Validates first.
    pub(crate) fn apply(&mut self, writes: &[Write]) -> Result<(), TransactionRefusal> {
        let keys = self.keys(writes)?;
        let mut current = Vec::with_capacity(writes.len());
        for (index, (write, key)) in writes.iter().zip(&keys).enumerate() {
            let item = self.tables.get(&write.table).and_then(|t| t.items.get(key));
            if let Some(condition) = &write.condition_expression {
                let holds = condition_holds(condition, item, &write.names, &write.values)
                    .map_err(|e| invalid(index, format!("Invalid ConditionExpression: {e}")))?;
                if !holds {
                    return Err(TransactionRefusal::ConditionFailed { write_index: index });
                }
            }
            current.push(item);
        }
        let mut staged = Vec::with_capacity(writes.len());
        for (index, ((write, key), item)) in writes.iter().zip(&keys).zip(current).enumerate() {
            let new_item = match write.kind {
                WriteKind::Put => Some(canonical_item(&write.item)),
                WriteKind::Update => {
                    let mut updated = item.cloned().unwrap_or_else(|| canonical_item(&write.item));
                    let expression = write.update_expression.as_deref().unwrap_or_default();
                    apply_update(expression, &mut updated, &write.names, &write.values)
                        .map_err(|e| invalid(index, e.to_string()))?;
                    Some(updated)
                }
                WriteKind::Delete => None,
                WriteKind::ConditionCheck => continue,
            };
            staged.push((write.table.as_str(), key, new_item));
        }
        for (table, key, new_item) in staged {
            let Some(table) = self.tables.get_mut(table) else {
                continue;
            };
            match new_item {
                Some(new_item) => table.items.insert(key.clone(), new_item),
                None => table.items.remove(key),
            };
        }
        Ok(())
    }

    /// The key each write addresses, once every write is checked as [`Tables::validate`] says.
    fn keys(&self, writes: &[Write]) -> Result<Vec<ItemKey>, TransactionRefusal> {
        let mut addressed = BTreeSet::new();
        let mut keys = Vec::with_capacity(writes.len());
        for (index, write) in writes.iter().enumerate() {
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

#[cfg(test)]
mod tests {
    use super::TransactionRefusal::ConditionFailed;
    use super::*;

    /// A ledger keyed by account, and events keyed by stream and sequence.
    fn tables() -> Tables {
        let mut tables = Tables::default();
        tables.define("ledger", "account", None);
        tables.define("events", "stream", Some("sequence"));
        tables
    }

    /// The ledger key of `account`.
    fn key(account: &str) -> [(&'static str, Attr); 1] {
        [("account", Attr::s(account))]
    }

    /// The key of event `sequence` of stream `s`.
    fn event(sequence: &str) -> [(&'static str, Attr); 2] {
        [("stream", Attr::s("s")), ("sequence", Attr::n(sequence))]
    }

    /// An item of `attributes`.
    fn item<const N: usize>(attributes: [(&str, Attr); N]) -> Item {
        attributes.map(|(name, value)| (name.into(), value)).into()
    }

    /// The project's ledger credit: `ADD #b :a` on the account's balance.
    fn credit(account: &str, amount: i64) -> Write {
        let credit = Write::update("ledger", key(account), "ADD #b :a");
        credit.name("#b", "balance").value(":a", Attr::n(amount))
    }

    /// The account's balance.
    fn balance<'a>(tables: &'a Tables, account: &str) -> Option<&'a Attr> {
        tables.item("ledger", &item(key(account)))?.get("balance")
    }

    /// Validates, then applies, as the store does.
    fn commit(tables: &mut Tables, writes: &[Write]) -> Result<(), TransactionRefusal> {
        tables.validate(writes)?;
        tables.apply(writes)
    }

    /// Asserts that `result` refuses the write at `index` with a reason containing `fragment`.
    fn assert_invalid(result: Result<(), TransactionRefusal>, index: usize, fragment: &str) {
        let refusal = format!("{:?}", result.expect_err(fragment));
        let at_index = refusal.starts_with(&format!("Invalid {{ write_index: Some({index}),"));
        assert!(
            at_index && refusal.contains(fragment),
            "{fragment}: {refusal}"
        );
    }

    #[test]
    fn two_ledger_credits_of_25_make_a_balance_of_50() {
        let mut tables = tables();
        commit(&mut tables, &[credit("acct-1", 25)]).unwrap();
        commit(&mut tables, &[credit("acct-1", 25)]).unwrap();
        assert_eq!(balance(&tables, "acct-1"), Some(&Attr::N("50".into())));
        assert_eq!(tables.items("ledger").len(), 1);
        assert!(tables.items("nothing").is_empty());
    }

    #[test]
    fn a_condition_on_a_missing_item_fails_and_creates_nothing() {
        let mut tables = tables();
        let guarded = [credit("acct-1", 25).condition("attribute_exists(account)")];
        let refused = commit(&mut tables, &guarded);
        assert_eq!(refused, Err(ConditionFailed { write_index: 0 }));
        assert!(tables.items("ledger").is_empty());
        commit(&mut tables, &[Write::put("ledger", key("acct-1"))]).unwrap();
        commit(&mut tables, &guarded).unwrap();
        assert_eq!(balance(&tables, "acct-1"), Some(&Attr::n(25)));
    }

    #[test]
    fn a_failing_condition_or_update_anywhere_applies_no_write() {
        let mut tables = tables();
        let check = Write::condition_check("ledger", key("b"), "attribute_exists(account)");
        let writes = [credit("a", 10), check, Write::put("events", event("1"))];
        let refused = commit(&mut tables, &writes);
        assert_eq!(refused, Err(ConditionFailed { write_index: 1 }));
        assert!(tables.items("ledger").is_empty() && tables.items("events").is_empty());
        let text = Write::put("ledger", key("b")).value(":unused", Attr::Null);
        assert_invalid(commit(&mut tables, &[text]), 0, "unused");
        let mut text_balance = Write::put("ledger", key("b"));
        text_balance.item.insert("balance".into(), Attr::s("x"));
        commit(&mut tables, &[text_balance]).unwrap();
        let writes = [Write::put("events", event("1")), credit("b", 1)];
        assert_invalid(commit(&mut tables, &writes), 1, "incorrect data type");
        assert!(tables.items("events").is_empty());
    }

    #[test]
    fn two_writes_on_one_item_are_refused() {
        let mut tables = tables();
        let check = Write::condition_check("ledger", key("a"), "attribute_not_exists(account)");
        let refused = commit(&mut tables, &[credit("a", 1), check]);
        assert_invalid(refused, 1, "multiple operations on one item");
        let put = Write::put("events", event("1"));
        let refused = commit(&mut tables, &[put, Write::delete("events", event("1.0"))]);
        assert_invalid(refused, 1, "multiple operations on one item");
        assert!(tables.items("ledger").is_empty() && tables.items("events").is_empty());
    }

    #[test]
    fn malformed_writes_are_refused_before_anything_is_read() {
        let tables = tables();
        let refused = |write: Write, fragment: &str| {
            let writes = [Write::put("events", event("1")), write];
            assert_invalid(tables.validate(&writes), 1, fragment);
        };
        let delete = || Write::delete("ledger", key("a"));
        let update = |expression: &str| Write::update("ledger", key("a"), expression);
        let put = |name: &str, value: Attr| {
            let mut put = Write::put("ledger", key("a"));
            put.item.insert(name.to_owned(), value);
            put
        };
        refused(Write::put("missing", key("a")), "not found: table missing");
        refused(
            Write::put("ledger", [("other", Attr::Null)]),
            "Missing the key account",
        );
        let partial_key = Write::delete("events", [("stream", Attr::s("s"))]);
        refused(partial_key, "Missing the key sequence");
        let mut extra = delete();
        extra.item.insert("b".into(), Attr::Null);
        refused(extra, "does not match the schema");
        let boolean_key = Write::delete("ledger", [("account", Attr::Bool(true))]);
        refused(boolean_key, "Type mismatch for key");
        refused(Write::delete("ledger", key("")), "empty string key");
        refused(
            update("SET account = :a").value(":a", Attr::s("b")),
            "part of the key",
        );
        refused(update("REMOVE #k").name("#k", "account"), "part of the key");
        refused(
            update("SET b = :a")
                .value(":a", Attr::Null)
                .value(":c", Attr::Null),
            "unused",
        );
        refused(delete().value(":a", Attr::Null), "unused");
        refused(delete().condition("b = :a"), "not defined");
        refused(delete().condition("b = "), "Invalid ConditionExpression");
        refused(update("SET b = :a b"), "Invalid UpdateExpression");
        refused(put("n", Attr::n("abc")), "cannot be converted");
        let mut check = Write::condition_check("ledger", key("a"), "x");
        check.condition_expression = None;
        refused(check, "needs a condition");
        let mut put_update = Write::put("ledger", key("a"));
        put_update.update_expression = Some("REMOVE b".into());
        refused(put_update, "Only an Update");
        assert_eq!(tables.validate(&[]), Ok(()));
    }

    #[test]
    fn items_are_stored_and_found_by_canonical_numbers() {
        let mut tables = tables();
        let mut put = Write::put("events", event("01.50"));
        put.item.insert("n".into(), Attr::n("-0"));
        commit(&mut tables, &[put]).unwrap();
        let key = item(event("1.5E0"));
        let stored = tables.item("events", &key).unwrap();
        assert_eq!(stored.get("sequence"), Some(&Attr::n("1.5")));
        assert_eq!(stored.get("n"), Some(&Attr::n(0)));
        let check = Write::condition_check("events", event("1.5"), "n = :z");
        commit(&mut tables, &[check.value(":z", Attr::n("0.0"))]).unwrap();
        let remove = Write::update("events", event("1.5"), "REMOVE n");
        commit(&mut tables, &[remove]).unwrap();
        assert_eq!(tables.item("events", &key).map(Item::len), Some(2));
        commit(&mut tables, &[Write::delete("events", event("1.5"))]).unwrap();
        assert_eq!(tables.item("events", &key), None);
        let create = Write::update("events", event("2"), "REMOVE nothing");
        commit(&mut tables, &[create]).unwrap();
        assert_eq!(tables.items("events"), [&item(event("2"))]);
    }

    #[test]
    fn redefining_a_table_keeps_or_replaces_it() {
        let mut tables = tables();
        commit(&mut tables, &[credit("a", 5)]).unwrap();
        tables.define("ledger", "account", None);
        assert_eq!(tables.items("ledger").len(), 1);
        tables.define("ledger", "account", Some("day"));
        assert!(tables.items("ledger").is_empty());
    }
}
