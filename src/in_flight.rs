//! Single flight per key inside one process: records of a batch that share a key run the
//! handler once; the others wait for it and take its result.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::key::IdempotencyKey;

/// How the leader of a flight ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FlightResult {
    /// The result was stored.
    Completed {
        data: String,
        validation: Option<String>,
    },
    /// Anything else: the followers must not assume a stored result.
    NotCompleted,
}

type Slot = watch::Receiver<Option<FlightResult>>;

#[derive(Debug, Default)]
pub(crate) struct InFlight {
    flights: Mutex<HashMap<IdempotencyKey, Slot>>,
}

pub(crate) enum Join {
    Leader(FlightGuard),
    Follower(Slot),
}

impl InFlight {
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
/// cancellation: then `NotCompleted`).
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
            self.sender.send_replace(Some(FlightResult::NotCompleted));
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
        Ok(result) => result.clone().unwrap_or(FlightResult::NotCompleted),
        Err(_) => FlightResult::NotCompleted,
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

    #[tokio::test]
    async fn a_dropped_leader_means_not_completed() {
        let flights = Arc::new(InFlight::default());
        let key = IdempotencyKey::from_stored("k");
        let leader = flights.join(&key);
        let Join::Follower(slot) = flights.join(&key) else {
            panic!("second joiner follows")
        };
        drop(leader);
        assert_eq!(wait(slot).await, FlightResult::NotCompleted);
    }
}
