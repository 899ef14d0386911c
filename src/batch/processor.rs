//! [`BatchProcessor`]: runs a batch (SQS, Kinesis) through a per-record service, in order
//! when the source asks for it, and builds the partial batch response.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use aws_lambda_events::sqs::SqsEvent;
use futures_util::StreamExt;
use lambda_runtime::LambdaEvent;
use tower::{Service, ServiceExt};
use tracing::Instrument;

use super::error::BatchError;
use super::event::BatchEvent;
use super::mode::{BatchMode, Stops};
use super::report::{skipped, summarize, BatchReport, RecordReport};
use crate::clock::{epoch_ms, Clock, Deadline, SystemClock};
use crate::error::{error_chain, Error};
use crate::processed::Processed;

/// Which records of a batch are looked up in the store together before they run (one
/// [`Store::get_many`](crate::store::Store::get_many): a `BatchGetItem` per 100 keys on
/// DynamoDB), so that those found completed replay without a write (in optimistic mode,
/// without running the handler again) and those held under a live lease are reported
/// locked without a write. What the lookup does not find, or cannot read, goes on to the
/// conditional write as usual. Only records whose service is
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
pub const DEFAULT_DEADLINE_MARGIN: Duration = Duration::from_secs(1);

/// The time kept before the invocation deadline to answer: a record still running then is
/// stopped and reported, so the response reaches Lambda before the deadline.
pub const ANSWER_MARGIN: Duration = Duration::from_millis(500);

/// Runs each record of a batch event ([`BatchEvent`]: an `SqsEvent`, a `KinesisEvent`, a DynamoDB
/// Streams `Event`)
/// through a per-record service (normally an [`Idempotent`](crate::Idempotent) one) and
/// reports the records to retry in `batchItemFailures`.
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
pub struct BatchProcessor<S, C = SystemClock, E = SqsEvent> {
    service: S,
    mode: BatchMode,
    deadline_margin: Duration,
    clock: C,
    log_error_text: bool,
    precheck: Precheck,
    event: PhantomData<fn(E)>,
}

impl<S: Clone, C: Clone, E> Clone for BatchProcessor<S, C, E> {
    fn clone(&self) -> Self {
        Self {
            service: self.service.clone(),
            mode: self.mode,
            deadline_margin: self.deadline_margin,
            clock: self.clock.clone(),
            log_error_text: self.log_error_text,
            precheck: self.precheck,
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
impl<S> BatchProcessor<S, SystemClock, aws_lambda_events::event::kinesis::KinesisEvent> {
    /// A processor of Kinesis events over `service`: records in order, stopping at the first
    /// that does not succeed; a 1 s deadline margin.
    pub fn kinesis(service: S) -> Self {
        Self::of_events(service)
    }
}

#[cfg(feature = "dynamodb-streams")]
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
            mode: BatchMode::default(),
            deadline_margin: DEFAULT_DEADLINE_MARGIN,
            clock: SystemClock,
            log_error_text: false,
            precheck: Precheck::default(),
            event: PhantomData,
        }
    }
}

impl<S, C, E> BatchProcessor<S, C, E> {
    /// Schedules records with `mode`.
    pub fn with_mode(mut self, mode: BatchMode) -> Self {
        self.mode = mode;
        self
    }

    /// Starts a record only while at least `margin` remains before the deadline.
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
    pub fn with_clock<C2: Clock>(self, clock: C2) -> BatchProcessor<S, C2, E> {
        BatchProcessor {
            service: self.service,
            mode: self.mode,
            deadline_margin: self.deadline_margin,
            clock,
            log_error_text: self.log_error_text,
            precheck: self.precheck,
            event: PhantomData,
        }
    }
}

impl<S, C, E: BatchEvent> BatchProcessor<S, C, E> {
    /// Processes every record of `event`.
    pub async fn process<T>(&self, event: LambdaEvent<E>) -> BatchReport<T, E::Response>
    where
        S: Service<LambdaEvent<E::Record>, Response = Processed<T>, Error = Error> + Clone,
        C: Clock,
    {
        let started = self.clock.now();
        // What this batch learns about failed keys stays with this batch.
        let report = crate::idempotent::within_batch(self.process_batch(event)).await;
        let elapsed = self.clock.now().duration_since(started).unwrap_or_default();
        crate::metrics::batch_latency(elapsed);
        report
    }

    async fn process_batch<T>(&self, event: LambdaEvent<E>) -> BatchReport<T, E::Response>
    where
        S: Service<LambdaEvent<E::Record>, Response = Processed<T>, Error = Error> + Clone,
        C: Clock,
    {
        let LambdaEvent {
            payload,
            mut context,
        } = event;
        let deadline = Deadline::of(context.deadline, self.clock.now());
        // The records' services see the normalised deadline.
        context.deadline = deadline.epoch_ms();
        let records = payload.into_records();
        tracing::debug!(
            records = records.len(),
            deadline_ms = deadline.epoch_ms(),
            now_ms = epoch_ms(self.clock.now()),
            "batch received"
        );
        let offered: Vec<E::Record> = match self.precheck {
            Precheck::Off => Vec::new(),
            Precheck::Redelivered => records
                .iter()
                .filter(|record| crate::input::Input::delivered_before(*record))
                .cloned()
                .collect(),
            Precheck::Always => records.clone(),
        };
        // Boxed: the records' scheduling makes a future of kilobytes, which the layers around
        // it (the pre-check's offer, the batch's failure memo) would otherwise each copy.
        let schedule = Box::pin(self.schedule::<T>(records, &context, deadline));
        let reports = crate::idempotent::offering(offered, schedule).await;
        summarize::<T, E>(reports)
    }

    /// Runs the records as the batch mode says; the reports keep the event's order.
    async fn schedule<T>(
        &self,
        records: Vec<E::Record>,
        context: &lambda_runtime::Context,
        deadline: Deadline,
    ) -> Vec<RecordReport<T>>
    where
        S: Service<LambdaEvent<E::Record>, Response = Processed<T>, Error = Error> + Clone,
        C: Clock,
    {
        match self.mode.resolve::<E>(&records) {
            BatchMode::Auto { .. } => unreachable!("resolved above"),
            BatchMode::Concurrent { limit } => {
                // A new record starts as soon as any running one finishes (a slow record
                // does not hold back the others); each report goes to its record's place.
                let mut reports: Vec<Option<RecordReport<T>>> = std::iter::repeat_with(|| None)
                    .take(records.len())
                    .collect();
                let mut finished = futures_util::stream::iter(records.into_iter().enumerate().map(
                    |(index, record)| {
                        // Boxed once: the record's future (a few kilobytes) is not copied
                        // again as the stream hands it to its set of running futures.
                        let report = Box::pin(self.process_record::<T>(record, context, deadline));
                        async move { (index, report.await) }
                    },
                ))
                .buffer_unordered(limit.max(1));
                while let Some((index, report)) = finished.next().await {
                    reports[index] = Some(report);
                }
                // The stream ends only when every record's future has answered (a record
                // stopped at the deadline answers too): a record without a report would be
                // acknowledged, so it is a bug to stop at, not to pass over.
                reports
                    .into_iter()
                    .map(|report| report.expect("every record's future answers"))
                    .collect()
            }
            BatchMode::Fifo {
                skip_failed_group_only,
            } => {
                let mut reports = Vec::with_capacity(records.len());
                let mut stops = Stops::new(skip_failed_group_only);
                for record in records {
                    let group = E::group(&record);
                    let report = if stops.skips(group.as_deref()) {
                        skipped(E::item_identifier(&record))
                    } else {
                        self.process_record::<T>(record, context, deadline).await
                    };
                    if !report.outcome.is_acknowledged() {
                        stops.failed(group);
                    }
                    reports.push(report);
                }
                reports
            }
        }
    }

    async fn process_record<T>(
        &self,
        record: E::Record,
        context: &lambda_runtime::Context,
        deadline: Deadline,
    ) -> RecordReport<T>
    where
        S: Service<LambdaEvent<E::Record>, Response = Processed<T>, Error = Error> + Clone,
        C: Clock,
    {
        let item_identifier = E::item_identifier(&record);
        let span = tracing::info_span!(
            "batch_record",
            item_identifier = item_identifier.as_deref().unwrap_or("<none>"),
            idempotency_key = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        let result = async {
            if deadline.is_within(self.deadline_margin, self.clock.now()) {
                return Err(Error::DeadlineNear);
            }
            let event = LambdaEvent::new(record, context.clone());
            // The service catches its handler's panic (and releases the lease); a panic
            // anywhere else on the record's path (a store, a clock, another service) fails
            // this record alone.
            let call = crate::idempotent::catch_panic_async(self.service.clone().oneshot(event));
            tokio::select! {
                result = call => result,
                () = self.clock.sleep_until(deadline.before(ANSWER_MARGIN)) => {
                    Err(Error::DeadlineReached)
                }
            }
        }
        .instrument(span.clone())
        .await;
        let report = match result {
            Ok(processed) => RecordReport {
                item_identifier,
                outcome: processed.outcome(),
                replayed: processed.is_replay(),
                value: processed.into_value(),
                error: None,
            },
            Err(error) => RecordReport {
                item_identifier,
                outcome: error.outcome(),
                replayed: error.is_replay(),
                value: None,
                error: Some(error),
            },
        };
        span.record("outcome", report.outcome.as_str());
        let id = report.item_identifier.as_deref().unwrap_or("<none>");
        span.in_scope(|| match &report.error {
            None => tracing::info!(
                item_identifier = id,
                outcome = %report.outcome,
                replayed = report.replayed,
                "record processed"
            ),
            Some(error) if self.log_error_text => tracing::warn!(
                item_identifier = id,
                outcome = %report.outcome,
                replayed = report.replayed,
                error_type = error.error_type(),
                error = %error_chain(error),
                "record not processed"
            ),
            Some(error) => tracing::warn!(
                item_identifier = id,
                outcome = %report.outcome,
                replayed = report.replayed,
                error_type = error.error_type(),
                "record not processed"
            ),
        });
        report
    }
}

/// The future a [`BatchProcessor`] returns as a service of events `E`.
pub type BatchFuture<R> = Pin<Box<dyn Future<Output = Result<R, BatchError>> + Send>>;

impl<S, C, T, E> Service<LambdaEvent<E>> for BatchProcessor<S, C, E>
where
    E: BatchEvent,
    S: Service<LambdaEvent<E::Record>, Response = Processed<T>, Error = Error>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send,
    C: Clock + Clone,
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
