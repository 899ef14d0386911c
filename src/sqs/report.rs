//! [`BatchReport`]: how each record of a batch ended, and the partial batch response.

use std::collections::BTreeMap;

use aws_lambda_events::sqs::{SqsBatchResponse, SqsMessage};

use super::error::BatchError;
use crate::error::Error;
use crate::outcome::Outcome;

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

pub(crate) fn skipped<T>(record: SqsMessage) -> RecordReport<T> {
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

pub(crate) fn summarize<T>(records: Vec<RecordReport<T>>) -> BatchReport<T> {
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
