//! How a [`BatchProcessor`]'s records are scheduled: concurrently or in order, and, with
//! [batch replay](BatchProcessor::with_batch_replay), the pre-checked records of a
//! concurrent batch replayed together.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, PoisonError};

use futures_util::{FutureExt, StreamExt};
use tokio::sync::OnceCell;
use tower::{Service, ServiceExt};

use super::{BatchProcessor, BatchScope};
use crate::batch::event::BatchEvent;
use crate::batch::report::{skipped, RecordReport};
use crate::batch::scheduling::{Scheduling, Stops};
use crate::clock::Clock;
use crate::error::Error;
use crate::idempotent::batch_replay::ReplayPhase;
use crate::idempotent::batch_scope::BatchRecord;
use crate::idempotent::precheck::Candidate;
use crate::outcome::Processed;

/// What a concurrent batch's replay phase left each offered record, by position in the
/// batch, each taken by its record: worked out once, by the first offered record to start;
/// `None` when the phase was stopped at the answer margin.
type Replays<T> = OnceCell<Option<Mutex<Vec<Option<Candidate<T>>>>>>;

/// How an offered record of a concurrent batch goes on after the replay phase.
enum Turn<T> {
    /// Replayed at its turn.
    Replayed(Processed<T>),
    /// Through its own call of the service, which answers it.
    Own,
    /// The phase was stopped at the answer margin, as the record's own call would have been.
    Stopped,
}

/// A record of the batch as it is scheduled: its own, or one of the records offered to the
/// pre-check, shared with the offer and copied only when its own call of the service needs
/// it (a record the batch replays is answered without a copy).
pub(super) enum Placed<'a, R> {
    Own(R),
    Offered(&'a R),
}

impl<'a, R: Clone> Placed<'a, R> {
    /// `records` with those at `offered_at` (positions, ascending) moved out: the rest, each
    /// at its place, and the offered ones in order.
    pub(super) fn split(records: Vec<R>, offered_at: &[usize]) -> (Vec<Option<R>>, Vec<R>) {
        let mut offered = Vec::with_capacity(offered_at.len());
        let rest = records
            .into_iter()
            .enumerate()
            .map(|(at, record)| {
                if offered_at.binary_search(&at).is_ok() {
                    offered.push(record);
                    None
                } else {
                    Some(record)
                }
            })
            .collect();
        (rest, offered)
    }

    /// The record at `at` in the batch: `own`, or where [`split`](Self::split) moved it out,
    /// the offered one at its place in `offered`.
    fn at(own: Option<R>, at: usize, offered_at: &[usize], offered: &'a [R]) -> Self {
        match own {
            Some(record) => Self::Own(record),
            None => {
                let place = offered_at
                    .binary_search(&at)
                    .expect("split moved out an offered one");
                Self::Offered(&offered[place])
            }
        }
    }

    fn get(&self) -> &R {
        match self {
            Self::Own(record) => record,
            Self::Offered(record) => record,
        }
    }

    fn into_owned(self) -> R {
        match self {
            Self::Own(record) => record,
            Self::Offered(record) => record.clone(),
        }
    }
}

impl<S, C, E: BatchEvent, P> BatchProcessor<S, C, E, P> {
    /// Runs the records as `scheduling` (resolved for this batch) says; the reports keep the
    /// event's order. The records offered to the pre-check (`offered_at`, positions in the
    /// batch) were moved out of `records` into the batch's offer, in order. With
    /// [batch replay](Self::with_batch_replay), the offered records of a concurrent batch are
    /// replayed together where they can be, the first of them to start working the replays
    /// out for all; the records still start in the event's order.
    pub(super) async fn schedule<T>(
        &self,
        scheduling: Scheduling,
        records: Vec<Option<E::Record>>,
        offered_at: Vec<usize>,
        scope: &BatchScope<E::Record>,
    ) -> Vec<RecordReport<T>>
    where
        S: Service<BatchRecord<E::Record>, Response = Processed<T>, Error = Error> + Clone,
        C: Clock,
        P: ReplayPhase<E::Record, T>,
        T: 'static,
    {
        let offer = &scope.batch.offer;
        let offered = offer.records();
        match scheduling {
            Scheduling::Auto { .. } => unreachable!("resolved by process_batch"),
            Scheduling::Concurrent { limit } => {
                let replay = self.replay.replayer().is_some() && !offered_at.is_empty();
                let replays: Replays<T> = OnceCell::new();
                let (replays, offered_at) = (&replays, offered_at.as_slice());
                // A new record starts as soon as any running one finishes (a slow record
                // does not hold back the others); each report goes to its record's place.
                let mut reports: Vec<Option<RecordReport<T>>> = std::iter::repeat_with(|| None)
                    .take(records.len())
                    .collect();
                let mut finished = futures_util::stream::iter(records.into_iter().enumerate().map(
                    |(index, record)| {
                        // Started as it takes a slot: the first slots' records all begin
                        // their turn before any runs, one waiting for a slot when it gets it.
                        offer.begin_turn();
                        let record = Placed::at(record, index, offered_at, offered);
                        let replayable = replay && offered_at.binary_search(&index).is_ok();
                        // Boxed once: the record's future (a few kilobytes) is not copied
                        // again as the stream hands it to its set of running futures.
                        let report = Box::pin(async move {
                            // A record not started within the deadline margin answers so on
                            // its own path, as it would without the replays.
                            let margin = self.deadline_margin;
                            if !replayable || scope.deadline.is_within(margin, self.clock.now()) {
                                let record = record.into_owned();
                                return self.process_record(record, scope, false).await;
                            }
                            match self.replay_at(index, replays, offered_at, scope).await {
                                Turn::Replayed(replay) => self.answered(record.get(), Ok(replay)),
                                Turn::Own => {
                                    let record = record.into_owned();
                                    self.process_record(record, scope, true).await
                                }
                                Turn::Stopped => {
                                    self.answered(record.get(), Err(Error::DeadlineReached))
                                }
                            }
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
            Scheduling::Fifo {
                skip_failed_group_only,
            } => {
                let mut reports = Vec::with_capacity(records.len());
                let mut stops = Stops::new(skip_failed_group_only);
                for (index, record) in records.into_iter().enumerate() {
                    offer.begin_turn();
                    let record = Placed::at(record, index, &offered_at, offered);
                    let group = E::group(record.get());
                    let report = if stops.skips(group.as_deref()) {
                        skipped(E::item_identifier(record.get()))
                    } else {
                        self.process_record::<T>(record.into_owned(), scope, false)
                            .await
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

    /// How the offered record at `index` of a concurrent batch goes on: the first offered
    /// record to ask runs the replay phase for all of them, and each takes its candidate and
    /// decides at its turn. A panic in that decision (a user's clock) leaves the record to its
    /// own call, where it fails alone.
    async fn replay_at<T: 'static>(
        &self,
        index: usize,
        replays: &Replays<T>,
        offered_at: &[usize],
        scope: &BatchScope<E::Record>,
    ) -> Turn<T>
    where
        S: Service<BatchRecord<E::Record>, Response = Processed<T>, Error = Error> + Clone,
        C: Clock,
        P: ReplayPhase<E::Record, T>,
    {
        let replays = replays
            .get_or_init(|| async {
                let replays = self.replays(offered_at, scope).await;
                replays.map(Mutex::new)
            })
            .await;
        let Some(replays) = replays else {
            return Turn::Stopped;
        };
        let candidate = replays
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(index)
            .and_then(Option::take);
        match candidate.map(|candidate| catch_unwind(AssertUnwindSafe(candidate))) {
            Some(Ok(Some(replay))) => Turn::Replayed(replay),
            _ => Turn::Own,
        }
    }

    /// The replay phase: the candidates of the records offered to the pre-check
    /// (`offered_at`, positions in the batch), by position in the batch, after asking the
    /// service once whether it is ready (each record's own call asks first: a service that
    /// is not, a load shedder's error, replays nothing). It runs under the records' own
    /// guards: stopped at the answer margin (`None`), and a panic in it (a user's service or
    /// clock) replays nothing, each record then going its own way.
    async fn replays<T: 'static>(
        &self,
        offered_at: &[usize],
        scope: &BatchScope<E::Record>,
    ) -> Option<Vec<Option<Candidate<T>>>>
    where
        S: Service<BatchRecord<E::Record>, Response = Processed<T>, Error = Error> + Clone,
        C: Clock,
        P: ReplayPhase<E::Record, T>,
    {
        let phase = AssertUnwindSafe(async {
            let mut service = self.service.clone();
            match (
                self.replay.replayer(),
                ServiceExt::<BatchRecord<E::Record>>::ready(&mut service).await,
            ) {
                (Some(replayer), Ok(_)) => replayer.candidates(&scope.batch, &scope.context).await,
                _ => Vec::new(),
            }
        });
        let mut candidates = tokio::select! {
            candidates = phase.catch_unwind() => candidates.unwrap_or_default().into_iter(),
            () = self.clock.sleep_until(scope.deadline.answer_by()) => return None,
        };
        let mut by_position: Vec<Option<Candidate<T>>> = Vec::new();
        for &at in offered_at {
            by_position.resize_with(at + 1, || None);
            by_position[at] = candidates.next().flatten();
        }
        Some(by_position)
    }

    /// The report of `record`, answered without its own call (replayed, or stopped at the
    /// answer margin while it waited for the replay phase).
    fn answered<T>(
        &self,
        record: &E::Record,
        result: Result<Processed<T>, Error>,
    ) -> RecordReport<T> {
        let report = RecordReport::of(E::item_identifier(record), result);
        report.log(self.log_error_text);
        report
    }
}
