//! [`BatchProcessor`]: runs a batch (SQS, Kinesis) through a per-record service, in order
//! when the source asks for it, and builds the partial batch response.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use aws_lambda_events::sqs::SqsEvent;
use futures_util::FutureExt;
use lambda_runtime::LambdaEvent;
use tower::{Service, ServiceExt};
use tracing::Instrument;

mod schedule;

use schedule::Placed;

use super::error::BatchError;
use super::event::BatchEvent;
use super::report::{summarize, BatchReport, RecordReport};
use super::scheduling::Scheduling;
use crate::clock::{epoch_ms, Clock, Deadline, SystemClock};
use crate::error::Error;
use crate::idempotent::batch_replay::{BatchReplay, BatchReplayer, ReplayPhase};
use crate::idempotent::batch_scope::{Batch, BatchRecord};
use crate::outcome::Processed;
use crate::store::{Misconfiguration, StoreError};

/// Which records of a batch are looked up in the store together before they run.
///
/// The lookup is one [`Store::get_many`](crate::store::Store::get_many): a `BatchGetItem` per 100 keys on
/// DynamoDB), so that those found completed replay without a write (in optimistic mode,
/// without running the handler again) and those held under a live lease are reported
/// locked without a write. A lease may end at any moment, so it answers only the records
/// whose turn had begun when the lookup was read: a later one (the next record of an ordered
/// batch, or one that waited for a slot) has its conditional write read the record as it is
/// now (in optimistic mode, a read before its handler runs). What the lookup does not find,
/// or cannot read, goes on to the conditional write as usual. Only records whose service is
/// [`Idempotent`](crate::Idempotent) are looked up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Precheck {
    /// No lookup: every record goes to its conditional write.
    Off,
    /// The default: the records the source delivered before (SQS `ApproximateReceiveCount`
    /// above 1; streams never say). A batch without such records makes no extra call.
    #[default]
    Redelivered,
    /// Every record: one more call for a batch of fresh records, saved many times over when
    /// most records are duplicates that the source does not mark (a producer's retries).
    Always,
}

/// The default time that must remain before the invocation deadline to start a record.
///
/// It is the answer margin ([`ANSWER_MARGIN`], 500 ms) and half a second for the record's store calls
/// at their usual latency and its handler. Every store call is bounded by the deadline
/// itself, so the store client's timeouts need not fit in it; with it, Lambda's default 3 s
/// timeout leaves 2 s to start records.
pub const DEFAULT_DEADLINE_MARGIN: Duration = Duration::from_secs(1);

pub use crate::clock::ANSWER_MARGIN;

/// Runs each record of a batch event through a per-record service, and reports the records
/// to retry in `batchItemFailures`.
///
/// The event is a [`BatchEvent`] (an `SqsEvent`, a `KinesisEvent`, a DynamoDB Streams
/// `Event`), the service normally an [`Idempotent`](crate::Idempotent) one. Each record
/// reaches it as a [`BatchRecord`]: its event, with what its batch knows (a service of
/// `LambdaEvent`s alone goes in through [`EventOnly`](super::EventOnly)).
///
/// It is itself a `Service<LambdaEvent<E>>` answering the event's partial batch response
/// (`SqsBatchResponse`, `KinesisEventResponse`, `DynamoDbEventResponse`), so it can be handed to
/// `lambda_runtime::run` as it is.
///
/// - Each record ends in one [`Outcome`](crate::Outcome); all but the successful ones are reported.
/// - A panic fails its record alone: the handler's is caught by the
///   [`Idempotent`](crate::Idempotent) service, which releases the record's lease; any other
///   (a user's store or clock, a service that is not idempotent) is caught here, per record,
///   and a lease the record took then ends at the deadline. A record is not started when less than the deadline
///   margin (default 1 s) remains before the invocation deadline, and a record still running
///   [`ANSWER_MARGIN`] before the deadline is stopped (its future dropped) and reported
///   [`Outcome::DeadlineNear`](crate::Outcome::DeadlineNear), so the batch always answers in time: Lambda discards a late
///   response and retries the whole batch.
/// - A record to retry that has no identifier (SQS `messageId`, a stream record's sequence
///   number) cannot be reported (an empty `itemIdentifier` makes the source retry the whole
///   batch): [`BatchReport::into_response`] then
///   fails the invocation with [`BatchError::UnreportableFailures`], so the whole batch is
///   retried on purpose; completed records replay their stored results then.
#[derive(Debug)]
pub struct BatchProcessor<S, C = SystemClock, E = SqsEvent, P = ()> {
    service: S,
    scheduling: Scheduling,
    deadline_margin: Duration,
    clock: C,
    log_error_text: bool,
    precheck: Precheck,
    /// How pre-checked records are replayed: `()`, each through its own call.
    replay: P,
    event: PhantomData<fn(E)>,
}

impl<S: Clone, C: Clone, E, P: Clone> Clone for BatchProcessor<S, C, E, P> {
    fn clone(&self) -> Self {
        Self {
            service: self.service.clone(),
            scheduling: self.scheduling,
            deadline_margin: self.deadline_margin,
            clock: self.clock.clone(),
            log_error_text: self.log_error_text,
            precheck: self.precheck,
            replay: self.replay.clone(),
            event: PhantomData,
        }
    }
}

impl<S> BatchProcessor<S> {
    /// A processor of SQS events over `service`: FIFO events in order, others concurrently
    /// (10 at once); a 1 s deadline margin.
    pub fn new(service: S) -> Self {
        Self::of_events(service)
    }
}

#[cfg(feature = "kinesis")]
#[cfg_attr(docsrs, doc(cfg(feature = "kinesis")))]
impl<S> BatchProcessor<S, SystemClock, aws_lambda_events::event::kinesis::KinesisEvent> {
    /// A processor of Kinesis events over `service`: records in order, stopping at the first
    /// that does not succeed; a 1 s deadline margin.
    pub fn kinesis(service: S) -> Self {
        Self::of_events(service)
    }
}

#[cfg(feature = "dynamodb-streams")]
#[cfg_attr(docsrs, doc(cfg(feature = "dynamodb-streams")))]
impl<S> BatchProcessor<S, SystemClock, aws_lambda_events::event::dynamodb::Event> {
    /// A processor of DynamoDB Streams events over `service`: records in order, stopping at
    /// the first that does not succeed; a 1 s deadline margin.
    pub fn dynamodb_streams(service: S) -> Self {
        Self::of_events(service)
    }
}

impl<S, E> BatchProcessor<S, SystemClock, E> {
    fn of_events(service: S) -> Self {
        Self {
            service,
            scheduling: Scheduling::default(),
            deadline_margin: DEFAULT_DEADLINE_MARGIN,
            clock: SystemClock,
            log_error_text: false,
            precheck: Precheck::default(),
            replay: (),
            event: PhantomData,
        }
    }
}

impl<S, C, E, P> BatchProcessor<S, C, E, P> {
    /// Schedules the records of each batch as `scheduling` says (default
    /// [`Scheduling::Auto`], 10 at once).
    pub fn with_scheduling(mut self, scheduling: Scheduling) -> Self {
        self.scheduling = scheduling;
        self
    }

    /// Starts a record only while more than `margin` remains before the deadline (default
    /// [`DEFAULT_DEADLINE_MARGIN`]). An invocation that starts with no more than `margin`
    /// left fails as a whole ([`BatchError::DeadlineTooShort`]): the function's timeout is
    /// too short for it.
    pub fn with_deadline_margin(mut self, margin: Duration) -> Self {
        self.deadline_margin = margin;
        self
    }

    /// Logs each failed record's error text (the error and its sources) besides its
    /// `error_type`. Off by default: handler errors, panic messages and parse errors often
    /// quote the input, and the logs must not carry what the table does not.
    pub fn with_error_text_logged(mut self, log: bool) -> Self {
        self.log_error_text = log;
        self
    }

    /// Looks up the records `precheck` selects before they run (default:
    /// [`Precheck::Redelivered`]).
    pub fn with_precheck(mut self, precheck: Precheck) -> Self {
        self.precheck = precheck;
        self
    }

    /// Reads time from `clock`.
    pub fn with_clock<C2: Clock>(self, clock: C2) -> BatchProcessor<S, C2, E, P> {
        BatchProcessor {
            service: self.service,
            scheduling: self.scheduling,
            deadline_margin: self.deadline_margin,
            clock,
            log_error_text: self.log_error_text,
            precheck: self.precheck,
            replay: self.replay,
            event: PhantomData,
        }
    }

    /// Replays the pre-checked records found completed together, in one pass over a
    /// concurrent batch, instead of each through its own call of the service: the cheapest
    /// answer to a redelivered batch. The first pre-checked record to start runs the replay
    /// phase for all of them: it asks the service once whether it is ready (as each record's
    /// call would), derives their keys and payload hashes, and reads them (the one lookup),
    /// under the records' own guards (stopped at [`ANSWER_MARGIN`], a panic replaying
    /// nothing). Each record then decides at its own turn as its call would (the local cache,
    /// a failure of its key earlier in the batch, the record's expiry, lease and payload),
    /// and a replay calls the response hook and fills the local cache, without the record's
    /// own span, deadline timer, panic guard and admission. The records still start in the
    /// event's order; every record not replayed goes through the service as usual, finds the
    /// lookup without reading again, and ends as it would without batch replay.
    ///
    /// A batch that runs in order (a FIFO queue, a stream) is not replayed together: each of
    /// its records answers at its own turn. Nor are records that are not
    /// [pre-checked](Self::with_precheck).
    ///
    /// For a service that is an [`Idempotent`](crate::Idempotent) one itself (or either of
    /// two), whose answer is the record's answer: a layer around it (one that maps responses
    /// or counts calls) would not see the replayed records.
    ///
    /// With `together` false, every record goes through its own call as without it (the
    /// processor's type is the same either way, so a setting can choose).
    pub fn with_batch_replay(
        self,
        together: bool,
    ) -> BatchProcessor<S, C, E, BatchReplayer<E::Record, S::Value>>
    where
        E: BatchEvent,
        S: BatchReplay<E::Record>,
    {
        BatchProcessor {
            replay: match together {
                true => self.service.batch_replayer(),
                false => BatchReplayer::none(),
            },
            service: self.service,
            scheduling: self.scheduling,
            deadline_margin: self.deadline_margin,
            clock: self.clock,
            log_error_text: self.log_error_text,
            precheck: self.precheck,
            event: PhantomData,
        }
    }
}

impl<S, C, E: BatchEvent, P> BatchProcessor<S, C, E, P> {
    /// Processes every record of `event`.
    pub async fn process<T>(&self, event: LambdaEvent<E>) -> BatchReport<T, E::Response>
    where
        S: Service<BatchRecord<E::Record>, Response = Processed<T>, Error = Error> + Clone,
        C: Clock,
        P: ReplayPhase<E::Record, T>,
        T: 'static,
    {
        let started = self.clock.now();
        let report = self.process_batch(event).await;
        let elapsed = self.clock.now().duration_since(started).unwrap_or_default();
        crate::metrics::batch_latency(elapsed);
        report
    }

    async fn process_batch<T>(&self, event: LambdaEvent<E>) -> BatchReport<T, E::Response>
    where
        S: Service<BatchRecord<E::Record>, Response = Processed<T>, Error = Error> + Clone,
        C: Clock,
        P: ReplayPhase<E::Record, T>,
        T: 'static,
    {
        let LambdaEvent {
            payload,
            mut context,
        } = event;
        let deadline = Deadline::of(context.deadline, self.clock.now());
        // The records' services see the normalised deadline.
        context.deadline = deadline.epoch_ms();
        let records = payload.into_records();
        let now = self.clock.now();
        tracing::debug!(
            records = records.len(),
            deadline_ms = deadline.epoch_ms(),
            now_ms = epoch_ms(now),
            "batch received"
        );
        if !records.is_empty() && deadline.is_within(self.deadline_margin, now) {
            return self.no_time_for_a_record(records, deadline, now);
        }
        // The positions in the batch of the records offered to the pre-check.
        let offered_at: Vec<usize> = match self.precheck {
            Precheck::Off => Vec::new(),
            Precheck::Redelivered => (0..records.len())
                .filter(|&i| crate::input::Input::delivered_before(&records[i]))
                .collect(),
            Precheck::Always => (0..records.len()).collect(),
        };
        // The offered records move to the pre-check's offer, shared with the schedule: a
        // record is copied back only when its own call of the service needs it. What this
        // batch learns (the lookup, the failed keys) stays with this batch.
        let scheduling = self.scheduling.resolve::<E>(&records);
        let (records, offered) = Placed::split(records, &offered_at);
        let scope = BatchScope {
            context,
            deadline,
            misconfigured: OnceLock::new(),
            batch: Arc::new(Batch::new(offered)),
        };
        // Boxed: the records' scheduling makes a future of kilobytes.
        let reports = Box::pin(self.schedule::<T>(scheduling, records, offered_at, &scope)).await;
        let mut report = summarize::<T, E>(reports);
        let failing = scope
            .misconfigured
            .into_inner()
            .or_else(|| misconfigured_for_all(&report.records));
        if let Some(fault) = failing {
            log_misconfiguration(
                &fault,
                "the store is not set up for this function: failing the invocation, so that \
                 the batch is retried once it is fixed",
            );
            report.invocation_error = Some(BatchError::Misconfigured(fault));
        } else if let Some(fault) = report
            .records
            .iter()
            .find_map(|r| r.error.as_ref()?.misconfiguration())
        {
            log_misconfiguration(
                fault,
                "a table of the handler's writes refused some records while others committed: \
                 those records are reported alone",
            );
        }
        report
    }

    /// The report of a batch that cannot start even one record: the invocation has no more
    /// time before `deadline` than the deadline margin. Said once, as an error naming both
    /// figures; every record is reported unstarted and the invocation fails.
    fn no_time_for_a_record<T>(
        &self,
        records: Vec<E::Record>,
        deadline: Deadline,
        now: std::time::SystemTime,
    ) -> BatchReport<T, E::Response> {
        let left_ms = deadline.epoch_ms().saturating_sub(epoch_ms(now));
        let margin_ms = u64::try_from(self.deadline_margin.as_millis()).unwrap_or(u64::MAX);
        let err = BatchError::DeadlineTooShort { left_ms, margin_ms };
        tracing::error!(left_ms, margin_ms, error_type = err.error_type(), "{err}");
        let reports = records
            .iter()
            .map(|record| RecordReport::of(E::item_identifier(record), Err(Error::DeadlineNear)))
            .collect();
        let mut report = summarize::<T, E>(reports);
        report.invocation_error = Some(err);
        report
    }

    /// Runs `record` through its own call of the service. `margin_checked`: the deadline
    /// margin was checked when the record started (it waited for the batch's replays since),
    /// so its call starts whatever time is left, as it would have then. Once a record of the
    /// batch found the store misconfigured, later ones are not started.
    pub(super) async fn process_record<T>(
        &self,
        record: E::Record,
        scope: &BatchScope<E::Record>,
        margin_checked: bool,
    ) -> RecordReport<T>
    where
        S: Service<BatchRecord<E::Record>, Response = Processed<T>, Error = Error> + Clone,
        C: Clock,
    {
        let item_identifier = E::item_identifier(&record);
        let span = tracing::info_span!(
            "batch_record",
            item_identifier = item_identifier.as_deref().unwrap_or("<none>"),
            idempotency_key = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        let deadline = scope.deadline;
        let result = async {
            if let Some(fault) = scope.misconfigured.get() {
                return Err(Error::Store(StoreError::Misconfigured(fault.clone())));
            }
            if !margin_checked && deadline.is_within(self.deadline_margin, self.clock.now()) {
                return Err(Error::DeadlineNear);
            }
            let event = LambdaEvent::new(record, scope.context.clone());
            let request = BatchRecord::of(event, &scope.batch);
            // The service catches its handler's panic (and releases the lease); a panic
            // anywhere else on the record's path (a store, a clock, another service) fails
            // this record alone.
            let mut service = self.service.clone();
            let call = crate::idempotent::catch_panic_async(async move {
                // A record that waits for the service to be ready (a concurrency limit in or
                // around it) begins a new turn once it is: the batch's lookup, read while it
                // waited, is older than its turn.
                match ServiceExt::<BatchRecord<E::Record>>::ready(&mut service).now_or_never() {
                    Some(ready) => {
                        ready?;
                    }
                    None => {
                        ServiceExt::<BatchRecord<E::Record>>::ready(&mut service).await?;
                        scope.batch.offer.begin_turn();
                    }
                }
                service.call(request).await
            });
            tokio::select! {
                result = call => result,
                () = self.clock.sleep_until(deadline.answer_by()) => {
                    Err(Error::DeadlineReached)
                }
            }
        }
        .instrument(span.clone())
        .await;
        // The store's own setup stops the batch; a table of the handler's writes may be one
        // record's (named from its message), decided once the batch is done.
        if let Some(fault) = result.as_ref().err().and_then(Error::misconfiguration) {
            if !fault.handler_write {
                let _ = scope.misconfigured.set(fault.clone());
            }
        }
        let report = RecordReport::of(item_identifier, result);
        span.record("outcome", report.outcome.as_str());
        span.in_scope(|| report.log(self.log_error_text));
        report
    }
}

/// Logs `fault`, said once for the batch, as an ERROR with `what` it does to it.
fn log_misconfiguration(fault: &Misconfiguration, what: &str) {
    tracing::error!(
        error_type = "Idempotency.Misconfigured",
        store = fault.store,
        table = %fault.table,
        code = %fault.code,
        error = %fault,
        "{what}"
    );
}

/// The misconfiguration of a table of the handler's writes that fails the whole batch: one
/// that refused a record when no record of the batch has its result stored, now or before (a
/// missing ledger: every record that got as far as its commit met it). When others did
/// (executed, or replayed: their writes committed once), the refused table is the refused
/// records' own (a table named from the message), and they fail alone.
fn misconfigured_for_all<T>(records: &[RecordReport<T>]) -> Option<Misconfiguration> {
    let stored = |r: &RecordReport<T>| {
        matches!(
            r.outcome,
            crate::Outcome::Executed | crate::Outcome::Replayed
        )
    };
    if records.iter().any(stored) {
        return None;
    }
    records
        .iter()
        .find_map(|r| r.error.as_ref()?.misconfiguration().cloned())
}

/// What the records of one batch share while it runs: the invocation's context (its deadline
/// normalised) and deadline, the store's own misconfiguration once a record met it (later
/// records are not started), and what the records' services learn of the batch, handed to
/// them in each [`BatchRecord`].
pub(super) struct BatchScope<R> {
    pub(super) context: lambda_runtime::Context,
    pub(super) deadline: Deadline,
    misconfigured: OnceLock<Misconfiguration>,
    pub(super) batch: Arc<Batch<R>>,
}

/// The future a [`BatchProcessor`] returns as a service of events `E`.
pub type BatchFuture<R> = Pin<Box<dyn Future<Output = Result<R, BatchError>> + Send>>;

impl<S, C, T, E, P> Service<LambdaEvent<E>> for BatchProcessor<S, C, E, P>
where
    E: BatchEvent,
    S: Service<BatchRecord<E::Record>, Response = Processed<T>, Error = Error>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send,
    C: Clock + Clone,
    P: ReplayPhase<E::Record, T> + Clone + Send + Sync + 'static,
    T: Send + 'static,
{
    type Response = E::Response;
    type Error = BatchError;
    type Future = BatchFuture<E::Response>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BatchError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, event: LambdaEvent<E>) -> Self::Future {
        let processor = self.clone();
        Box::pin(async move { processor.process(event).await.into_response() })
    }
}
