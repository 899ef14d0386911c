//! [`BatchProcessor`]: runs an SQS batch through a per-record service and builds the partial
//! batch response.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, UNIX_EPOCH};

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use futures_util::{FutureExt, StreamExt};
use lambda_runtime::LambdaEvent;
use tower::{Service, ServiceExt};
use tracing::Instrument;

use crate::clock::{deadline_ms, epoch_ms, Clock, SystemClock};
use crate::error::{error_chain, BatchError, Error};
use crate::outcome::Outcome;
use crate::processed::Processed;

/// How the records of a batch are scheduled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BatchMode {
    /// The default: FIFO processing (stop at the first failure) for events from a FIFO queue
    /// (an `eventSourceARN` ending in `.fifo`), concurrent processing, at most `limit` at
    /// once, otherwise. Ordering is not opt-in.
    Auto {
        /// The most records in flight at once on standard queues (at least 1).
        limit: usize,
    },
    /// Standard queues: records run concurrently, at most `limit` at once.
    Concurrent {
        /// The most records in flight at once (at least 1).
        limit: usize,
    },
    /// FIFO queues: records run one by one, in order. After the first record that does not
    /// succeed, every later record is reported without being started, or, with
    /// `skip_failed_group_only`, every later record of the same `MessageGroupId`.
    Fifo {
        /// Stop only the failed record's message group, not the whole batch.
        skip_failed_group_only: bool,
    },
}

impl Default for BatchMode {
    fn default() -> Self {
        BatchMode::Auto { limit: 10 }
    }
}

impl BatchMode {
    /// The mode for a batch of `records`: `Auto` decided, the others as they are.
    fn resolve(self, records: &[SqsMessage]) -> BatchMode {
        match self {
            BatchMode::Auto { limit } => {
                let fifo = records.iter().any(|r| {
                    r.event_source_arn
                        .as_deref()
                        .is_some_and(|arn| arn.ends_with(".fifo"))
                });
                if fifo {
                    BatchMode::Fifo {
                        skip_failed_group_only: false,
                    }
                } else {
                    BatchMode::Concurrent { limit }
                }
            }
            other => other,
        }
    }
}

/// The default time that must remain before the invocation deadline to start a record.
pub const DEFAULT_DEADLINE_MARGIN: Duration = Duration::from_secs(1);

/// The time kept before the invocation deadline to answer: a record still running then is
/// stopped and reported, so the response reaches Lambda before the deadline.
pub const ANSWER_MARGIN: Duration = Duration::from_millis(500);

/// Runs each record of an SQS event through a per-record service (normally an
/// [`Idempotent`](crate::Idempotent) one) and reports the records to retry in
/// `batchItemFailures`.
///
/// It is itself a `Service<LambdaEvent<SqsEvent>>` answering `SqsBatchResponse`, so it can
/// be handed to `lambda_runtime::run` as it is.
///
/// - Each record ends in one [`Outcome`]; all but the successful ones are reported.
/// - Panics are caught per record. A record is not started when less than the deadline
///   margin (default 1 s) remains before the invocation deadline, and a record still running
///   [`ANSWER_MARGIN`] before the deadline is stopped (its future dropped) and reported
///   [`Outcome::DeadlineNear`], so the batch always answers in time: Lambda discards a late
///   response and retries the whole batch.
/// - A record to retry that has no `messageId` cannot be reported (an empty
///   `itemIdentifier` makes SQS retry the whole batch): [`BatchReport::into_response`] then
///   fails the invocation with [`BatchError::UnreportableFailures`], so the whole batch is
///   retried on purpose; completed records replay their stored results then.
#[derive(Debug, Clone)]
pub struct BatchProcessor<S, C = SystemClock> {
    service: S,
    mode: BatchMode,
    deadline_margin: Duration,
    clock: C,
    log_error_text: bool,
}

impl<S> BatchProcessor<S> {
    /// A processor over `service`: FIFO events in order, others concurrently (10 at once);
    /// a 1 s deadline margin.
    pub fn new(service: S) -> Self {
        Self {
            service,
            mode: BatchMode::default(),
            deadline_margin: DEFAULT_DEADLINE_MARGIN,
            clock: SystemClock,
            log_error_text: false,
        }
    }
}

impl<S, C> BatchProcessor<S, C> {
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

    /// Reads time from `clock`.
    pub fn with_clock<C2: Clock>(self, clock: C2) -> BatchProcessor<S, C2> {
        BatchProcessor {
            service: self.service,
            mode: self.mode,
            deadline_margin: self.deadline_margin,
            clock,
            log_error_text: self.log_error_text,
        }
    }
}

/// How one record ended.
#[derive(Debug)]
#[non_exhaustive]
pub struct RecordReport<T> {
    /// The record's `messageId`.
    pub message_id: Option<String>,
    /// The outcome.
    pub outcome: Outcome,
    /// The handler's result, executed or replayed.
    pub value: Option<T>,
    /// The error, for outcomes that are not successes (none for FIFO-skipped records).
    pub error: Option<Error>,
}

/// How a batch ended: one report per record, in event order, and the response for Lambda.
#[derive(Debug)]
#[non_exhaustive]
pub struct BatchReport<T> {
    /// One report per record, in the order of the event.
    pub records: Vec<RecordReport<T>>,
    /// The partial batch response: every reported record's `messageId`.
    pub response: SqsBatchResponse,
    /// Records to retry that have no `messageId` and so could not be reported.
    pub unreportable: usize,
}

impl<T> BatchReport<T> {
    /// How many records ended with `outcome`.
    pub fn count(&self, outcome: Outcome) -> usize {
        self.records.iter().filter(|r| r.outcome == outcome).count()
    }

    /// The response for Lambda, or an error that makes SQS retry the whole batch when a
    /// record to retry could not be reported.
    pub fn into_response(self) -> Result<SqsBatchResponse, BatchError> {
        if self.unreportable > 0 {
            return Err(BatchError::UnreportableFailures {
                count: self.unreportable,
            });
        }
        Ok(self.response)
    }
}

fn message_group(message: &SqsMessage) -> Option<String> {
    message.attributes.get("MessageGroupId").cloned()
}

impl<S, C, T> BatchProcessor<S, C>
where
    S: Service<LambdaEvent<SqsMessage>, Response = Processed<T>, Error = Error> + Clone,
    C: Clock,
{
    /// Processes every record of `event`.
    pub async fn process(&self, event: LambdaEvent<SqsEvent>) -> BatchReport<T> {
        // What this batch learns about failed keys stays with this batch.
        crate::in_flight::within_batch(self.process_batch(event)).await
    }

    async fn process_batch(&self, event: LambdaEvent<SqsEvent>) -> BatchReport<T> {
        let LambdaEvent {
            payload,
            mut context,
        } = event;
        context.deadline = deadline_ms(context.deadline, self.clock.now());
        let records = payload.records;
        tracing::debug!(
            records = records.len(),
            deadline_ms = context.deadline,
            now_ms = epoch_ms(self.clock.now()),
            "batch received"
        );
        let reports = match self.mode.resolve(&records) {
            BatchMode::Auto { .. } => unreachable!("resolved above"),
            BatchMode::Concurrent { limit } => {
                // A new record starts as soon as any running one finishes (a slow record
                // does not hold back the others); the reports keep the event's order.
                let mut indexed = futures_util::stream::iter(records.into_iter().enumerate().map(
                    |(index, record)| {
                        let report = self.process_record(record, &context);
                        async move { (index, report.await) }
                    },
                ))
                .buffer_unordered(limit.max(1))
                .collect::<Vec<_>>()
                .await;
                indexed.sort_by_key(|(index, _)| *index);
                indexed.into_iter().map(|(_, report)| report).collect()
            }
            BatchMode::Fifo {
                skip_failed_group_only,
            } => {
                let mut reports = Vec::with_capacity(records.len());
                let mut stopped = false;
                let mut failed_groups = HashSet::new();
                for record in records {
                    let group = message_group(&record);
                    let skip = if skip_failed_group_only {
                        group.as_ref().is_some_and(|g| failed_groups.contains(g))
                    } else {
                        stopped
                    };
                    let report = if skip {
                        skipped(record)
                    } else {
                        self.process_record(record, &context).await
                    };
                    if !report.outcome.is_acknowledged() {
                        stopped = true;
                        if let Some(group) = group {
                            failed_groups.insert(group);
                        }
                    }
                    reports.push(report);
                }
                reports
            }
        };
        summarize(reports)
    }

    async fn process_record(
        &self,
        record: SqsMessage,
        context: &lambda_runtime::Context,
    ) -> RecordReport<T> {
        let message_id = record.message_id.clone().filter(|id| !id.is_empty());
        let span = tracing::info_span!(
            "sqs_record",
            message_id = message_id.as_deref().unwrap_or("<none>"),
            idempotency_key = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        let result = async {
            let now_ms = epoch_ms(self.clock.now());
            let margin_ms = u64::try_from(self.deadline_margin.as_millis()).unwrap_or(u64::MAX);
            if now_ms.saturating_add(margin_ms) >= context.deadline {
                return Err(Error::DeadlineNear);
            }
            let answer_ms = u64::try_from(ANSWER_MARGIN.as_millis()).unwrap_or(u64::MAX);
            let stop_at =
                UNIX_EPOCH + Duration::from_millis(context.deadline.saturating_sub(answer_ms));
            let event = LambdaEvent::new(record, context.clone());
            let call = AssertUnwindSafe(self.service.clone().oneshot(event)).catch_unwind();
            let outcome = tokio::select! {
                outcome = call => outcome,
                () = self.clock.sleep_until(stop_at) => {
                    return Err(Error::DeadlineReached);
                }
            };
            match outcome {
                Ok(result) => result,
                Err(panic) => Err(Error::Panic {
                    message: panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "non-string panic payload".into()),
                }),
            }
        }
        .instrument(span.clone())
        .await;
        let report = match result {
            Ok(processed) => RecordReport {
                message_id,
                outcome: processed.outcome(),
                value: processed.into_value(),
                error: None,
            },
            Err(error) => RecordReport {
                message_id,
                outcome: error.outcome(),
                value: None,
                error: Some(error),
            },
        };
        span.record("outcome", report.outcome.as_str());
        let id = report.message_id.as_deref().unwrap_or("<none>");
        span.in_scope(|| match &report.error {
            None => tracing::info!(message_id = id, outcome = %report.outcome, "record processed"),
            Some(error) if self.log_error_text => tracing::warn!(
                message_id = id,
                outcome = %report.outcome,
                error_type = error.error_type(),
                error = %error_chain(error),
                "record not processed"
            ),
            Some(error) => tracing::warn!(
                message_id = id,
                outcome = %report.outcome,
                error_type = error.error_type(),
                "record not processed"
            ),
        });
        report
    }
}

fn skipped<T>(record: SqsMessage) -> RecordReport<T> {
    let message_id = record.message_id.filter(|id| !id.is_empty());
    tracing::info!(
        message_id = message_id.as_deref().unwrap_or("<none>"),
        outcome = %Outcome::FifoSkipped,
        "record not started after an earlier failure"
    );
    RecordReport {
        message_id,
        outcome: Outcome::FifoSkipped,
        value: None,
        error: None,
    }
}

fn summarize<T>(records: Vec<RecordReport<T>>) -> BatchReport<T> {
    let mut response = SqsBatchResponse::default();
    let mut unreportable = 0;
    let mut counts: BTreeMap<Outcome, usize> = BTreeMap::new();
    for report in &records {
        *counts.entry(report.outcome).or_default() += 1;
        if report.outcome.is_acknowledged() {
            continue;
        }
        match &report.message_id {
            Some(id) => response.add_failure(id.clone()),
            None => unreportable += 1,
        }
    }
    let summary: Vec<String> = counts
        .iter()
        .map(|(outcome, n)| format!("{outcome}={n}"))
        .collect();
    tracing::info!(
        records = records.len(),
        reported = response.batch_item_failures.len(),
        unreportable,
        outcomes = %summary.join(" "),
        "batch processed"
    );
    BatchReport {
        records,
        response,
        unreportable,
    }
}

/// The future a [`BatchProcessor`] returns as a service.
pub type BatchFuture = Pin<Box<dyn Future<Output = Result<SqsBatchResponse, BatchError>> + Send>>;

impl<S, C, T> Service<LambdaEvent<SqsEvent>> for BatchProcessor<S, C>
where
    S: Service<LambdaEvent<SqsMessage>, Response = Processed<T>, Error = Error>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send,
    C: Clock + Clone,
    T: Send + 'static,
{
    type Response = SqsBatchResponse;
    type Error = BatchError;
    type Future = BatchFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BatchError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, event: LambdaEvent<SqsEvent>) -> BatchFuture {
        let processor = self.clone();
        Box::pin(async move { processor.process(event).await.into_response() })
    }
}
