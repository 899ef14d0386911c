//! Single flight per key inside one process: records of a batch that share a key run the
//! handler once; the others wait for it and take its result.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

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
    /// The leader ran the handler and it failed: the followers must not run it again in
    /// this batch.
    HandlerFailed,
    /// The leader did not get as far as the handler (locked, rejected, store error,
    /// cancelled): the followers go through the store themselves.
    NotStarted,
}

type Slot = watch::Receiver<Option<FlightResult>>;

#[derive(Debug, Default)]
pub(crate) struct InFlight {
    flights: Mutex<HashMap<IdempotencyKey, Slot>>,
    failures: Mutex<FailureMemo>,
}

/// Keys whose handler failed in the current invocation, so that later records of the same
/// batch with that key do not run it again. Reset when another invocation shows up, which
/// bounds it to one batch.
#[derive(Debug, Default)]
struct FailureMemo {
    request_id: String,
    keys: HashSet<IdempotencyKey>,
}

pub(crate) enum Join {
    Leader(FlightGuard),
    Follower(Slot),
}

impl InFlight {
    /// Notes that the handler failed for `key` in invocation `request_id`.
    pub(crate) fn record_failure(&self, request_id: &str, key: &IdempotencyKey) {
        let mut memo = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        if memo.request_id != request_id {
            memo.request_id = request_id.to_string();
            memo.keys.clear();
        }
        memo.keys.insert(key.clone());
    }

    /// The handler already failed for `key` in invocation `request_id`.
    pub(crate) fn failed_earlier(&self, request_id: &str, key: &IdempotencyKey) -> bool {
        let memo = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        memo.request_id == request_id && memo.keys.contains(key)
    }

    pub(crate) fn join(self: &Arc<Self>, key: &IdempotencyKey) -> Join {
        let mut flights = self.flights.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = flights.get(key) {
            return Join::Follower(slot.clone());
        }
        let (sender, receiver) = watch::channel(None);
        flights.insert(key.clone(), receiver);
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
        let Join::Leader(guard) = flights.join(&key) else {
            panic!("first joiner leads")
        };
        let Join::Follower(slot) = flights.join(&key) else {
            panic!("second joiner follows")
        };
        let done = FlightResult::Completed {
            data: "1".into(),
            validation: None,
        };
        guard.finish(done.clone());
        assert_eq!(wait(slot).await, done);
        assert!(matches!(flights.join(&key), Join::Leader(_)));
    }

    #[test]
    fn failures_are_remembered_for_one_invocation_only() {
        let flights = InFlight::default();
        let key = IdempotencyKey::from_stored("k");
        flights.record_failure("req-1", &key);
        assert!(flights.failed_earlier("req-1", &key));
        assert!(!flights.failed_earlier("req-2", &key));
        flights.record_failure("req-2", &IdempotencyKey::from_stored("other"));
        assert!(!flights.failed_earlier("req-1", &key));
    }

    #[tokio::test]
    async fn a_dropped_leader_means_not_started() {
        let flights = Arc::new(InFlight::default());
        let key = IdempotencyKey::from_stored("k");
        let leader = flights.join(&key);
        let Join::Follower(slot) = flights.join(&key) else {
            panic!("second joiner follows")
        };
        drop(leader);
        assert_eq!(wait(slot).await, FlightResult::NotStarted);
    }
}
