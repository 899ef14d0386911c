//! Faults of the final write itself, on the embedded store: a completion refused as invalid
//! (nothing applied) and a user's store that panics while completing. Each record is
//! checked per delivery: its outcome, how often its handler ran, and its stored record.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::batch::{BatchProcessor, BatchReport};
use lambda_idempotency::clock::{Clock, ManualClock};
use lambda_idempotency::key::IdempotencyKey;
use lambda_idempotency::record::Status;
use lambda_idempotency::store::{InMemoryStore, Store};
use lambda_idempotency::{Config, IdempotencyLayer, Outcome};
use lambda_idempotency_test_support::faulty_store::{FaultyStore, Inject};
use lambda_idempotency_test_support::{invocation, outcomes, reported};

const REMAINING: Duration = Duration::from_secs(30);

fn batch(ids: &[&str]) -> SqsEvent {
    let mut event = SqsEvent::default();
    for id in ids {
        let mut message = SqsMessage::default();
        message.message_id = Some((*id).into());
        message.body = Some("{}".into());
        event.records.push(message);
    }
    event
}

/// A store with faults, a manual clock, and a handler that counts its runs per message.
struct Rig {
    store: FaultyStore<InMemoryStore>,
    clock: ManualClock,
    runs: Arc<AtomicUsize>,
}

impl Rig {
    fn new() -> Self {
        Self {
            store: FaultyStore::new(InMemoryStore::new()),
            clock: ManualClock::starting_now(),
            runs: Arc::default(),
        }
    }

    async fn deliver(&self, ids: &[&str]) -> BatchReport<u32> {
        let layer = IdempotencyLayer::new(self.store.clone())
            .with_clock(self.clock.clone())
            .with_config(Config::new().with_key_prefix("faults"));
        let runs = self.runs.clone();
        let handler = layer.handler(move |_message: SqsMessage| {
            let runs = runs.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, std::io::Error>(7)
            }
        });
        BatchProcessor::new(handler)
            .with_clock(self.clock.clone())
            .process(invocation(batch(ids), self.clock.now(), REMAINING))
            .await
    }

    async fn status(&self, id: &str) -> Option<Status> {
        let key = IdempotencyKey::derive("faults", id.as_bytes());
        self.store.inner.get(&key).await.unwrap().map(|r| r.status)
    }
}

/// Nothing was applied and sending the completion again cannot help: the lease is released
/// at once (as for a handler's invalid writes), so the redelivery runs the handler again
/// instead of meeting a lease held by nobody until the deadline.
#[tokio::test]
async fn a_completion_refused_as_invalid_releases_the_lease() {
    let rig = Rig::new();
    rig.store.inject(Inject::CompleteInvalid);
    let first = rig.deliver(&["m-1"]).await;
    assert_eq!(outcomes(&first), [Outcome::Rejected]);
    assert_eq!(reported(&first), ["m-1"]);
    assert_eq!(rig.runs.load(Ordering::SeqCst), 1);
    assert_eq!(
        rig.store.calls.complete.load(Ordering::SeqCst),
        1,
        "not resent"
    );
    assert_eq!(rig.store.calls.release.load(Ordering::SeqCst), 1);
    assert_eq!(rig.status("m-1").await, None, "the lease was released");
    // Redelivered within the first invocation's deadline.
    rig.clock.advance(Duration::from_secs(1));
    let again = rig.deliver(&["m-1"]).await;
    assert_eq!(outcomes(&again), [Outcome::Executed]);
    assert_eq!(rig.runs.load(Ordering::SeqCst), 2);
    assert_eq!(rig.status("m-1").await, Some(Status::Completed));
}

/// A user's store that panics fails the record it panicked for, alone: the batch answers,
/// the other record completes, and only the panicked one is reported.
#[tokio::test]
async fn a_store_that_panics_fails_only_its_record() {
    let rig = Rig::new();
    // The first completion of the batch panics, whichever record it is for.
    rig.store.inject(Inject::CompletePanics);
    let report = rig.deliver(&["m-1", "m-2"]).await;
    let mut ended = outcomes(&report);
    ended.sort();
    assert_eq!(ended, [Outcome::Executed, Outcome::Failed]);
    assert_eq!(rig.runs.load(Ordering::SeqCst), 2);
    let failed = report
        .records
        .iter()
        .find(|r| r.outcome == Outcome::Failed)
        .unwrap();
    let panicked = failed.item_identifier.clone().unwrap();
    assert_eq!(reported(&report), std::slice::from_ref(&panicked));
    let error = failed.error.as_ref().unwrap();
    assert_eq!(error.error_type(), "Idempotency.HandlerPanic");
    // The panicked record keeps its lease until the deadline; the other one completed.
    let other = if panicked == "m-1" { "m-2" } else { "m-1" };
    assert_eq!(rig.status(&panicked).await, Some(Status::InProgress));
    assert_eq!(rig.status(other).await, Some(Status::Completed));
}
