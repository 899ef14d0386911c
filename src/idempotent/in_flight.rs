//! Single flight per key inside one process: records of a batch that share a key run the
//! handler once; the others wait for it and take its result. And the memo of keys whose
//! handler failed in one batch.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
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

/// The running flights, by key.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    flights: Mutex<HashMap<IdempotencyKey, Flight>>,
    /// The number of the next flight.
    next: AtomicU64,
}

/// One leader's flight: its result, its invocation's deadline, and its number (a leader
/// past its deadline is replaced, and must not remove its successor's flight).
#[derive(Debug)]
struct Flight {
    slot: Slot,
    deadline: SystemTime,
    number: u64,
}

/// Keys whose handler failed in one batch, with the payload hash of the record that failed,
/// so that later records of the same batch with that key do not run it again. It lives as
/// long as its batch, and reaches the batch's records in their requests.
#[derive(Debug, Default)]
pub(crate) struct FailureMemo {
    keys: Mutex<HashMap<IdempotencyKey, Option<String>>>,
}

impl FailureMemo {
    /// Notes that the handler failed for `key` (with the given stored payload hash).
    pub(crate) fn record(&self, key: &IdempotencyKey, validation: Option<String>) {
        self.keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone(), validation);
    }

    /// The handler already failed for `key` in this batch: the payload hash of the record
    /// that failed.
    pub(crate) fn failed_earlier(&self, key: &IdempotencyKey) -> Option<Option<String>> {
        self.keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()
    }
}

/// When the lease of a leader whose deadline is `deadline` is over: a lease is live through
/// its last millisecond, so one millisecond after it.
pub(crate) fn lease_over(deadline: SystemTime) -> SystemTime {
    deadline
        .checked_add(std::time::Duration::from_millis(1))
        .unwrap_or(deadline)
}

pub(crate) enum Join {
    Leader(FlightGuard),
    /// The leader's result, and when the leader's lease ends: past it, the leader's lease
    /// is over in the store (and a leader no batch cut off may still run).
    Follower(Slot, SystemTime),
}

impl InFlight {
    /// Joins the flight of `key`, leading it (until `deadline`, when the lease it takes
    /// ends) when none runs, or when its leader's lease is over at `now` (see [`lease_over`]:
    /// that leader, which no batch cut off, is not waited for any more).
    pub(crate) fn join(
        self: &Arc<Self>,
        key: &IdempotencyKey,
        deadline: SystemTime,
        now: SystemTime,
    ) -> Join {
        let mut flights = self.flights.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(flight) = flights.get(key).filter(|f| now < lease_over(f.deadline)) {
            return Join::Follower(flight.slot.clone(), flight.deadline);
        }
        let (sender, receiver) = watch::channel(None);
        let number = self.next.fetch_add(1, Ordering::Relaxed);
        let flight = Flight {
            slot: receiver,
            deadline,
            number,
        };
        flights.insert(key.clone(), flight);
        Join::Leader(FlightGuard {
            key: key.clone(),
            number,
            sender,
            flights: Arc::clone(self),
        })
    }
}

/// Held by the leader; tells the followers how it ended, also when dropped early (panic or
/// cancellation: then `NotStarted`).
pub(crate) struct FlightGuard {
    key: IdempotencyKey,
    number: u64,
    sender: watch::Sender<Option<FlightResult>>,
    flights: Arc<InFlight>,
}

impl FlightGuard {
    pub(crate) fn finish(mut self, result: FlightResult) {
        self.end(result);
    }

    /// Removes the flight, then tells the followers how it ended: a follower that joins
    /// again when told finds the key free, or led anew, never this ended flight.
    fn end(&mut self, result: FlightResult) {
        if self.sender.borrow().is_some() {
            return;
        }
        {
            let mut flights = self
                .flights
                .flights
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            // Its own flight only: a successor may lead the key already.
            if flights
                .get(&self.key)
                .is_some_and(|f| f.number == self.number)
            {
                flights.remove(&self.key);
            }
        }
        self.sender.send_replace(Some(result));
    }
}

impl Drop for FlightGuard {
    fn drop(&mut self) {
        self.end(FlightResult::NotStarted);
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
        let Join::Leader(guard) =
            flights.join(&key, SystemTime::UNIX_EPOCH, SystemTime::UNIX_EPOCH)
        else {
            panic!("first joiner leads")
        };
        let Join::Follower(slot, _) =
            flights.join(&key, SystemTime::UNIX_EPOCH, SystemTime::UNIX_EPOCH)
        else {
            panic!("second joiner follows")
        };
        let done = FlightResult::Completed {
            data: "1".into(),
            validation: None,
        };
        guard.finish(done.clone());
        assert_eq!(wait(slot).await, done);
        assert!(matches!(
            flights.join(&key, SystemTime::UNIX_EPOCH, SystemTime::UNIX_EPOCH),
            Join::Leader(_)
        ));
    }

    #[test]
    fn a_memo_remembers_the_failed_keys_with_their_payload_hash() {
        let key = IdempotencyKey::from_stored("k");
        let memo = FailureMemo::default();
        assert_eq!(memo.failed_earlier(&key), None);
        memo.record(&key, Some("v2:h".into()));
        assert_eq!(memo.failed_earlier(&key), Some(Some("v2:h".into())));
        assert_eq!(FailureMemo::default().failed_earlier(&key), None);
    }

    #[tokio::test]
    async fn a_dropped_leader_means_not_started() {
        let flights = Arc::new(InFlight::default());
        let key = IdempotencyKey::from_stored("k");
        let leader = flights.join(&key, SystemTime::UNIX_EPOCH, SystemTime::UNIX_EPOCH);
        let Join::Follower(slot, _) =
            flights.join(&key, SystemTime::UNIX_EPOCH, SystemTime::UNIX_EPOCH)
        else {
            panic!("second joiner follows")
        };
        drop(leader);
        assert_eq!(wait(slot).await, FlightResult::NotStarted);
    }
}
