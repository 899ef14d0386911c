//! DynamoDB writes a handler hands back, to be committed in one transaction with the
//! completion marker ([`Completion`]). Own types, so no SDK type is in the public API.

use std::collections::BTreeMap;

/// A DynamoDB attribute value.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Attr {
    /// A string (`S`).
    S(String),
    /// A number, in DynamoDB's decimal text form (`N`).
    N(String),
    /// Binary data (`B`).
    B(Vec<u8>),
    /// A boolean (`BOOL`).
    Bool(bool),
    /// Null (`NULL`).
    Null,
    /// A list (`L`).
    L(Vec<Attr>),
    /// A map (`M`).
    M(BTreeMap<String, Attr>),
    /// A string set (`SS`).
    Ss(Vec<String>),
    /// A number set (`NS`).
    Ns(Vec<String>),
}

impl Attr {
    /// A string value.
    pub fn s(value: impl Into<String>) -> Self {
        Attr::S(value.into())
    }

    /// A number value.
    pub fn n(value: impl std::fmt::Display) -> Self {
        Attr::N(value.to_string())
    }

    /// Whether the value nests lists and maps more than `levels` deep (a scalar is 0 deep).
    /// The recursion stops at `levels`, so any value can be checked safely.
    pub(crate) fn deeper_than(&self, levels: usize) -> bool {
        match self {
            Attr::L(items) => levels == 0 || items.iter().any(|v| v.deeper_than(levels - 1)),
            Attr::M(map) => levels == 0 || map.values().any(|v| v.deeper_than(levels - 1)),
            _ => false,
        }
    }

    /// An approximation of the value's size as DynamoDB counts it, in bytes.
    pub(crate) fn size_bytes(&self) -> usize {
        match self {
            Attr::S(s) | Attr::N(s) => s.len(),
            Attr::B(b) => b.len(),
            Attr::Bool(_) | Attr::Null => 1,
            Attr::L(items) => 3 + items.iter().map(|v| 1 + v.size_bytes()).sum::<usize>(),
            Attr::M(map) => item_size_bytes(map) + 3 + map.len(),
            Attr::Ss(items) | Attr::Ns(items) => items.iter().map(String::len).sum(),
        }
    }
}

/// How deep DynamoDB lets lists and maps nest inside an attribute value.
pub const DYNAMODB_MAX_NESTING: usize = 32;

/// A DynamoDB item or key: attribute names to values.
pub type Item = BTreeMap<String, Attr>;

pub(crate) fn item_size_bytes(item: &Item) -> usize {
    item.iter().map(|(k, v)| k.len() + v.size_bytes()).sum()
}

/// What a [`Write`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WriteKind {
    /// Writes a whole item (`Put`).
    Put,
    /// Updates an item with an update expression (`Update`).
    Update,
    /// Deletes an item (`Delete`).
    Delete,
    /// Requires a condition on an item without changing it (`ConditionCheck`).
    ConditionCheck,
}

/// One write of a DynamoDB transaction, built with [`Write::put`], [`Write::update`],
/// [`Write::delete`] or [`Write::condition_check`] and refined with
/// [`condition`](Write::condition), [`name`](Write::name) and [`value`](Write::value).
///
/// ```
/// use lambda_idempotency::{Attr, Write};
/// let credit = Write::update("ledger", [("account", Attr::s("acct-1"))], "ADD #balance :amount")
///     .name("#balance", "balance")
///     .value(":amount", Attr::n(25));
/// # let _ = credit;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub(crate) kind: WriteKind,
    pub(crate) table: String,
    /// The item (put) or the key (others).
    pub(crate) item: Item,
    pub(crate) update_expression: Option<String>,
    pub(crate) condition_expression: Option<String>,
    pub(crate) names: BTreeMap<String, String>,
    pub(crate) values: Item,
}

fn to_item<I, K>(attributes: I) -> Item
where
    I: IntoIterator<Item = (K, Attr)>,
    K: Into<String>,
{
    attributes.into_iter().map(|(k, v)| (k.into(), v)).collect()
}

impl Write {
    fn new(kind: WriteKind, table: impl Into<String>, item: Item) -> Self {
        Self {
            kind,
            table: table.into(),
            item,
            update_expression: None,
            condition_expression: None,
            names: BTreeMap::new(),
            values: BTreeMap::new(),
        }
    }

    /// Puts `item` into `table`.
    pub fn put<I, K>(table: impl Into<String>, item: I) -> Self
    where
        I: IntoIterator<Item = (K, Attr)>,
        K: Into<String>,
    {
        Self::new(WriteKind::Put, table, to_item(item))
    }

    /// Updates the item at `key` in `table` with `update_expression` (e.g. `ADD #b :a`).
    pub fn update<I, K>(
        table: impl Into<String>,
        key: I,
        update_expression: impl Into<String>,
    ) -> Self
    where
        I: IntoIterator<Item = (K, Attr)>,
        K: Into<String>,
    {
        let mut write = Self::new(WriteKind::Update, table, to_item(key));
        write.update_expression = Some(update_expression.into());
        write
    }

    /// Deletes the item at `key` in `table`.
    pub fn delete<I, K>(table: impl Into<String>, key: I) -> Self
    where
        I: IntoIterator<Item = (K, Attr)>,
        K: Into<String>,
    {
        Self::new(WriteKind::Delete, table, to_item(key))
    }

    /// Requires `condition` to hold on the item at `key`, or the whole transaction fails with
    /// [`Error::ConditionFailed`](crate::Error::ConditionFailed).
    pub fn condition_check<I, K>(
        table: impl Into<String>,
        key: I,
        condition: impl Into<String>,
    ) -> Self
    where
        I: IntoIterator<Item = (K, Attr)>,
        K: Into<String>,
    {
        let mut write = Self::new(WriteKind::ConditionCheck, table, to_item(key));
        write.condition_expression = Some(condition.into());
        write
    }

    /// Adds a condition expression: the transaction fails unless it holds.
    pub fn condition(mut self, condition: impl Into<String>) -> Self {
        self.condition_expression = Some(condition.into());
        self
    }

    /// Defines an expression attribute name placeholder (`#name`).
    pub fn name(mut self, placeholder: impl Into<String>, attribute: impl Into<String>) -> Self {
        self.names.insert(placeholder.into(), attribute.into());
        self
    }

    /// Defines an expression attribute value placeholder (`:value`).
    pub fn value(mut self, placeholder: impl Into<String>, value: Attr) -> Self {
        self.values.insert(placeholder.into(), value);
        self
    }

    /// What the write does.
    pub fn kind(&self) -> WriteKind {
        self.kind
    }

    /// The table it writes to.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Whether a value of the write nests deeper than DynamoDB allows
    /// ([`DYNAMODB_MAX_NESTING`]): such a write is refused before anything walks it.
    pub(crate) fn too_deeply_nested(&self) -> bool {
        self.item
            .values()
            .chain(self.values.values())
            .any(|v| v.deeper_than(DYNAMODB_MAX_NESTING))
    }

    /// An approximation of the write's size in a transaction request, in bytes.
    pub(crate) fn size_bytes(&self) -> usize {
        self.table.len()
            + item_size_bytes(&self.item)
            + self.update_expression.as_ref().map_or(0, String::len)
            + self.condition_expression.as_ref().map_or(0, String::len)
            + self
                .names
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>()
            + item_size_bytes(&self.values)
    }
}

/// What a transactional handler returns: its result, and the DynamoDB writes to commit in
/// one transaction with the completion marker.
///
/// The writes are applied exactly once: together with the record that says the message is
/// done, or not at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion<T> {
    pub(crate) result: T,
    pub(crate) writes: Vec<Write>,
}

impl<T> Completion<T> {
    /// A completion with `result` and no writes yet.
    pub fn new(result: T) -> Self {
        Self {
            result,
            writes: Vec::new(),
        }
    }

    /// Adds a write to the transaction.
    pub fn with_write(mut self, write: Write) -> Self {
        self.writes.push(write);
        self
    }

    /// The result.
    pub fn result(&self) -> &T {
        &self.result
    }

    /// The writes.
    pub fn writes(&self) -> &[Write] {
        &self.writes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builders_fill_the_write() {
        let w = Write::update("ledger", [("account", Attr::s("a"))], "ADD #b :v")
            .name("#b", "balance")
            .value(":v", Attr::n(-5))
            .condition("attribute_exists(account)");
        assert_eq!(w.kind(), WriteKind::Update);
        assert_eq!(w.table(), "ledger");
        assert_eq!(w.values[":v"], Attr::N("-5".into()));
        assert_eq!(
            w.condition_expression.as_deref(),
            Some("attribute_exists(account)")
        );
        assert!(w.size_bytes() > "ledgeraccountaADD #b :v".len());
    }

    #[test]
    fn nesting_is_measured_without_walking_past_the_limit() {
        let mut deep = Attr::n(1);
        for _ in 0..1_000 {
            deep = Attr::L(vec![deep]);
        }
        assert!(deep.deeper_than(DYNAMODB_MAX_NESTING));
        let two = Attr::M([("a".to_string(), Attr::L(vec![Attr::Null]))].into());
        assert!(!two.deeper_than(2));
        assert!(two.deeper_than(1));
        assert!(!Attr::s("x").deeper_than(0));
        let write = Write::put("t", [("id", Attr::s("x")), ("deep", deep)]);
        assert!(write.too_deeply_nested());
        assert!(!Write::put("t", [("id", Attr::s("x")), ("two", two)]).too_deeply_nested());
    }

    #[test]
    fn completion_collects_writes() {
        let c = Completion::new(7)
            .with_write(Write::delete("t", [("id", Attr::s("x"))]))
            .with_write(Write::put("t", [("id", Attr::s("y"))]));
        assert_eq!(*c.result(), 7);
        assert_eq!(c.writes().len(), 2);
    }
}
