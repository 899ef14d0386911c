//! Single flight per key inside one process: records of a batch that share a key run the
//! handler once; the others wait for it and take its result. And the memo of keys whose
//! handler failed in the current batch.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio::sync::watch;

use crate::key::IdempotencyKey;

/// How the leader of a flight ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FlightResult {
    /// A result is stored (the leader executed or replayed it).
    Completed {
        data: String,
        validation: Option<String>,
    },
    /// The leader's handler failed permanently and the failure is stored (as a JSON
    /// string).
    FailedPermanently {
        data: String,
        validation: Option<String>,
    },
    /// The leader ran the handler and it failed: the followers must not run it again in
    /// this batch. Carries the leader's stored payload hash.
    HandlerFailed { validation: Option<String> },
    /// The leader did not get as far as the handler (locked, rejected, store error,
    /// cancelled): the followers go through the store themselves.
    NotStarted,
}

type Slot = watch::Receiver<Option<FlightResult>>;

/// The running flights, by key: each leader's result, and its invocation's deadline.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    flights: Mutex<HashMap<IdempotencyKey, (Slot, SystemTime)>>,
}

/// Keys whose handler failed in one batch, with the payload hash of the record that failed,
/// so that later records of the same batch with that key do not run it again.
#[derive(Debug, Default)]
pub(crate) struct FailureMemo {
    keys: Mutex<HashMap<IdempotencyKey, Option<String>>>,
}

tokio::task_local! {
    /// The failure memo of the batch being processed on this task.
    static BATCH_FAILURES: Arc<FailureMemo>;
}

/// Runs `batch` with a failure memo of its own: the memo lives exactly as long as one batch.
/// Records processed outside such a scope have no memo.
pub(crate) async fn within_batch<F: Future>(batch: F) -> F::Output {
    BATCH_FAILURES.scope(Arc::default(), batch).await
}

/// Notes that the handler failed for `key` (with the given stored payload hash) in the
/// current batch.
pub(crate) fn record_failure(key: &IdempotencyKey, validation: Option<String>) {
    let _ = BATCH_FAILURES.try_with(|memo| {
        memo.keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone(), validation);
    });
}

/// Whether the current task processes a batch (it has a failure memo).
pub(crate) fn in_a_batch() -> bool {
    BATCH_FAILURES.try_with(|_| ()).is_ok()
}

/// The handler already failed for `key` in the current batch: the payload hash of the
/// record that failed.
pub(crate) fn failed_earlier(key: &IdempotencyKey) -> Option<Option<String>> {
    BATCH_FAILURES
        .try_with(|memo| {
            memo.keys
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(key)
                .cloned()
        })
        .ok()
        .flatten()
}

pub(crate) enum Join {
    Leader(FlightGuard),
    /// The leader's result, and the deadline of the leader's invocation: past it, the
    /// leader's lease is over in the store (and a leader no batch cut off may still run).
    Follower(Slot, SystemTime),
}

impl InFlight {
    /// Joins the flight of `key`, leading it (until `deadline`, the invocation's) when none
    /// runs.
    pub(crate) fn join(self: &Arc<Self>, key: &IdempotencyKey, deadline: SystemTime) -> Join {
        let mut flights = self.flights.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((slot, leader_deadline)) = flights.get(key) {
            return Join::Follower(slot.clone(), *leader_deadline);
        }
        let (sender, receiver) = watch::channel(None);
        flights.insert(key.clone(), (receiver, deadline));
        Join::Leader(FlightGuard {
            key: key.clone(),
            sender,
            flights: Arc::clone(self),
        })
    }
}

/// Held by the leader; tells the followers how it ended, also when dropped early (panic or
/// cancellation: then `NotStarted`).
pub(crate) struct FlightGuard {
    key: IdempotencyKey,
    sender: watch::Sender<Option<FlightResult>>,
    flights: Arc<InFlight>,
}

impl FlightGuard {
    pub(crate) fn finish(self, result: FlightResult) {
        self.sender.send_replace(Some(result));
    }
}

impl Drop for FlightGuard {
    fn drop(&mut self) {
        if self.sender.borrow().is_none() {
            self.sender.send_replace(Some(FlightResult::NotStarted));
        }
        let mut flights = self
            .flights
            .flights
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        flights.remove(&self.key);
    }
}

/// Waits for the leader followed by `slot`.
pub(crate) async fn wait(mut slot: Slot) -> FlightResult {
    match slot.wait_for(Option::is_some).await {
        Ok(result) => result.clone().unwrap_or(FlightResult::NotStarted),
        Err(_) => FlightResult::NotStarted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn followers_get_the_leaders_result_and_the_slot_is_freed() {
        let flights = Arc::new(InFlight::default());
        let key = IdempotencyKey::from_stored("k");
        let Join::Leader(guard) = flights.join(&key, SystemTime::UNIX_EPOCH) else {
            panic!("first joiner leads")
        };
        let Join::Follower(slot, _) = flights.join(&key, SystemTime::UNIX_EPOCH) else {
            panic!("second joiner follows")
        };
        let done = FlightResult::Completed {
            data: "1".into(),
            validation: None,
        };
        guard.finish(done.clone());
        assert_eq!(wait(slot).await, done);
        assert!(matches!(
            flights.join(&key, SystemTime::UNIX_EPOCH),
            Join::Leader(_)
        ));
    }

    #[tokio::test]
    async fn failures_are_remembered_for_one_batch_only() {
        let key = IdempotencyKey::from_stored("k");
        within_batch(async {
            assert_eq!(failed_earlier(&key), None);
            record_failure(&key, Some("v2:h".into()));
            assert_eq!(failed_earlier(&key), Some(Some("v2:h".into())));
        })
        .await;
        within_batch(async { assert_eq!(failed_earlier(&key), None) }).await;
        // Outside a batch nothing is remembered.
        record_failure(&key, None);
        assert_eq!(failed_earlier(&key), None);
    }

    #[tokio::test]
    async fn a_dropped_leader_means_not_started() {
        let flights = Arc::new(InFlight::default());
        let key = IdempotencyKey::from_stored("k");
        let leader = flights.join(&key, SystemTime::UNIX_EPOCH);
        let Join::Follower(slot, _) = flights.join(&key, SystemTime::UNIX_EPOCH) else {
            panic!("second joiner follows")
        };
        drop(leader);
        assert_eq!(wait(slot).await, FlightResult::NotStarted);
    }
}
