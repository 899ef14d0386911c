//! Hooks: user code called when a duplicate is answered from a stored result, and when this
//! process writes a new record. Set them with
//! [`Config::with_response_hook`](crate::Config::with_response_hook) and
//! [`Config::with_record_created_hook`](crate::Config::with_record_created_hook), for example
//! to mark replayed responses or to keep an audit log.
//!
//! A hook runs inline on the record's path, so keep it short and do no I/O that can block.
//! A hook that panics does not change what happens to the record: the panic is caught and
//! logged, a response hook's duplicate gets the stored result unchanged, and a created hook's
//! record goes on to its handler.

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

use crate::key::IdempotencyKey;
use crate::record::Status;

/// Where a replayed result came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReplaySource {
    /// The record in the store.
    Store,
    /// The local cache of completed records
    /// ([`Config::with_local_cache`](crate::Config::with_local_cache)).
    LocalCache,
    /// A record with the same key that ran in this process at the same time (single flight,
    /// or a duplicate in the same batch).
    SameProcess,
}

/// The duplicate a [response hook](crate::Config::with_response_hook) is called for.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Replay<'a> {
    /// The stored key.
    pub key: &'a IdempotencyKey,
    /// Where the stored result was read.
    pub source: ReplaySource,
}

/// The record a [created hook](crate::Config::with_record_created_hook) is called for: this
/// process has just written it (a new key, or one taken over after its record expired or its
/// lease elapsed).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Created<'a> {
    /// The stored key.
    pub key: &'a IdempotencyKey,
    /// The status written.
    ///
    /// [`InProgress`](Status::InProgress) for a lease (the handler runs next), or the final
    /// status when the record is written once with its result
    /// (optimistic mode, after the handler ran).
    pub status: Status,
    /// When the record expires, in epoch seconds.
    pub expiration_secs: u64,
}

type ResponseFn = dyn Fn(Value, &Replay<'_>) -> Value + Send + Sync;
type CreatedFn = dyn Fn(&Created<'_>) + Send + Sync;

/// The hooks of one configuration. Two configurations are equal when they share the same
/// hooks (the same `Arc`s) or have none.
#[derive(Clone, Default)]
pub(crate) struct Hooks {
    pub(crate) response: Option<Arc<ResponseFn>>,
    pub(crate) created: Option<Arc<CreatedFn>>,
}

impl Hooks {
    /// The stored result `data` (JSON) as a duplicate receives it: the response hook's answer
    /// (`data` itself without a hook).
    pub(crate) fn respond(&self, data: Value, replay: &Replay<'_>) -> Value {
        let Some(hook) = &self.response else {
            return data;
        };
        let original = data.clone();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(data, replay))) {
            Ok(answer) => answer,
            Err(_) => {
                tracing::warn!(idempotency_key = %replay.key, "the response hook panicked: the stored result is replayed unchanged");
                original
            }
        }
    }

    /// Whether a response hook is set.
    pub(crate) fn has_response(&self) -> bool {
        self.response.is_some()
    }

    /// Tells the created hook, if any, about a record this process wrote.
    pub(crate) fn created(&self, created: &Created<'_>) {
        let Some(hook) = &self.created else {
            return;
        };
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(created))).is_err() {
            tracing::warn!(idempotency_key = %created.key, "the record-created hook panicked");
        }
    }
}

fn same<T: ?Sized>(a: &Option<Arc<T>>, b: &Option<Arc<T>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        (None, None) => true,
        _ => false,
    }
}

impl PartialEq for Hooks {
    fn eq(&self, other: &Self) -> bool {
        same(&self.response, &other.response) && same(&self.created, &other.created)
    }
}

impl Eq for Hooks {}

impl fmt::Debug for Hooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooks")
            .field("response", &self.response.is_some())
            .field("created", &self.created.is_some())
            .finish()
    }
}
