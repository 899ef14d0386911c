//! [`StoreError`]: a store's faults, classified once.

use tower::BoxError;

/// A fault of the store: it could not answer. Expected outcomes (a held lock, a lost lease)
/// are never errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The backend could not be reached or failed the request.
    #[error("the idempotency store is unavailable")]
    Unavailable(#[source] BoxError),
    /// A stored item does not have the record's shape.
    #[error("stored record {key} is malformed: {reason}")]
    Malformed {
        /// The stored key.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A handler's write cannot be turned into a request.
    #[error("write {write_index} is invalid: {reason}")]
    InvalidWrite {
        /// Index into the handler's writes.
        write_index: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// The transaction would exceed the store's limits.
    #[error("the transaction has {items} items ({size_bytes} bytes); the limits are {item_limit} items and {limit_bytes} bytes")]
    TransactionTooLarge {
        /// Items, the record included.
        items: usize,
        /// The item limit.
        item_limit: usize,
        /// Approximate size.
        size_bytes: usize,
        /// The size limit.
        limit_bytes: usize,
    },
    /// The item would exceed the store's item size limit.
    #[error("the record is {size_bytes} bytes, over the store's limit of {limit_bytes}")]
    ItemTooLarge {
        /// The item's size.
        size_bytes: usize,
        /// The limit.
        limit_bytes: usize,
    },
    /// The transaction the handler wrote in could not commit (its connection failed before
    /// the commit, or one of the handler's statements aborted it): nothing of it was
    /// applied. Not worth sending again: the handler's writes are gone with it.
    #[error("the handler's transaction could not commit; nothing of it was applied")]
    TransactionAborted(#[source] BoxError),
    /// The store is configured so that it cannot work. Attribute names that are empty or
    /// collide (it could not keep records apart): every request for a record is refused
    /// before it is sent, so nothing is written, and the records fail and are retried until
    /// it is fixed; [`AttributeNames::check`](crate::store::AttributeNames::check) finds it at
    /// start-up. A `PostgresStore` whose pool leaves no connection for a handler's
    /// transaction (a max size below 2): [`IdempotencyLayer::in_transaction`](crate::IdempotencyLayer::in_transaction)
    /// refuses it when the layer is built
    /// ([`TransactionScope::check_transactions`](crate::store::TransactionScope::check_transactions)).
    #[error("the idempotency store is misconfigured: {reason}")]
    Misconfigured {
        /// What is wrong.
        reason: String,
    },
    /// The store refused the request as invalid (DynamoDB's `ValidationException`, at the
    /// top level or as a transaction's cancellation reason): a bad expression, two
    /// operations on one item, an item over the limit. Sending it again cannot help.
    #[error("the store refused the request as invalid (write {write_index:?})")]
    InvalidRequest {
        /// Index into the handler's writes, when the store named one.
        write_index: Option<usize>,
        /// The store's explanation.
        #[source]
        reason: BoxError,
    },
}

impl StoreError {
    /// A fault that may pass: sending the same request again may succeed (the store was
    /// unreachable, throttled or failed). The one place that decides what is retried.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }

    /// The request itself is at fault (a handler's invalid or oversized writes, a result
    /// over the item limit): the record is rejected, not retried.
    pub fn is_request_fault(&self) -> bool {
        matches!(
            self,
            StoreError::ItemTooLarge { .. }
                | StoreError::TransactionTooLarge { .. }
                | StoreError::InvalidWrite { .. }
                | StoreError::InvalidRequest { .. }
        )
    }
}
