//! [`Scheduling`]: how the records of a batch are scheduled, and which records an in-order
//! batch skips after a failure.

use std::collections::HashSet;

use super::event::{BatchEvent, Ordering};

/// How the records of a batch are scheduled.
///
/// A batch that must run in order (an SQS FIFO queue's, an `eventSourceARN` ending in
/// `.fifo`; a stream shard's) runs one record at a time under every scheduling. By default a
/// failure there stops only its message group (every later record when it has no group): on
/// SQS FIFO every message a receive returns counts toward the queue's `maxReceiveCount`, also
/// one reported without being started, so stopping the other groups behind a message that
/// always fails would take their messages to the dead-letter queue with it, while FIFO orders
/// messages only within a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scheduling {
    /// The default. A batch that must run in order runs as
    /// `Fifo { skip_failed_group_only: true }`: after a record that does not succeed, the
    /// later records of its `MessageGroupId` are reported without being started and the
    /// other groups' records run; a record without a group (every stream record) is reported
    /// without being started after any failure. Other batches run concurrently, at most
    /// `limit` at once. Ordering is not opt-in.
    Auto {
        /// The most records in flight at once on standard queues (at least 1).
        limit: usize,
    },
    /// Standard queues: records run concurrently, at most `limit` at once. A batch that must
    /// run in order runs as under `Auto`.
    Concurrent {
        /// The most records in flight at once (at least 1).
        limit: usize,
    },
    /// In order, whatever the source: records run one by one. After the first record that
    /// does not succeed, every later record is reported without being started, or, with
    /// `skip_failed_group_only` (what `Auto` does), every later record of the same
    /// `MessageGroupId` and every later record without a group.
    Fifo {
        /// Stop only the failed record's message group, not the whole batch. `false` stops
        /// the whole batch, on SQS FIFO at the cost described on [`Scheduling`].
        skip_failed_group_only: bool,
    },
}

impl Default for Scheduling {
    fn default() -> Self {
        Scheduling::Auto { limit: 10 }
    }
}

impl Scheduling {
    /// The scheduling of a batch of `records`: `Auto` decided, `Concurrent` made in-order for a
    /// batch that must run in order, `Fifo` as it is.
    pub(super) fn resolve<E: BatchEvent>(self, records: &[E::Record]) -> Scheduling {
        match (self, E::ordering(records)) {
            // A batch that must run in order never runs concurrently, whatever was chosen,
            // and a failure stops only its group (every later record when it has none).
            (Scheduling::Auto { .. } | Scheduling::Concurrent { .. }, Ordering::InOrder) => {
                Scheduling::Fifo {
                    skip_failed_group_only: true,
                }
            }
            (Scheduling::Auto { limit }, _) => Scheduling::Concurrent { limit },
            (other, _) => other,
        }
    }
}

/// The failures an in-order batch has met so far, and so which later records it skips.
#[derive(Debug)]
pub(super) struct Stops {
    skip_failed_group_only: bool,
    /// A record failed.
    any: bool,
    /// The groups of the records that failed.
    groups: HashSet<String>,
}

impl Stops {
    pub(super) fn new(skip_failed_group_only: bool) -> Self {
        Self {
            skip_failed_group_only,
            any: false,
            groups: HashSet::new(),
        }
    }

    /// Whether a record of `group` is reported without being started. A record without a
    /// group (a stream record) waits behind any failure.
    pub(super) fn skips(&self, group: Option<&str>) -> bool {
        match group {
            Some(group) if self.skip_failed_group_only => self.groups.contains(group),
            _ => self.any,
        }
    }

    /// A record of `group` did not succeed.
    pub(super) fn failed(&mut self, group: Option<String>) {
        self.any = true;
        if let Some(group) = group {
            self.groups.insert(group);
        }
    }
}
