//! The per-record idempotency protocol, as a tower layer and service.
//!
//! [`IdempotencyLayer`] holds the configured protocol and builds [`Idempotent`] services
//! around a handler. One record's path through the modules:
//! 1. `admission`: the key and payload hash are derived; the local cache, the batch's
//!    earlier failures or a record with the same key running in this process (single
//!    flight, `in_flight`), or the batch's `precheck` (the records delivered before, looked
//!    up together in one call) may answer it at once; otherwise the record is claimed. What
//!    the record knows of its batch comes in its request (`batch_scope`'s [`BatchRecord`]).
//!
//! [`BatchRecord`]: crate::batch::BatchRecord
//! 2. `lease` (the lease driver): one conditional write takes the lease, or the stored
//!    record answers (replay, locked, payload mismatch); `heartbeat` keeps the lease while
//!    the handler runs (`invoke`, which calls user code and catches its panics).
//! 3. `finish`: the mode's final write (an owner-fenced completion of the result, or a
//!    commit of the handler's writes with the record), in the stored form of
//!    `stored_result`, retried (`store_call`) within the deadline; a permanent failure is stored,
//!    any other failure releases the lease.
//!
//! Every store call goes through `store_call`, which bounds it by the time left before the
//! invocation deadline (less the call margin), whatever the store's client is configured
//! with.
//!
//! Handlers with writes in optimistic mode take the `optimistic` driver instead of 2 and 3:
//! run first, then commit with the record only if no live record exists. Handlers that
//! write in the store's own transaction take the `in_transaction` driver: the handler runs
//! inside the transaction that writes the final record.

mod admission;
pub(crate) mod batch_replay;
pub(crate) mod batch_scope;
mod cache;
mod completion;
mod finish;
mod heartbeat;
mod in_flight;
mod in_transaction;
mod invoke;
mod known_answer;
mod layer;
mod lease;
mod optimistic;
pub(crate) mod precheck;
mod protocol;
mod record_fn;
mod record_key;
mod sequenced;
mod service;
mod store_call;
mod stored_result;

pub use completion::Completion;
pub use finish::{ResultAndWrites, ResultOnly, MAX_STORED_FAILURE_BYTES, UNSTORED_FAILURE_MESSAGE};
pub use in_transaction::{InTransaction, TransactionEvent};
pub(crate) use invoke::catch_panic_async;
pub use layer::{IdempotencyLayer, SequencedLayer};
pub use record_fn::{record_fn, RecordFn};
pub use record_key::FALLBACK_KEY_PREFIX;
pub use sequenced::{Position, PositionOf, Sequence, SequenceRule, Sequenced};
pub use service::{HandlerKind, Idempotent, ResponseFuture, Transactional};
