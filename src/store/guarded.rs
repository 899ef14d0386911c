//! [`GuardedWrite`]: one conditional write on its own (no idempotency record), the store
//! side of [sequence-guarded handlers](crate::idempotent::Sequence), whose effect is its own
//! guard.

use std::future::Future;

use crate::store::{Item, StoreError, Write};

/// The answer to [`GuardedWrite::write_guarded`]. A failed condition is an expected
/// outcome, not an error.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Guarded {
    /// The write was applied.
    Applied,
    /// The write's condition failed and nothing was changed: the item as it was (`None`
    /// when there was none).
    Refused(Option<Item>),
}

/// A store that applies one conditional put or update by itself, and reads an item.
/// Implemented by [`DynamoDbStore`](crate::store::DynamoDbStore) (`PutItem`/`UpdateItem` with
/// `ReturnValuesOnConditionCheckFailure=ALL_OLD`; a strongly consistent `GetItem`) and
/// [`InMemoryStore`](crate::store::InMemoryStore) (with the `testing` feature).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot apply a sequence-guarded write",
    note = "sequence-guarded handlers (`SequencedLayer`) need a `GuardedWrite` store: `DynamoDbStore`, or `InMemoryStore` with the crate's `testing` feature (add it to the dev-dependency for tests)"
)]
pub trait GuardedWrite: Send + Sync + 'static {
    /// Applies `write` (a [`Put`](crate::store::WriteKind::Put) or an
    /// [`Update`](crate::store::WriteKind::Update)) if its condition holds; otherwise answers
    /// the item as it was. A write that cannot be applied (another kind, an item over the
    /// size limit, a malformed expression) is [`StoreError::InvalidWrite`].
    fn write_guarded(
        &self,
        write: &Write,
    ) -> impl Future<Output = Result<Guarded, StoreError>> + Send;

    /// Reads the item of `table` at `key` with a strongly consistent read.
    fn read_item(
        &self,
        table: &str,
        key: &Item,
    ) -> impl Future<Output = Result<Option<Item>, StoreError>> + Send;
}
