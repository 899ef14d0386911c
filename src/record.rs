//! The idempotency record and the pure decision logic over it.
//!
//! Nothing here does I/O or reads the clock: every function takes `now`.

use std::fmt;
use std::time::SystemTime;

use crate::clock::{epoch_ms, epoch_secs};
use crate::key::IdempotencyKey;
use crate::key::PayloadHash;

/// The state of an idempotency record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// A handler holds a lease on the key and is running (`INPROGRESS`).
    InProgress,
    /// The handler finished and its result is stored (`COMPLETED`).
    Completed,
    /// The handler failed permanently and its error is stored (`FAILED`); duplicates get the
    /// stored error until the record expires. This status is this crate's addition.
    Failed,
}

impl Status {
    /// The stored form, shared with Powertools for AWS Lambda.
    pub const fn as_str(self) -> &'static str {
        match self {
            Status::InProgress => "INPROGRESS",
            Status::Completed => "COMPLETED",
            Status::Failed => "FAILED",
        }
    }

    /// Parses the stored form.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "INPROGRESS" => Some(Status::InProgress),
            "COMPLETED" => Some(Status::Completed),
            "FAILED" => Some(Status::Failed),
            _ => None,
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The token that identifies one holder of a lease (fencing).
///
/// Every acquire writes a fresh token; complete and release only succeed for the token that
/// is still stored, so an invocation that lost its lease cannot overwrite or delete the
/// record of the invocation that took it over.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OwnerToken(String);

impl OwnerToken {
    /// A new random token (UUID v4).
    pub fn generate() -> Self {
        Self(uuid::Uuid::new_v4().to_string())
    }

    /// Wraps a stored token.
    pub fn new(token: impl Into<String>) -> Self {
        Self(token.into())
    }

    /// The token text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One stored idempotency record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The stored key (`<prefix>#<sha256 hex>`).
    pub key: IdempotencyKey,
    /// In progress or completed.
    pub status: Status,
    /// When the record stops counting, in epoch seconds (the table's TTL attribute).
    pub expiration_secs: u64,
    /// When the in-progress lease ends, in epoch milliseconds.
    pub lease_expiration_ms: Option<u64>,
    /// The token of the lease holder, if any.
    pub owner: Option<OwnerToken>,
    /// The stored result as JSON (completed records), or the error message as a JSON string
    /// (failed records).
    pub data: Option<String>,
    /// The payload hash, when payload validation is on.
    pub validation: Option<String>,
}

impl Record {
    /// The record's expiration has passed: it no longer counts and may be overwritten, even
    /// if the store has not deleted it yet (TTL deletion is garbage collection only).
    pub fn is_expired(&self, now: SystemTime) -> bool {
        self.expiration_secs < epoch_secs(now)
    }

    /// The record is in progress and its lease has elapsed. A record in progress without a
    /// lease time (as written by other tools) never elapses; it only expires.
    pub fn lease_elapsed(&self, now: SystemTime) -> bool {
        self.status == Status::InProgress
            && self
                .lease_expiration_ms
                .is_some_and(|until| until < epoch_ms(now))
    }

    /// An acquire at `now` may overwrite this record: the one condition every store enforces.
    pub fn can_be_taken_over(&self, now: SystemTime) -> bool {
        self.is_expired(now) || self.lease_elapsed(now)
    }

    /// The record is in progress and held by `owner`: complete and release require this.
    pub fn is_held_by(&self, owner: &OwnerToken) -> bool {
        self.status == Status::InProgress && self.owner.as_ref() == Some(owner)
    }
}

/// What to do about an existing record that made an acquire fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The record is completed: replay its stored result.
    Replay {
        /// The stored result as JSON.
        data: Option<String>,
    },
    /// The record failed permanently: return its stored error, do not run the handler.
    ReplayFailure {
        /// The stored error message as a JSON string.
        data: Option<String>,
    },
    /// Another invocation holds a live lease.
    InProgress,
    /// The key was seen with a different payload.
    PayloadMismatch,
    /// The record could have been taken over (expired, or lease elapsed) yet the acquire
    /// failed: it changed in between. Try the acquire again.
    Retry,
}

/// Decides from an existing record, the time, and this payload's validation hash.
pub fn decide(existing: &Record, now: SystemTime, validation: Option<&PayloadHash>) -> Decision {
    if existing.can_be_taken_over(now) {
        return Decision::Retry;
    }
    if let (Some(stored), Some(ours)) = (existing.validation.as_deref(), validation) {
        if !ours.matches(stored) {
            return Decision::PayloadMismatch;
        }
    }
    match existing.status {
        Status::InProgress => Decision::InProgress,
        Status::Completed => Decision::Replay {
            data: existing.data.clone(),
        },
        Status::Failed => Decision::ReplayFailure {
            data: existing.data.clone(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn at_ms(ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(ms)
    }

    fn record(status: Status, expiration_secs: u64, lease_ms: Option<u64>) -> Record {
        Record {
            key: IdempotencyKey::from_stored("fn#abc"),
            status,
            expiration_secs,
            lease_expiration_ms: lease_ms,
            owner: Some(OwnerToken::new("owner-a")),
            data: Some("42".into()),
            validation: Some("v2:hash-a".into()),
        }
    }

    #[test]
    fn completed_record_replays_its_data() {
        let r = record(Status::Completed, 2_000, None);
        assert_eq!(
            decide(&r, at_ms(1_000_000), Some(&PayloadHash::new("v2:hash-a"))),
            Decision::Replay {
                data: Some("42".into())
            }
        );
    }

    #[test]
    fn failed_record_replays_its_error() {
        let mut r = record(Status::Failed, 2_000, None);
        r.data = Some("\"card declined\"".into());
        assert_eq!(
            decide(&r, at_ms(1_000_000), None),
            Decision::ReplayFailure {
                data: Some("\"card declined\"".into())
            }
        );
        assert_eq!(Status::parse("FAILED"), Some(Status::Failed));
    }

    #[test]
    fn expiry_is_checked_in_seconds_and_is_strict() {
        let r = record(Status::Completed, 1_000, None);
        assert!(!r.is_expired(at_ms(1_000_999)));
        assert!(r.is_expired(at_ms(1_001_000)));
        assert_eq!(decide(&r, at_ms(1_001_000), None), Decision::Retry);
    }

    #[test]
    fn live_lease_is_in_progress_and_elapsed_lease_is_retry() {
        let r = record(Status::InProgress, 5_000, Some(1_000_500));
        assert_eq!(decide(&r, at_ms(1_000_500), None), Decision::InProgress);
        assert_eq!(decide(&r, at_ms(1_000_501), None), Decision::Retry);
    }

    #[test]
    fn in_progress_without_lease_time_never_elapses() {
        let r = record(Status::InProgress, 5_000, None);
        assert!(!r.lease_elapsed(at_ms(4_000_000)));
        assert_eq!(decide(&r, at_ms(4_000_000), None), Decision::InProgress);
    }

    #[test]
    fn different_payload_is_a_mismatch_for_both_statuses() {
        for status in [Status::InProgress, Status::Completed] {
            let r = record(status, 5_000, Some(4_000_000));
            assert_eq!(
                decide(&r, at_ms(1_000), Some(&PayloadHash::new("v2:hash-b"))),
                Decision::PayloadMismatch
            );
        }
    }

    #[test]
    fn validation_is_skipped_when_either_side_has_none() {
        let mut r = record(Status::Completed, 5_000, None);
        assert!(matches!(
            decide(&r, at_ms(1_000), None),
            Decision::Replay { .. }
        ));
        r.validation = None;
        assert!(matches!(
            decide(&r, at_ms(1_000), Some(&PayloadHash::new("v2:hash-b"))),
            Decision::Replay { .. }
        ));
    }

    #[test]
    fn holder_check_needs_in_progress_and_same_owner() {
        let r = record(Status::InProgress, 5_000, Some(1));
        assert!(r.is_held_by(&OwnerToken::new("owner-a")));
        assert!(!r.is_held_by(&OwnerToken::new("owner-b")));
        let done = record(Status::Completed, 5_000, None);
        assert!(!done.is_held_by(&OwnerToken::new("owner-a")));
    }
}
