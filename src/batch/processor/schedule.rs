//! How a [`BatchProcessor`]'s records are scheduled: concurrently or in order, and, with
//! [batch replay](BatchProcessor::with_batch_replay), the pre-checked records of a
//! concurrent batch replayed together.

use std::sync::{Mutex, PoisonError};

use futures_util::StreamExt;
use lambda_runtime::LambdaEvent;
use tokio::sync::OnceCell;
use tower::{Service, ServiceExt};

use super::BatchProcessor;
use crate::batch::event::BatchEvent;
use crate::batch::mode::{BatchMode, Stops};
use crate::batch::report::{skipped, RecordReport};
use crate::clock::{Clock, Deadline};
use crate::error::Error;
use crate::processed::Processed;

/// A concurrent batch's replays, by position in the batch, each taken by its record: worked
/// out once, by the first offered record to start.
type Replays<T> = OnceCell<Mutex<Vec<Option<Processed<T>>>>>;

impl<S, C, E: BatchEvent> BatchProcessor<S, C, E> {
    /// Runs the records as the batch mode says; the reports keep the event's order. With
    /// [batch replay](Self::with_batch_replay), the records of a concurrent batch offered to
    /// the pre-check (`offered_at`, positions in the batch) are replayed together where they
    /// can be, the first of them to start working the replays out for all; the records still
    /// start in the event's order.
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
        match self.mode.resolve::<E>(&records) {
            BatchMode::Auto { .. } => unreachable!("resolved above"),
            BatchMode::Concurrent { limit } => {
                let replay = self.replayer.is_some() && !offered_at.is_empty();
                let replays: Replays<T> = OnceCell::new();
                let (replays, offered_at) = (&replays, offered_at.as_slice());
                // A new record starts as soon as any running one finishes (a slow record
                // does not hold back the others); each report goes to its record's place.
                let mut reports: Vec<Option<RecordReport<T>>> = std::iter::repeat_with(|| None)
                    .take(records.len())
                    .collect();
                let mut finished = futures_util::stream::iter(records.into_iter().enumerate().map(
                    |(index, record)| {
                        let offered = replay && offered_at.binary_search(&index).is_ok();
                        // Boxed once: the record's future (a few kilobytes) is not copied
                        // again as the stream hands it to its set of running futures.
                        let report = Box::pin(async move {
                            if offered {
                                let replay =
                                    self.replay_at(index, replays, offered_at, context, deadline);
                                if let Some(replay) = replay.await {
                                    return self.replayed(record, replay);
                                }
                            }
                            self.process_record::<T>(record, context, deadline).await
                        });
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
            // In order, each record at its turn through its own call: a replay worked out
            // for the batch at its start would answer later records from an older lookup,
            // past the deadline margin, or after a failure that skips them.
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

    /// The replay of the offered record at `index` of a concurrent batch, if the batch's
    /// replays have one for it; the first offered record to ask works them out for all. None
    /// when less than the deadline margin remains (the record's own path then answers
    /// that), as the record's own call would not start.
    async fn replay_at<T: 'static>(
        &self,
        index: usize,
        replays: &Replays<T>,
        offered_at: &[usize],
        context: &lambda_runtime::Context,
        deadline: Deadline,
    ) -> Option<Processed<T>>
    where
        S: Service<LambdaEvent<E::Record>, Response = Processed<T>, Error = Error> + Clone,
        C: Clock,
    {
        if deadline.is_within(self.deadline_margin, self.clock.now()) {
            return None;
        }
        let replays = replays
            .get_or_init(|| async { Mutex::new(self.replays(offered_at, context, deadline).await) })
            .await;
        let mut replays = replays.lock().unwrap_or_else(PoisonError::into_inner);
        replays.get_mut(index).and_then(Option::take)
    }

    /// The replays of the records offered to the pre-check (`offered_at`, positions in the
    /// batch), by position in the batch: none without [batch
    /// replay](Self::with_batch_replay).
    async fn replays<T: 'static>(
        &self,
        offered_at: &[usize],
        context: &lambda_runtime::Context,
        deadline: Deadline,
    ) -> Vec<Option<Processed<T>>>
    where
        S: Service<LambdaEvent<E::Record>, Response = Processed<T>, Error = Error> + Clone,
        C: Clock,
    {
        let Some(replayer) = self.replayer.as_ref() else {
            return Vec::new();
        };
        // Each record's own call asks the service whether it is ready first: a service that
        // is not (a load shedder's error) replays nothing, and each record goes its own way.
        let mut service = self.service.clone();
        if ServiceExt::<LambdaEvent<E::Record>>::ready(&mut service)
            .await
            .is_err()
        {
            return Vec::new();
        }
        let mut replays = replayer
            .replays::<T, C>(context, deadline, self.deadline_margin, &self.clock)
            .await
            .into_iter();
        let mut by_position: Vec<Option<Processed<T>>> = Vec::new();
        for &at in offered_at {
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
}
