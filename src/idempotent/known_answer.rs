//! What this process knows of a key without the store: the local cache's record, and a
//! failure of the key earlier in this batch.

use std::time::SystemTime;

use serde::de::DeserializeOwned;

use super::in_flight::FailureMemo;
use super::protocol::Protocol;
use super::stored_result::{replay_failure, replayed};
use crate::error::Error;
use crate::hooks::ReplaySource;
use crate::key::IdempotencyKey;
use crate::key::PayloadHash;
use crate::outcome::Processed;
use crate::record::{decide, Decision};

/// Whether a stored payload hash belongs to another payload than ours.
pub(crate) fn mismatched(stored: Option<&str>, ours: Option<&PayloadHash>) -> bool {
    matches!((stored, ours), (Some(stored), Some(ours)) if !ours.matches(stored))
}

/// The answer this process knows for `key` without the store, in the order admission asks:
/// the local cache (a completed record replays, a failed one replays its failure), then a
/// failure of the key earlier in the record's batch (`failures`, none outside a batch).
/// `None`: the store (or the flight) decides.
pub(crate) fn answer_known<St, K, C, T: DeserializeOwned>(
    protocol: &Protocol<St, K, C>,
    key: &IdempotencyKey,
    validation: Option<&PayloadHash>,
    now: SystemTime,
    failures: Option<&FailureMemo>,
) -> Option<Result<Processed<T>, Error>> {
    if let Some(record) = protocol.local.cached(key, now) {
        match decide(&record, now, validation) {
            Decision::Replay { data } => {
                return Some(Ok(replayed(
                    &protocol.config,
                    key,
                    data.as_deref(),
                    ReplaySource::LocalCache,
                )))
            }
            Decision::ReplayFailure { data } => return Some(Err(replay_failure(data.as_deref()))),
            Decision::PayloadMismatch => {
                return Some(Err(Error::PayloadMismatch { key: key.clone() }))
            }
            Decision::InProgress | Decision::Retry => {}
        }
    }
    failed_in_this_batch(failures?, key, validation).map(Err)
}

/// The error of a record whose key's handler failed earlier in its batch (`failures`):
/// rejected when its payload differs from the one that failed.
pub(crate) fn failed_in_this_batch(
    failures: &FailureMemo,
    key: &IdempotencyKey,
    validation: Option<&PayloadHash>,
) -> Option<Error> {
    let stored = failures.failed_earlier(key)?;
    let key = key.clone();
    Some(if mismatched(stored.as_deref(), validation) {
        Error::PayloadMismatch { key }
    } else {
        Error::SameKeyFailed { key }
    })
}
