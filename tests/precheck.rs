//! The redelivered-record pre-check on the embedded store: a lookup that fails loses
//! nothing (the records go on to their conditional writes), and a batch that runs in order
//! (a FIFO queue) looks its records up once. Each delivery is checked: outcomes, handler
//! runs, store calls, `batchItemFailures`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::batch::{BatchProcessor, BatchRecord, BatchReport, Precheck, Scheduling};
use lambda_idempotency::clock::{epoch_ms, epoch_secs};
use lambda_idempotency::clock::{Clock, ManualClock};
use lambda_idempotency::key::{IdempotencyKey, KeyError, KeyExtractor};
use lambda_idempotency::record::{OwnerToken, Status};
use lambda_idempotency::store::{
    Acquire, AcquireRequest, CompleteRequest, Fenced, InMemoryStore, Store,
};
use lambda_idempotency::{CommitStrategy, Completion, Config, IdempotencyLayer, Outcome};
use lambda_idempotency_test_support::faulty_store::{FaultyStore, Inject};
use lambda_idempotency_test_support::{invocation, outcomes, reported};

const REMAINING: Duration = Duration::from_secs(30);

/// Messages `ids`, received `receive_count` times so far, on a FIFO queue when `fifo`.
fn batch(ids: &[&str], receive_count: u32, fifo: bool) -> SqsEvent {
    let mut event = SqsEvent::default();
    for id in ids {
        let mut message = SqsMessage::default();
        message.message_id = Some((*id).into());
        message.body = Some("{}".into());
        message
            .attributes
            .insert("ApproximateReceiveCount".into(), receive_count.to_string());
        if fifo {
            message.event_source_arn = Some("arn:aws:sqs:us-east-1:1:orders.fifo".into());
            message
                .attributes
                .insert("MessageGroupId".into(), "g".into());
        }
        event.records.push(message);
    }
    event
}

/// A handler that counts its runs in `runs` and answers 7.
fn counting(
    runs: &Arc<AtomicUsize>,
) -> impl Fn(SqsMessage) -> std::future::Ready<Result<u32, std::io::Error>> + Clone + Send + Sync {
    let runs = runs.clone();
    move |_message| {
        runs.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Ok(7))
    }
}

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

    /// A new process (nothing known locally) handling `event`.
    async fn deliver(&self, event: SqsEvent) -> BatchReport<u32> {
        let layer = IdempotencyLayer::new(self.store.clone())
            .with_clock(self.clock.clone())
            .with_config(Config::new().with_key_prefix("precheck"));
        let handler = layer.handler(counting(&self.runs));
        BatchProcessor::new(handler)
            .with_clock(self.clock.clone())
            .with_precheck(Precheck::Redelivered)
            .process(invocation(event, self.clock.now(), REMAINING))
            .await
    }

    fn calls(&self) -> (usize, usize) {
        let calls = &self.store.calls;
        (
            calls.get_many.load(Ordering::SeqCst),
            calls.acquire.load(Ordering::SeqCst),
        )
    }
}

#[tokio::test]
async fn a_failed_lookup_sends_the_records_to_their_conditional_writes() {
    let rig = Rig::new();
    let first = rig.deliver(batch(&["m-1", "m-2"], 1, false)).await;
    assert_eq!(outcomes(&first), [Outcome::Executed; 2]);
    assert_eq!(rig.calls(), (0, 2), "first deliveries are not looked up");
    rig.store.inject(Inject::GetManyFails);
    let again = rig.deliver(batch(&["m-1", "m-2", "m-3"], 2, false)).await;
    assert_eq!(
        outcomes(&again),
        [Outcome::Replayed, Outcome::Replayed, Outcome::Executed]
    );
    assert!(reported(&again).is_empty());
    assert_eq!(
        rig.runs.load(Ordering::SeqCst),
        3,
        "m-1 and m-2 ran once each"
    );
    assert_eq!(
        rig.calls(),
        (1, 5),
        "one failed lookup, then an acquire each"
    );
    assert!(rig.store.pending().is_empty());
}

/// A service of `LambdaEvent`s alone, put in a batch processor through `EventOnly`, gets
/// each record as a record of no batch: the redelivered records are not looked up together,
/// each goes to its own conditional write and replays from it; nothing runs twice.
#[tokio::test]
async fn records_through_event_only_are_of_no_batch() {
    use lambda_idempotency::batch::EventOnly;
    let rig = Rig::new();
    rig.deliver(batch(&["m-1", "m-2"], 1, false)).await;
    let layer = IdempotencyLayer::new(rig.store.clone())
        .with_clock(rig.clock.clone())
        .with_config(Config::new().with_key_prefix("precheck"));
    let handler = layer.handler(counting(&rig.runs));
    let report = BatchProcessor::new(EventOnly::new(handler))
        .with_clock(rig.clock.clone())
        .with_precheck(Precheck::Always)
        .process(invocation(
            batch(&["m-1", "m-2"], 2, false),
            rig.clock.now(),
            REMAINING,
        ))
        .await;
    assert_eq!(outcomes(&report), [Outcome::Replayed; 2]);
    assert!(reported(&report).is_empty());
    assert_eq!(
        rig.runs.load(Ordering::SeqCst),
        2,
        "each ran once, first time"
    );
    assert_eq!(
        rig.calls(),
        (0, 4),
        "no lookup: an acquire each, both times"
    );
}

/// A layer between the processor and the idempotent service that copies the request (as a
/// retry layer does, `tower::retry::Policy::clone_request`) hands on a record of the same
/// batch: the redelivered records are still looked up together, once. (From review: a
/// `BatchRecord` could not be cloned, and the only copy a user could make was a record of no
/// batch.)
#[tokio::test]
async fn a_copied_request_keeps_its_batch() {
    use tower::ServiceExt;
    let rig = Rig::new();
    rig.deliver(batch(&["m-1", "m-2"], 1, false)).await;
    let layer = IdempotencyLayer::new(rig.store.clone())
        .with_clock(rig.clock.clone())
        .with_config(Config::new().with_key_prefix("precheck"));
    let handler = layer.handler(counting(&rig.runs));
    let copying = tower::service_fn(move |record: BatchRecord<SqsMessage>| {
        let copy = record.clone();
        drop(record);
        handler.clone().oneshot(copy)
    });
    let report = BatchProcessor::new(copying)
        .with_clock(rig.clock.clone())
        .process(invocation(
            batch(&["m-1", "m-2"], 2, false),
            rig.clock.now(),
            REMAINING,
        ))
        .await;
    assert_eq!(outcomes(&report), [Outcome::Replayed; 2]);
    assert_eq!(
        rig.runs.load(Ordering::SeqCst),
        2,
        "each ran once, first time"
    );
    assert_eq!(rig.calls(), (1, 2), "one lookup for both, no acquire");
}

/// A per-record service whose result is not `Send` still runs through `process` (only the
/// processor as a `Service`, handed to the runtime, needs `Send`). (From review: the replay
/// phase's default bound asked for `T: Send`.)
#[tokio::test]
async fn process_takes_a_result_that_is_not_send() {
    use lambda_idempotency::batch::EventOnly;
    use lambda_idempotency::{Error, Processed};
    use std::rc::Rc;
    let service = tower::service_fn(|_event: lambda_runtime::LambdaEvent<SqsMessage>| async {
        Ok::<_, Error>(Processed::Executed(Rc::new(1u32)))
    });
    let clock = ManualClock::starting_now();
    let report = BatchProcessor::new(EventOnly::new(service))
        .with_clock(clock.clone())
        .process(invocation(
            batch(&["m-1"], 1, false),
            clock.now(),
            REMAINING,
        ))
        .await;
    assert_eq!(outcomes(&report), [Outcome::Executed]);
}

#[tokio::test]
async fn a_fifo_batch_in_order_looks_its_records_up_once() {
    let rig = Rig::new();
    rig.deliver(batch(&["m-1", "m-2", "m-3"], 1, true)).await;
    let again = rig
        .deliver(batch(&["m-1", "m-2", "m-3", "m-4"], 2, true))
        .await;
    assert_eq!(
        outcomes(&again),
        [
            Outcome::Replayed,
            Outcome::Replayed,
            Outcome::Replayed,
            Outcome::Executed
        ]
    );
    assert_eq!(rig.runs.load(Ordering::SeqCst), 4);
    assert_eq!(rig.calls(), (1, 4), "one lookup; only m-4 acquired");
}

/// SQS may hand the same message twice in one batch: the first copy takes the key derived
/// for the lookup, the second derives its own, and both replay from the one lookup.
#[tokio::test]
async fn a_message_repeated_in_a_redelivered_batch_replays_twice_from_one_lookup() {
    let rig = Rig::new();
    rig.deliver(batch(&["m-1"], 1, false)).await;
    let again = rig.deliver(batch(&["m-1", "m-1"], 2, false)).await;
    assert_eq!(outcomes(&again), [Outcome::Replayed; 2]);
    assert!(reported(&again).is_empty());
    assert_eq!(rig.runs.load(Ordering::SeqCst), 1, "m-1 ran once, at first");
    assert_eq!(
        rig.calls(),
        (1, 1),
        "one lookup; no acquire for either copy"
    );
}

/// Of two answers for one key (a store breaking `get_many`'s contract), the last is kept,
/// as with the map before (keeping the first, a regression found in review, reported these
/// records locked).
#[tokio::test]
async fn of_two_answers_for_one_key_the_last_is_kept() {
    let rig = Rig::new();
    rig.deliver(batch(&["m-1", "m-2"], 1, false)).await;
    let lease_ends_ms = epoch_ms(rig.clock.now() + Duration::from_secs(60));
    rig.store
        .inject(Inject::GetManyLiveCopyFirst { lease_ends_ms });
    let again = rig.deliver(batch(&["m-1", "m-2"], 2, false)).await;
    assert_eq!(outcomes(&again), [Outcome::Replayed; 2]);
    assert!(reported(&again).is_empty());
    assert_eq!(
        rig.runs.load(Ordering::SeqCst),
        2,
        "each ran once, at first"
    );
    assert!(
        rig.store.pending().is_empty(),
        "the double answer was given"
    );
}

#[tokio::test(start_paused = true)]
async fn first_deliveries_do_not_wait_for_the_lookup() {
    let rig = Rig::new();
    rig.deliver(batch(&["m-1"], 1, false)).await;
    rig.store
        .inject(Inject::GetManySlow(Duration::from_secs(5)));
    let mut mixed = batch(&["m-1"], 2, false);
    mixed.records.extend(batch(&["m-2"], 1, false).records);
    let started = tokio::time::Instant::now();
    let (report, ran_at) = tokio::join!(rig.deliver(mixed), async {
        // m-2 runs while m-1's lookup is still out.
        while rig.runs.load(Ordering::SeqCst) < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        started.elapsed()
    });
    assert_eq!(outcomes(&report), [Outcome::Replayed, Outcome::Executed]);
    assert!(ran_at < Duration::from_secs(5), "m-2 waited {ran_at:?}");
    assert_eq!(
        rig.calls(),
        (1, 2),
        "one lookup (m-1); m-2 and the first m-1 acquired"
    );
}

/// The pre-check's lookups were keyed by the protocol's address. A per-record service
/// built from one of two layers (two stores, same prefix) frees its protocol after its
/// record; the next record's protocol could reuse the address and be answered from the other
/// store's lookup: m1 acknowledged without running against its own store. (Found in review;
/// fails on the code before the fix.)
#[tokio::test]
async fn a_protocol_freed_in_the_batch_never_answers_for_another_store() {
    use tower::ServiceExt;
    let store_a = InMemoryStore::new();
    let store_b = InMemoryStore::new();
    let clock = ManualClock::starting_now();
    let runs = Arc::new(AtomicUsize::new(0));
    let config = Config::new().with_key_prefix("same");
    let layer_a = IdempotencyLayer::new(store_a.clone())
        .with_clock(clock.clone())
        .with_config(config.clone());
    let layer_b = IdempotencyLayer::new(store_b.clone())
        .with_clock(clock.clone())
        .with_config(config);
    let f = counting(&runs);
    // Store A completes m1.
    let seeded = BatchProcessor::new(layer_a.handler(f.clone()))
        .with_clock(clock.clone())
        .process(invocation(batch(&["m1"], 1, false), clock.now(), REMAINING))
        .await;
    assert_eq!(outcomes(&seeded), [Outcome::Executed]);
    // m0 goes to store A, m1 to store B (B has never seen m1).
    let router = tower::service_fn(move |record: BatchRecord<SqsMessage>| {
        let layer = if record.event.payload.message_id.as_deref() == Some("m0") {
            layer_a.clone()
        } else {
            layer_b.clone()
        };
        let f = f.clone();
        async move { layer.handler(f).oneshot(record).await }
    });
    let report = BatchProcessor::new(router)
        .with_clock(clock.clone())
        .with_scheduling(lambda_idempotency::batch::Scheduling::Concurrent { limit: 1 })
        .with_precheck(Precheck::Redelivered)
        .process(invocation(
            batch(&["m0", "m1"], 2, false),
            clock.now(),
            REMAINING,
        ))
        .await;
    assert_eq!(
        outcomes(&report),
        [Outcome::Executed, Outcome::Executed],
        "m1 must run against store B (runs: {})",
        runs.load(Ordering::SeqCst)
    );
}

/// The message id as the key (from the event alone), counting its derivations.
#[derive(Clone)]
struct CountedId(Arc<AtomicUsize>);

impl KeyExtractor<SqsMessage> for CountedId {
    fn key_material(&self, message: &SqsMessage) -> Result<Vec<u8>, KeyError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(message.message_id.clone().unwrap().into_bytes())
    }
}

/// A redelivered record's key and payload hash are derived once: the pre-check derives the
/// offered records' keys together, and each record then reuses its own. (Before, each was
/// derived twice; this fails on that code.)
#[tokio::test]
async fn a_redelivered_record_derives_its_key_once() {
    let store = InMemoryStore::new();
    let clock = ManualClock::starting_now();
    let derivations = Arc::new(AtomicUsize::new(0));
    let deliver = |event: SqsEvent| {
        let key = CountedId(derivations.clone());
        let layer = IdempotencyLayer::new(store.clone())
            .with_clock(clock.clone())
            .with_key(key)
            .with_config(Config::new().with_key_prefix("once"));
        let processor = BatchProcessor::new(
            layer.handler(|_m: SqsMessage| async { Ok::<_, std::io::Error>(7u32) }),
        )
        .with_clock(clock.clone());
        let invocation = invocation(event, clock.now(), REMAINING);
        async move { processor.process(invocation).await }
    };
    deliver(batch(&["m-1", "m-2"], 1, false)).await;
    assert_eq!(derivations.swap(0, Ordering::SeqCst), 2);
    let mut mixed = batch(&["m-1", "m-2"], 2, false);
    mixed.records.extend(batch(&["m-3"], 1, false).records);
    let report = deliver(mixed).await;
    assert_eq!(
        outcomes(&report),
        [Outcome::Replayed, Outcome::Replayed, Outcome::Executed]
    );
    assert_eq!(
        derivations.load(Ordering::SeqCst),
        3,
        "one derivation per record"
    );
}

/// A record that a layer changes on its way to the idempotent service is not the record the
/// pre-check derived a key for: it derives its own, and is answered by its own record.
#[tokio::test]
async fn a_record_changed_on_its_way_derives_its_own_key() {
    use tower::ServiceExt;
    let store = InMemoryStore::new();
    let clock = ManualClock::starting_now();
    let runs = Arc::new(AtomicUsize::new(0));
    let layer = IdempotencyLayer::new(store.clone())
        .with_clock(clock.clone())
        .with_key(lambda_idempotency::key::BodyHash)
        .with_config(Config::new().with_key_prefix("changed"));
    let f = counting(&runs);
    let mut first = batch(&["m-1"], 1, false);
    first.records[0].body = Some(r#"{"n":1}"#.into());
    let seeded = BatchProcessor::new(layer.handler(f.clone()))
        .with_clock(clock.clone())
        .process(invocation(first, clock.now(), REMAINING))
        .await;
    assert_eq!(outcomes(&seeded), [Outcome::Executed]);
    // Redelivered with another body, which a layer puts back to the first one's.
    let rewrite = tower::service_fn(move |mut record: BatchRecord<SqsMessage>| {
        record.event.payload.body = Some(r#"{"n":1}"#.into());
        let service = layer.handler(f.clone());
        async move { service.oneshot(record).await }
    });
    let mut again = batch(&["m-1"], 2, false);
    again.records[0].body = Some(r#"{"n":2}"#.into());
    let report = BatchProcessor::new(rewrite)
        .with_clock(clock.clone())
        .process(invocation(again, clock.now(), REMAINING))
        .await;
    assert_eq!(
        outcomes(&report),
        [Outcome::Replayed],
        "its own key: {{\"n\":1}}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// The invocation that holds m-2's and m-3's leases in
/// [`a_record_completed_elsewhere_before_its_turn_replays`].
const ELSEWHERE: &str = "another-invocation";

/// How a batch of [`a_record_completed_elsewhere_before_its_turn_replays`] runs its records
/// one after another.
#[derive(Debug, Clone, Copy)]
enum InTurn {
    /// A FIFO queue's batch: in order.
    Fifo,
    /// A standard queue's batch with one record at a time: each waits for a slot.
    OneSlot { together: bool },
}

/// m-1, m-2 and m-3 redelivered, m-2 and m-3 held by another invocation's live lease when the
/// batch starts; while m-1 runs (two seconds), that invocation completes m-2 with 9. Answers
/// the report, the handler's runs per message, and the store's calls (`get_many`, `get`,
/// `acquire`, `commit`).
async fn completed_elsewhere_while_m1_runs(
    mode: CommitStrategy,
    in_turn: InTurn,
) -> (
    BatchReport<u32>,
    BTreeMap<String, usize>,
    [usize; 4],
    FaultyStore<InMemoryStore>,
) {
    let store = FaultyStore::new(InMemoryStore::new());
    let clock = ManualClock::starting_now();
    let key = |id: &str| IdempotencyKey::derive("precheck", id.as_bytes());
    let now = clock.now();
    for id in ["m-2", "m-3"] {
        let hold = AcquireRequest {
            key: key(id),
            owner: OwnerToken::new(ELSEWHERE),
            now,
            lease_expiration_ms: epoch_ms(now + Duration::from_secs(60)),
            expiration_secs: epoch_secs(now + Duration::from_secs(3600)),
            validation: None,
        };
        assert_eq!(store.acquire(&hold).await.unwrap(), Acquire::Acquired);
    }
    store.calls.acquire.store(0, Ordering::SeqCst);
    let runs: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
    // The handler: m-1 takes two seconds, in which the other invocation completes m-2.
    let handler = {
        let (store, clock, runs) = (store.clone(), clock.clone(), runs.clone());
        move |message: SqsMessage| {
            let (store, clock, runs) = (store.clone(), clock.clone(), runs.clone());
            async move {
                let id = message.message_id.unwrap();
                *runs.lock().unwrap().entry(id.clone()).or_default() += 1;
                if id == "m-1" {
                    clock.advance(Duration::from_secs(2));
                    let now = clock.now();
                    let complete = CompleteRequest {
                        key: key("m-2"),
                        owner: OwnerToken::new(ELSEWHERE),
                        status: Status::Completed,
                        data: "9".into(),
                        expiration_secs: epoch_secs(now + Duration::from_secs(3600)),
                        now,
                    };
                    let completed = store.inner.complete(&complete).await;
                    assert_eq!(completed.unwrap(), Fenced::Applied);
                }
                Ok::<_, std::io::Error>(7u32)
            }
        }
    };
    let fifo = matches!(in_turn, InTurn::Fifo);
    let event = batch(&["m-1", "m-2", "m-3"], 2, fifo);
    let config = Config::new().with_key_prefix("precheck");
    let layer = IdempotencyLayer::new(store.clone())
        .with_clock(clock.clone())
        .with_config(config);
    let invocation = invocation(event, clock.now(), REMAINING);
    let report = match mode {
        CommitStrategy::Lease => {
            let processor = BatchProcessor::new(layer.handler(handler));
            process_in_turn(processor, &clock, in_turn, invocation).await
        }
        _ => {
            let handler = move |message: SqsMessage| {
                let ran = handler(message);
                async move { ran.await.map(Completion::new) }
            };
            let processor =
                BatchProcessor::new(layer.with_writes().with_commit(mode).handler(handler));
            process_in_turn(processor, &clock, in_turn, invocation).await
        }
    };
    let calls = &store.calls;
    let calls = [
        calls.get_many.load(Ordering::SeqCst),
        calls.get.load(Ordering::SeqCst),
        calls.acquire.load(Ordering::SeqCst),
        calls.commit.load(Ordering::SeqCst),
    ];
    let runs = runs.lock().unwrap().clone();
    (report, runs, calls, store)
}

/// `invocation` through `processor`, its records in turn as `in_turn` says.
async fn process_in_turn<S>(
    processor: BatchProcessor<S>,
    clock: &ManualClock,
    in_turn: InTurn,
    invocation: lambda_runtime::LambdaEvent<SqsEvent>,
) -> BatchReport<u32>
where
    S: tower::Service<
            BatchRecord<SqsMessage>,
            Response = lambda_idempotency::Processed<u32>,
            Error = lambda_idempotency::Error,
        > + lambda_idempotency::batch::BatchReplay<SqsMessage, Value = u32>
        + Clone,
{
    let processor = processor
        .with_precheck(Precheck::Redelivered)
        .with_clock(clock.clone());
    match in_turn {
        InTurn::Fifo => processor.process(invocation).await,
        InTurn::OneSlot { together } => {
            let processor = processor.with_scheduling(Scheduling::Concurrent { limit: 1 });
            processor
                .with_batch_replay(together)
                .process(invocation)
                .await
        }
    }
}

/// A record of a batch that runs its records one after another (a FIFO queue's, or one
/// waiting for a slot) is not answered from a lookup older than its turn: m-2, completed by
/// another invocation while m-1 ran, is replayed with that invocation's result, without
/// running its handler, and acknowledged. m-3, still held, is still locked. (Before the fix,
/// m-2 was answered "in progress" from the lookup made at m-1's turn: locked, reported,
/// and on a FIFO queue m-3 skipped behind it.)
#[tokio::test]
async fn a_record_completed_elsewhere_before_its_turn_replays() {
    let in_turns = [
        InTurn::Fifo,
        InTurn::OneSlot { together: false },
        InTurn::OneSlot { together: true },
    ];
    for mode in [CommitStrategy::Lease, CommitStrategy::Optimistic] {
        for in_turn in in_turns {
            let (report, runs, calls, store) =
                completed_elsewhere_while_m1_runs(mode, in_turn).await;
            let case = format!("{mode:?}, {in_turn:?}");
            assert_eq!(
                outcomes(&report),
                [Outcome::Executed, Outcome::Replayed, Outcome::Locked],
                "{case}"
            );
            let values: Vec<Option<u32>> = report.records.iter().map(|r| r.value).collect();
            assert_eq!(
                values,
                [Some(7), Some(9), None],
                "{case}: m-2 has the other's result"
            );
            assert!(report.records[1].replayed, "{case}");
            assert_eq!(reported(&report), ["m-3"], "{case}: m-2 acknowledged");
            let expected_runs = BTreeMap::from([("m-1".to_string(), 1)]);
            assert_eq!(runs, expected_runs, "{case}: neither m-2 nor m-3 ran");
            // One lookup for the batch. m-2 and m-3 are held when it is made: each reads its
            // record at its own turn (lease mode: its conditional write; optimistic mode, where
            // the handler runs before the write, a read).
            let expected_calls = match mode {
                CommitStrategy::Lease => [1, 0, 3, 0],
                _ => [1, 2, 0, 1],
            };
            assert_eq!(
                calls, expected_calls,
                "{case}: get_many, get, acquire, commit"
            );
            let records = store.inner.records();
            let stored = |id: &str| {
                let key = IdempotencyKey::derive("precheck", id.as_bytes());
                records.iter().find(|r| r.key == key).cloned().unwrap()
            };
            let m2 = stored("m-2");
            assert_eq!(m2.status, Status::Completed, "{case}");
            assert_eq!(m2.owner, Some(OwnerToken::new(ELSEWHERE)), "{case}");
            assert_eq!(m2.data.as_deref(), Some("9"), "{case}");
            let m3 = stored("m-3");
            assert_eq!(m3.status, Status::InProgress, "{case}");
            assert_eq!(m3.owner, Some(OwnerToken::new(ELSEWHERE)), "{case}");
            assert_eq!(stored("m-1").status, Status::Completed, "{case}");
        }
    }
}
