//! Admission: what happens to a record before the store is asked. Its key and payload hash
//! are derived; then the local cache, the batch's earlier failures or the record running
//! with the same key in this process (single flight) may answer it; otherwise this call
//! [claims](Claim) it and goes on to the store.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use lambda_runtime::LambdaEvent;
use serde::de::DeserializeOwned;

use super::batch_scope::BatchRecord;
use super::in_flight::{self, FailureMemo, FlightGuard, FlightResult, Join};
use super::known_answer::{answer_known, failed_in_this_batch, mismatched};
use super::precheck::{BatchLookup, LookedUp};
use super::protocol::Protocol;
use super::record_key::{derive, NotDerived};
use super::store_call::within_deadline;
use super::stored_result::{replay_failure, replayed};
use crate::clock::{Clock, Deadline};
use crate::config::Config;
use crate::error::Error;
use crate::hooks::ReplaySource;
use crate::input::Input;
use crate::key::PayloadHash;
use crate::key::{IdempotencyKey, KeyError, KeyExtractor};
use crate::outcome::Processed;
use crate::record::{decide, Decision, Record, Status};
use crate::store::Store;

/// How long before its own deadline a record waiting for another of this process with the
/// same key stops waiting and answers "in progress": the answer margin, so that an
/// invocation outside a batch (a direct invocation, an HTTP request) answers in time too.
/// An idempotent function's call waits to its deadline, its lease's end.
const FOLLOWER_MARGIN: Duration = crate::clock::ANSWER_MARGIN;

/// A record admitted to the store: its key is derived and this call leads its flight.
pub(crate) struct Claim {
    pub(crate) key: IdempotencyKey,
    pub(crate) validation: Option<PayloadHash>,
    pub(crate) deadline: Deadline,
    /// The batch's pre-check found the record in progress in a read older than this
    /// record's turn: the lease may have ended since (completed, released). A driver that
    /// runs the handler before its conditional write reads the record again first.
    pub(crate) held_before_turn: bool,
    flight: Option<FlightGuard>,
    /// The keys whose handler failed in the record's batch (none outside a batch).
    failures: Option<Arc<FailureMemo>>,
}

impl Claim {
    /// The payload hash as it is stored.
    pub(crate) fn stored_validation(&self) -> Option<String> {
        self.validation.as_ref().map(|v| v.as_str().to_string())
    }

    /// Tells the records waiting on this one how it ended.
    pub(crate) fn finish(&mut self, result: FlightResult) {
        if let (FlightResult::HandlerFailed { validation }, Some(failures)) =
            (&result, &self.failures)
        {
            failures.record(&self.key, validation.clone());
        }
        if let Some(guard) = self.flight.take() {
            guard.finish(result);
        }
    }

    /// The handler failed (retryably) for this record.
    pub(crate) fn handler_failed(&mut self) {
        let validation = self.stored_validation();
        self.finish(FlightResult::HandlerFailed { validation });
    }

    /// The handler ran and its result (in the stored form `data`) is stored until
    /// `expiration_secs`.
    pub(crate) fn executed<St, K, C, T>(
        &mut self,
        protocol: &Protocol<St, K, C>,
        value: T,
        data: String,
        expiration_secs: u64,
    ) -> Result<Processed<T>, Error> {
        protocol.local.remember(Record {
            key: self.key.clone(),
            status: Status::Completed,
            expiration_secs,
            lease_expiration_ms: None,
            owner: None,
            data: Some(data.clone()),
            validation: self.stored_validation(),
        });
        let validation = self.stored_validation();
        self.finish(FlightResult::Completed { data, validation });
        Ok(Processed::Executed(value))
    }

    /// The record as the store holds it now, if it can be read within the deadline.
    pub(crate) async fn stored_now<St: Store, K, C: Clock>(
        &self,
        protocol: &Protocol<St, K, C>,
    ) -> Option<Record> {
        let (store, key) = (&protocol.store, &self.key);
        let read = within_deadline(&protocol.clock, self.deadline, || store.get(key)).await;
        read.ok().flatten()
    }

    /// The answer for a record the store holds already, or `None` when it changed
    /// underneath and the write should be tried again.
    pub(crate) fn answer_existing<St, K, C, T: DeserializeOwned>(
        &mut self,
        protocol: &Protocol<St, K, C>,
        existing: Record,
        now: SystemTime,
    ) -> Option<Result<Processed<T>, Error>> {
        let key = self.key.clone();
        match decide(&existing, now, self.validation.as_ref()) {
            Decision::Replay { data } => {
                let replayed =
                    replayed(&protocol.config, &key, data.as_deref(), ReplaySource::Store);
                self.finish(FlightResult::Completed {
                    data: data.unwrap_or_else(|| "null".into()),
                    validation: existing.validation.clone(),
                });
                protocol.local.remember(existing);
                Some(Ok(replayed))
            }
            Decision::ReplayFailure { data } => {
                let failure = replay_failure(data.as_deref());
                self.finish(FlightResult::FailedPermanently {
                    data: data.unwrap_or_else(|| "null".into()),
                    validation: existing.validation.clone(),
                });
                protocol.local.remember(existing);
                Some(Err(failure))
            }
            Decision::InProgress => Some(Err(Error::InProgress {
                key,
                lease_ends_ms: existing.lease_expiration_ms,
            })),
            Decision::PayloadMismatch => Some(Err(Error::PayloadMismatch { key })),
            Decision::Retry => None,
        }
    }
}

/// A claimed record on its way to its handler kind's driver.
pub(crate) struct Claimed<St, K, C, S, I> {
    pub(crate) protocol: Arc<Protocol<St, K, C>>,
    /// The handler.
    pub(crate) inner: S,
    pub(crate) event: LambdaEvent<I>,
    pub(crate) claim: Claim,
}

impl<St, K, C, S, I> Claimed<St, K, C, S, I> {
    /// The protocol, the handler, the event and the claim.
    #[allow(clippy::type_complexity)]
    pub(crate) fn into_parts(self) -> (Arc<Protocol<St, K, C>>, S, LambdaEvent<I>, Claim) {
        (self.protocol, self.inner, self.event, self.claim)
    }
}

/// How admission ended.
enum Admission<T> {
    /// The record is answered already (replayed, rejected, shared with the flight leader).
    Answered(Result<Processed<T>, Error>),
    /// No key, and processing without idempotency was chosen.
    Unprotected(KeyError),
    /// Go on to the store with this claim.
    Claimed(Claim),
}

/// Admits `record` (of its batch, if any), then drives its claim with `claimed`, or hands a
/// record without a key (processing without idempotency chosen) to `unprotected`. Each gets the handler `inner`.
/// The claimed record's future is boxed: its driver (the lease, the handler, the final
/// write) makes a future of kilobytes, which a record answered at admission (a duplicate)
/// then never builds or moves.
pub(crate) async fn admitted<St, K, C, I, S, T, D, DF, U, UF>(
    protocol: Arc<Protocol<St, K, C>>,
    inner: S,
    record: BatchRecord<I>,
    claimed: D,
    unprotected: U,
) -> Result<Processed<T>, Error>
where
    St: Store,
    K: KeyExtractor<I>,
    C: Clock,
    I: Input,
    T: DeserializeOwned,
    D: FnOnce(Claimed<St, K, C, S, I>) -> DF,
    DF: Future<Output = Result<Processed<T>, Error>>,
    U: FnOnce(Arc<Protocol<St, K, C>>, S, LambdaEvent<I>, KeyError) -> UF,
    UF: Future<Output = Result<Processed<T>, Error>>,
{
    let BatchRecord { event, batch } = record;
    // Derives the record's key and payload hash, then answers it from the cache, the batch's
    // failures, the pre-check or the flight leader when it can, or claims it.
    let admission = async {
        let (protocol, event, batch) = (&*protocol, &event, batch.as_deref());
        let failures = batch.map(|batch| &batch.failures);
        // A record the batch's pre-check offered had its key derived with the others already.
        let offer = batch.map(|batch| &batch.offer);
        let mut lookup = BatchLookup::new(protocol, offer, &event.context);
        let derived = match lookup.derived(&event.payload) {
            Some(derived) => Ok(derived),
            None => derive(
                &protocol.key,
                &protocol.config,
                &event.payload,
                &event.context,
            ),
        };
        let (key, validation) = match derived {
            Ok(derived) => derived,
            Err(NotDerived::Unprotected(err)) => return Admission::Unprotected(err),
            Err(NotDerived::Failed(err)) => return Admission::Answered(Err(err)),
        };
        tracing::Span::current().record("idempotency_key", key.as_str());
        let now = protocol.clock.now();
        let memo = failures.map(|failures| &**failures);
        if let Some(answer) = answer_known(protocol, &key, validation.as_ref(), now, memo) {
            return Admission::Answered(answer);
        }
        // Records the source delivered before were looked up together when the batch began. A
        // lease found there may be held by another invocation of this process: that one is
        // followed below, rather than answered "in progress" at once. A lease found before this
        // record's turn is left to its conditional write, which reads it as it is now.
        let mut held = None;
        let mut held_before_turn = false;
        match lookup.found(&key).await {
            Some(LookedUp::Record(stored)) => {
                let now = protocol.clock.now();
                match answer_found(protocol, &key, validation.as_ref(), &stored, now) {
                    Some(Err(in_progress @ Error::InProgress { .. })) => held = Some(in_progress),
                    Some(answer) => return Admission::Answered(answer),
                    None => {}
                }
            }
            Some(LookedUp::HeldBeforeTurn) => held_before_turn = true,
            None => {}
        }
        let deadline = Deadline::of(event.context.deadline, now);
        let joined = join_flight(protocol, &key, validation.as_ref(), deadline, held, memo).await;
        let flight = match joined {
            Joined::Leading(guard) => Some(guard),
            Joined::Answered(answer) => return Admission::Answered(answer),
        };
        Admission::Claimed(Claim {
            key,
            validation,
            deadline,
            held_before_turn,
            flight,
            failures: failures.cloned(),
        })
    };
    match admission.await {
        Admission::Answered(answer) => answer,
        Admission::Unprotected(err) => unprotected(protocol, inner, event, err).await,
        Admission::Claimed(claim) => {
            let record = Claimed {
                protocol,
                inner,
                event,
                claim,
            };
            Box::pin(claimed(record)).await
        }
    }
}

/// A handler with writes meets a record without a key: the writes commit with the record,
/// so it fails with the key error instead of running unprotected.
pub(crate) async fn key_required<P, S, I, T>(
    _protocol: P,
    _inner: S,
    _event: LambdaEvent<I>,
    err: KeyError,
) -> Result<Processed<T>, Error> {
    Err(Error::Key(err))
}

/// How a record joined its key's flight in this process.
enum Joined<T> {
    /// It leads the flight: it goes on to the store.
    Leading(FlightGuard),
    /// It is answered: by the leader it followed, or "in progress".
    Answered(Result<Processed<T>, Error>),
}

/// Leads the flight of `key` in this process, or follows the record leading it: the flight
/// to lead, or the answer (the leader's, when it is this record's; "in progress" when the
/// wait ran out, or when `held`, the pre-check's, is a lease no record of this process
/// holds). A follower waits until the end of the leader's lease at most ([`flight_end`]:
/// past it, the store decides) and until [`FOLLOWER_MARGIN`] before its own deadline (a
/// function call: its own deadline, none for `call_with_lease`), then joins again: the flight is then led anew, by this
/// record or a record of its batch with the same key, so that a batch still runs a key once.
/// `failures`: the keys whose handler failed in the record's batch.
async fn join_flight<St, K, C, T>(
    protocol: &Protocol<St, K, C>,
    key: &IdempotencyKey,
    validation: Option<&PayloadHash>,
    deadline: Deadline,
    mut held: Option<Error>,
    failures: Option<&FailureMemo>,
) -> Joined<T>
where
    C: Clock,
    T: DeserializeOwned,
{
    loop {
        // A record of this batch with the key may have failed while this one waited (for the
        // pre-check's lookup, or for the flight's leader).
        if let Some(failed) = failures.and_then(|f| failed_in_this_batch(f, key, validation)) {
            return Joined::Answered(Err(failed));
        }
        let now = protocol.clock.now();
        let held_until = flight_end(&protocol.config, deadline, now);
        let joined = protocol.local.in_flight.join(key, held_until, now);
        let (slot, leader_deadline) = match (joined, held.take()) {
            // No record of this process holds the lease the pre-check found.
            (Join::Leader(_), Some(in_progress)) => return Joined::Answered(Err(in_progress)),
            (Join::Leader(guard), None) => return Joined::Leading(guard),
            // Once followed, the lease found was most likely that leader's: the store decides.
            (Join::Follower(slot, leader_deadline), _) => (slot, leader_deadline),
        };
        // Worked out by followers only: a leader's path stays as it was.
        let margin = if protocol.config.is_a_function() {
            Duration::ZERO
        } else {
            FOLLOWER_MARGIN
        };
        let own_limit = deadline.before(margin);
        let leader_over = in_flight::lease_over(leader_deadline);
        let result = tokio::select! {
            result = in_flight::wait(slot) => Some(result),
            () = protocol.clock.sleep_until(own_limit.min(leader_over)) => None,
        };
        if let Some(result) = result {
            if let Some(answer) = follow(&protocol.config, key, validation, result, failures) {
                return Joined::Answered(answer);
            }
        } else if protocol.clock.now() >= own_limit {
            return Joined::Answered(Err(Error::InProgress {
                key: key.clone(),
                lease_ends_ms: None,
            }));
        }
    }
}

/// When the lease a leader taking the flight at `now` holds in the store ends: at the
/// invocation deadline, or earlier under a lease cap ([`Config::with_max_lease`], an
/// idempotent function's `call_with_lease`), so that a leader stuck past its lease is not
/// waited for longer than the store holds its key. With a heartbeat the lease is extended
/// while the leader runs: then the deadline.
fn flight_end(config: &Config, deadline: Deadline, now: SystemTime) -> SystemTime {
    if config.heartbeat_period().is_some() {
        return deadline.time();
    }
    let lease_ms = super::heartbeat::lease_end_ms(config, deadline, now);
    std::time::UNIX_EPOCH + Duration::from_millis(lease_ms)
}

/// The answer for a record the batch's pre-check found in the store, or `None` when it can
/// be taken over (the conditional write then decides). No write is made: a completed record
/// replays, a failed one replays its failure, a live lease answers "in progress" (the
/// pre-check gives a lease only when it read it in this record's turn).
fn answer_found<St, K, C, T: DeserializeOwned>(
    protocol: &Protocol<St, K, C>,
    key: &IdempotencyKey,
    validation: Option<&PayloadHash>,
    stored: &Record,
    now: SystemTime,
) -> Option<Result<Processed<T>, Error>> {
    let answer = match decide(stored, now, validation) {
        Decision::Retry => return None,
        Decision::Replay { data } => Ok(replayed(
            &protocol.config,
            key,
            data.as_deref(),
            ReplaySource::Store,
        )),
        Decision::ReplayFailure { data } => Err(replay_failure(data.as_deref())),
        Decision::PayloadMismatch => Err(Error::PayloadMismatch { key: key.clone() }),
        Decision::InProgress => Err(Error::InProgress {
            key: key.clone(),
            lease_ends_ms: stored.lease_expiration_ms,
        }),
    };
    protocol.local.remember_copy(stored);
    Some(answer)
}

/// A follower's answer from how its leader ended, or `None` when the leader did not get as
/// far as the handler (the follower then goes to the store itself). `failures`: the keys
/// whose handler failed in the follower's batch (none outside a batch).
fn follow<T: DeserializeOwned>(
    config: &Config,
    key: &IdempotencyKey,
    validation: Option<&PayloadHash>,
    result: FlightResult,
    failures: Option<&FailureMemo>,
) -> Option<Result<Processed<T>, Error>> {
    match result {
        FlightResult::NotStarted => None,
        // A handler failure is kept by the leader's batch alone (README: what a batch learns
        // about failed keys stays with that batch): a follower in another invocation's batch
        // goes to the store itself. One in the same batch finds it in the memo; one outside
        // any batch (an HTTP request) fails with it.
        FlightResult::HandlerFailed { .. }
            if failures.is_some_and(|f| f.failed_earlier(key).is_none()) =>
        {
            None
        }
        FlightResult::Completed { validation: s, .. }
        | FlightResult::FailedPermanently { validation: s, .. }
        | FlightResult::HandlerFailed { validation: s }
            if mismatched(s.as_deref(), validation) =>
        {
            Some(Err(Error::PayloadMismatch { key: key.clone() }))
        }
        FlightResult::Completed { data, .. } => Some(Ok(replayed(
            config,
            key,
            Some(&data),
            ReplaySource::SameProcess,
        ))),
        FlightResult::FailedPermanently { data, .. } => Some(Err(replay_failure(Some(&data)))),
        FlightResult::HandlerFailed { .. } => Some(Err(Error::SameKeyFailed { key: key.clone() })),
    }
}
