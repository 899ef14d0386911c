//! How a [`BatchProcessor`]'s records are scheduled: concurrently or in order, and, with
//! [batch replay](BatchProcessor::with_batch_replay), the pre-checked records replayed
//! together first.

use std::collections::VecDeque;

use futures_util::stream::FuturesUnordered;
use futures_util::StreamExt;
use lambda_runtime::LambdaEvent;
use tower::Service;

use super::BatchProcessor;
use crate::batch::event::BatchEvent;
use crate::batch::mode::{BatchMode, Stops};
use crate::batch::report::{skipped, RecordReport};
use crate::clock::{Clock, Deadline};
use crate::error::Error;
use crate::processed::Processed;

impl<S, C, E: BatchEvent> BatchProcessor<S, C, E> {
    /// Runs the records as the batch mode says; the reports keep the event's order. With
    /// [batch replay](Self::with_batch_replay), the records offered to the pre-check
    /// (`offered_at`, positions in the batch) are first replayed together where they can be:
    /// in order, after the lookup (a FIFO batch); concurrently with the records not offered
    /// (any other), which start at once.
    pub(super) async fn schedule<T>(
        &self,
        records: Vec<E::Record>,
        offered_at: Vec<usize>,
        context: &lambda_runtime::Context,
        deadline: Deadline,
    ) -> Vec<RecordReport<T>>
    where
        S: Service<LambdaEvent<E::Record>, Response = Processed<T>, Error = Error> + Clone,
        C: Clock,
        T: 'static,
    {
        let replay = self.replayer.is_some() && !offered_at.is_empty();
        match self.mode.resolve::<E>(&records) {
            BatchMode::Auto { .. } => unreachable!("resolved above"),
            BatchMode::Concurrent { limit } => {
                let mut reports: Vec<Option<RecordReport<T>>> = std::iter::repeat_with(|| None)
                    .take(records.len())
                    .collect();
                // The records offered for replay wait for their replays; the others start at
                // once, and a replayed record is answered without running.
                let (mut offered, others): (Vec<_>, Vec<_>) = records
                    .into_iter()
                    .enumerate()
                    .partition(|(index, _)| replay && offered_at.binary_search(index).is_ok());
                let mut replays =
                    replay.then(|| Box::pin(self.replays(offered_at, context, deadline)));
                let mut to_start = VecDeque::from(others);
                let mut running = FuturesUnordered::new();
                loop {
                    // A new record starts as soon as any running one finishes (a slow record
                    // does not hold back the others); each report goes to its record's place.
                    while running.len() < limit.max(1) {
                        let Some((index, record)) = to_start.pop_front() else {
                            break;
                        };
                        // Boxed once: the record's future (a few kilobytes) is not copied
                        // again as the set of running futures takes it.
                        running.push(Box::pin(
                            self.process_indexed(index, record, context, deadline),
                        ));
                    }
                    let Some(replaying) = replays.as_mut() else {
                        match running.next().await {
                            Some((index, report)) => reports[index] = Some(report),
                            None => break,
                        }
                        continue;
                    };
                    let mut replayed = None;
                    tokio::select! {
                        Some((index, report)) = running.next(), if !running.is_empty() => {
                            reports[index] = Some(report);
                        }
                        found = replaying => replayed = Some(found),
                    }
                    if let Some(mut found) = replayed {
                        replays = None;
                        for (index, record) in offered.drain(..) {
                            match found.get_mut(index).and_then(Option::take) {
                                Some(replay) => {
                                    reports[index] = Some(self.replayed(record, replay))
                                }
                                None => to_start.push_back((index, record)),
                            }
                        }
                    }
                }
                // Every record's future answers (a record stopped at the deadline answers
                // too): a record without a report would be acknowledged, so it is a bug to
                // stop at, not to pass over.
                reports
                    .into_iter()
                    .map(|report| report.expect("every record's future answers"))
                    .collect()
            }
            BatchMode::Fifo {
                skip_failed_group_only,
            } => {
                let mut replays = self.replays(offered_at, context, deadline).await;
                let mut reports = Vec::with_capacity(records.len());
                let mut stops = Stops::new(skip_failed_group_only);
                for (index, record) in records.into_iter().enumerate() {
                    let group = E::group(&record);
                    let report = if stops.skips(group.as_deref()) {
                        skipped(E::item_identifier(&record))
                    } else if let Some(replay) = replays.get_mut(index).and_then(Option::take) {
                        self.replayed(record, replay)
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

    /// The replays of the records offered to the pre-check (`offered_at`, positions in the
    /// batch), by position in the batch: none without [batch
    /// replay](Self::with_batch_replay).
    async fn replays<T: 'static>(
        &self,
        offered_at: Vec<usize>,
        context: &lambda_runtime::Context,
        deadline: Deadline,
    ) -> Vec<Option<Processed<T>>>
    where
        C: Clock,
    {
        let Some(replayer) = self.replayer.as_ref().filter(|_| !offered_at.is_empty()) else {
            return Vec::new();
        };
        let mut replays = replayer
            .replays::<T, C>(context, deadline, self.deadline_margin, &self.clock)
            .await
            .into_iter();
        let mut by_position: Vec<Option<Processed<T>>> = Vec::new();
        for at in offered_at {
            by_position.resize_with(at + 1, || None);
            by_position[at] = replays.next().flatten();
        }
        by_position
    }

    /// The report of `record`, replayed with the batch's pre-checked records.
    fn replayed<T>(&self, record: E::Record, replay: Processed<T>) -> RecordReport<T> {
        let report = RecordReport::of(E::item_identifier(&record), Ok(replay));
        report.log(self.log_error_text);
        report
    }

    /// [`process_record`](Self::process_record), with the record's position in the batch.
    async fn process_indexed<T>(
        &self,
        index: usize,
        record: E::Record,
        context: &lambda_runtime::Context,
        deadline: Deadline,
    ) -> (usize, RecordReport<T>)
    where
        S: Service<LambdaEvent<E::Record>, Response = Processed<T>, Error = Error> + Clone,
        C: Clock,
    {
        (index, self.process_record(record, context, deadline).await)
    }
}
