//! [`BatchReport`]: how each record of a batch ended, and the partial batch response.

use std::collections::BTreeMap;

use aws_lambda_events::sqs::SqsBatchResponse;

use super::error::BatchError;
use super::event::BatchEvent;
use crate::error::{error_chain, Error};
use crate::outcome::Outcome;
use crate::outcome::Processed;

/// How one record ended.
#[derive(Debug)]
#[non_exhaustive]
pub struct RecordReport<T> {
    /// The record's identifier in `batchItemFailures` (SQS `messageId`, a stream record's
    /// sequence number).
    pub item_identifier: Option<String>,
    /// The outcome.
    pub outcome: Outcome,
    /// The record was answered with what an earlier delivery stored.
    ///
    /// That is, not with this delivery's own result: a replayed result, or a replayed permanent failure (an outcome
    /// of [`FailedPermanently`](Outcome::FailedPermanently) that is replayed was stored by an
    /// earlier delivery; one that is not failed now). A plain handler, or one whose writes
    /// commit after a lease, did not run; with an optimistic commit it may have run, its
    /// writes not committed.
    pub replayed: bool,
    /// The handler's result, executed or replayed.
    pub value: Option<T>,
    /// The error, for outcomes that are not successes (none for FIFO-skipped records).
    pub error: Option<Error>,
}

impl<T> RecordReport<T> {
    /// The report of the record `item_identifier` that ended with `result`.
    pub(crate) fn of(item_identifier: Option<String>, result: Result<Processed<T>, Error>) -> Self {
        match result {
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
        }
    }

    /// Logs how the record ended: its error's text too when `error_text` (see
    /// [`BatchProcessor::with_error_text_logged`](super::BatchProcessor::with_error_text_logged)).
    pub(crate) fn log(&self, error_text: bool) {
        let id = self.item_identifier.as_deref().unwrap_or("<none>");
        match &self.error {
            // Said once for the whole batch, as an error.
            Some(error) if error.misconfiguration().is_some() => tracing::debug!(
                item_identifier = id,
                outcome = %self.outcome,
                error_type = error.error_type(),
                "record not processed"
            ),
            None => tracing::info!(
                item_identifier = id,
                outcome = %self.outcome,
                replayed = self.replayed,
                "record processed"
            ),
            Some(error) if error_text => tracing::warn!(
                item_identifier = id,
                outcome = %self.outcome,
                replayed = self.replayed,
                error_type = error.error_type(),
                error = %error_chain(error),
                "record not processed"
            ),
            Some(error) => tracing::warn!(
                item_identifier = id,
                outcome = %self.outcome,
                replayed = self.replayed,
                error_type = error.error_type(),
                "record not processed"
            ),
        }
    }
}

/// How a batch ended: one report per record, in event order, and the response for Lambda
/// (`R`: `SqsBatchResponse` by default, the stream response for streams).
#[derive(Debug)]
#[non_exhaustive]
pub struct BatchReport<T, R = SqsBatchResponse> {
    /// One report per record, in the order of the event.
    pub records: Vec<RecordReport<T>>,
    /// The partial batch response: every reported record's identifier.
    pub response: R,
    /// Records to retry that have no identifier and so could not be reported.
    pub unreportable: usize,
    /// Why the invocation fails as a whole, whatever the records' outcomes: no time for a
    /// single record ([`BatchError::DeadlineTooShort`]), or a store that is not set up
    /// ([`BatchError::Misconfigured`]).
    pub invocation_error: Option<BatchError>,
}

impl<T, R> BatchReport<T, R> {
    /// How many records ended with `outcome`.
    pub fn count(&self, outcome: Outcome) -> usize {
        self.records.iter().filter(|r| r.outcome == outcome).count()
    }

    /// The response for Lambda, or an error that makes the source retry the whole batch:
    /// the [invocation's error](Self::invocation_error), or a record to retry that could not
    /// be reported.
    pub fn into_response(self) -> Result<R, BatchError> {
        if let Some(err) = self.invocation_error {
            return Err(err);
        }
        if self.unreportable > 0 {
            return Err(BatchError::UnreportableFailures {
                count: self.unreportable,
            });
        }
        Ok(self.response)
    }
}

pub(crate) fn skipped<T>(item_identifier: Option<String>) -> RecordReport<T> {
    tracing::info!(
        item_identifier = item_identifier.as_deref().unwrap_or("<none>"),
        outcome = %Outcome::FifoSkipped,
        "record not started after an earlier failure"
    );
    RecordReport {
        item_identifier,
        outcome: Outcome::FifoSkipped,
        replayed: false,
        value: None,
        error: None,
    }
}

pub(crate) fn summarize<T, E: BatchEvent>(
    records: Vec<RecordReport<T>>,
) -> BatchReport<T, E::Response> {
    let mut failures = Vec::new();
    let mut unreportable = 0;
    let mut counts: BTreeMap<Outcome, usize> = BTreeMap::new();
    for report in &records {
        *counts.entry(report.outcome).or_default() += 1;
        crate::metrics::outcome(report.outcome);
        if report.outcome.is_acknowledged() {
            continue;
        }
        match &report.item_identifier {
            Some(id) => failures.push(id.clone()),
            None => unreportable += 1,
        }
    }
    let summary: Vec<String> = counts
        .iter()
        .map(|(outcome, n)| format!("{outcome}={n}"))
        .collect();
    tracing::info!(
        records = records.len(),
        reported = failures.len(),
        unreportable,
        outcomes = %summary.join(" "),
        "batch processed"
    );
    BatchReport {
        records,
        response: E::response(failures),
        unreportable,
        invocation_error: None,
    }
}
