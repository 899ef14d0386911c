//! [`Write`]: the DynamoDB writes a handler hands back (in a
//! [`Completion`](crate::Completion)), committed in one transaction with the record.
//!
//! They are this crate's own types, not the SDK's: the public API does not change with the
//! SDK's versions nor need it when the `dynamodb` feature is off, and the embedded store
//! applies them with DynamoDB's semantics.

use std::collections::BTreeMap;

/// How deep lists and maps may nest inside an attribute value (DynamoDB's limit).
pub const MAX_NESTING: usize = 32;

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
    #[cfg(any(test, feature = "testing", feature = "dynamodb"))]
    pub(crate) fn deeper_than(&self, levels: usize) -> bool {
        match self {
            Attr::L(items) => levels == 0 || items.iter().any(|v| v.deeper_than(levels - 1)),
            Attr::M(map) => levels == 0 || map.values().any(|v| v.deeper_than(levels - 1)),
            _ => false,
        }
    }
}

/// A DynamoDB item or key: attribute names to values.
pub type Item = BTreeMap<String, Attr>;

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

/// One write of a DynamoDB transaction. It is built with [`Write::put`], [`Write::update`],
/// [`Write::delete`] or [`Write::condition_check`] and refined with
/// [`condition`](Write::condition), [`name`](Write::name) and [`value`](Write::value).
///
/// ```
/// use lambda_idempotency::store::{Attr, Write};
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
    /// ([`MAX_NESTING`]): such a write is refused before anything walks it.
    #[cfg(any(test, feature = "testing", feature = "dynamodb"))]
    pub(crate) fn too_deeply_nested(&self) -> bool {
        self.item
            .values()
            .chain(self.values.values())
            .any(|v| v.deeper_than(MAX_NESTING))
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
    }

    #[test]
    fn nesting_is_measured_without_walking_past_the_limit() {
        let mut deep = Attr::n(1);
        for _ in 0..1_000 {
            deep = Attr::L(vec![deep]);
        }
        assert!(deep.deeper_than(MAX_NESTING));
        let two = Attr::M([("a".to_string(), Attr::L(vec![Attr::Null]))].into());
        assert!(!two.deeper_than(2));
        assert!(two.deeper_than(1));
        assert!(!Attr::s("x").deeper_than(0));
        let write = Write::put("t", [("id", Attr::s("x")), ("deep", deep)]);
        assert!(write.too_deeply_nested());
        assert!(!Write::put("t", [("id", Attr::s("x")), ("two", two)]).too_deeply_nested());
    }
}
