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
    /// The store had not answered when the invocation's time ran out
    /// ([`CALL_MARGIN`](crate::clock::CALL_MARGIN) before its deadline): every store call
    /// is bounded by the time left, whatever its client is configured with. `sent`: the call
    /// was sent and cut short, so its answer is lost (it may have been applied, as after a
    /// timeout); otherwise so little time was left that it was not sent at all, and nothing
    /// was asked.
    #[error("{}", if *sent { "the store did not answer before the invocation deadline" } else { "too little time was left before the invocation deadline to call the store" })]
    DeadlineReached {
        /// The call was sent (and its answer lost), rather than not sent.
        sent: bool,
    },
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
    /// The store is not set up for this function, so no record can be processed until it
    /// is fixed: a table that does not exist (or is in another region), access denied, or
    /// credentials that are wrong or expired (DynamoDB's `ResourceNotFoundException`,
    /// `AccessDeniedException`, `UnrecognizedClientException`, `ExpiredTokenException`, ...;
    /// Redis's `NOAUTH`, `WRONGPASS`, `NOPERM`; PostgreSQL's `42P01`, `42501`, `28P01`, ...),
    /// also for the handler's own writes committed with the record; or attribute names that
    /// cannot keep records apart, refused before anything is sent
    /// ([`AttributeNames::check`](crate::store::AttributeNames::check) finds them at
    /// start-up); or a `PostgresStore` whose pool leaves no connection for a handler's
    /// transaction (a max size below 2), which
    /// [`IdempotencyLayer::in_transaction`](crate::IdempotencyLayer::in_transaction) refuses
    /// when the layer is built
    /// ([`TransactionScope::check_transactions`](crate::store::TransactionScope::check_transactions)).
    /// Nothing of the record was stored (a plain handler may have run before its
    /// completion was refused). The store's own setup is never a record's fault: a
    /// [`BatchProcessor`](crate::batch::BatchProcessor) fails the whole invocation with it
    /// (one ERROR naming the store, the table and the code), so the source retries the batch
    /// until it is fixed, and then applies it once; a table of the handler's writes
    /// ([`Misconfiguration::handler_write`]) fails the invocation only when no record of the
    /// batch could store its result, and otherwise its records alone.
    #[error("{0}")]
    Misconfigured(Misconfiguration),
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

/// What is wrong with a store's setup ([`StoreError::Misconfigured`]): which store, which
/// table, and the code and explanation the store gave.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Misconfiguration {
    /// The store: `DynamoDB`, `Redis` or `PostgreSQL` (`memory` for the embedded store's
    /// tables).
    pub store: &'static str,
    /// The table the request was for: the idempotency table, or a table of the handler's
    /// writes (several, `, `-separated, when the store does not say which one it refused).
    /// Empty when there is none to name (Redis).
    pub table: String,
    /// The store's code for the refusal (`ResourceNotFoundException`, `NOAUTH`, `42P01`),
    /// or this crate's (`InvalidAttributeNames`).
    pub code: String,
    /// The store's explanation.
    pub reason: String,
    /// The refused table is one the handler writes (its writes committed with the record),
    /// not the store's own. Only the records that write there meet it, and a batch fails as
    /// a whole for it only when none of its records could commit (a table named from the
    /// message, a missing tenant's say, fails its records alone).
    pub handler_write: bool,
}

impl Misconfiguration {
    /// A misconfiguration of `store`'s `table`, refused with `code` for `reason`.
    pub fn new(
        store: &'static str,
        table: impl Into<String>,
        code: impl Into<String>,
        reason: impl Into<String>,
    ) -> Self {
        Self {
            store,
            table: table.into(),
            code: code.into(),
            reason: reason.into(),
            handler_write: false,
        }
    }

    /// The same refusal, for a table of the handler's writes rather than the store's own.
    pub fn for_handler_write(mut self) -> Self {
        self.handler_write = true;
        self
    }
}

impl std::fmt::Display for Misconfiguration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the {} store is misconfigured", self.store)?;
        if !self.table.is_empty() {
            write!(f, " (table {})", self.table)?;
        }
        write!(f, ": {}: {}", self.code, self.reason)
    }
}

impl StoreError {
    /// A fault that may pass: sending the same request again may succeed (the store was
    /// unreachable, throttled or failed). The one place that decides what is retried.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StoreError::Unavailable(_) | StoreError::DeadlineReached { sent: true }
        )
    }

    /// The store is not set up for this function ([`StoreError::Misconfigured`]): no record
    /// can be processed until it is fixed.
    pub fn misconfiguration(&self) -> Option<&Misconfiguration> {
        match self {
            StoreError::Misconfigured(misconfiguration) => Some(misconfiguration),
            _ => None,
        }
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
