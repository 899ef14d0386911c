//! Retry shaping with SQS's visibility timeout (feature `sqs-visibility`): after a batch,
//! each reported message's visibility is changed so that it comes back when retrying it can
//! help, instead of after the queue's fixed timeout. A message `locked` by another holder
//! comes back when the holder's lease ends; any other reported message backs off
//! exponentially by its receive count, with jitter. Duplicates and failing messages then
//! stop burning receives (and reaching the dead-letter queue) while their holder still runs.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use aws_sdk_sqs::types::ChangeMessageVisibilityBatchRequestEntry;
use lambda_runtime::LambdaEvent;
use tower::{Layer, Service};

use crate::batch::{BatchError, BatchProcessor, BatchReport};
use crate::clock::{epoch_ms, Clock, Deadline, SystemClock};
use crate::error::Error;
use crate::outcome::Outcome;
use crate::processed::Processed;

/// The time kept before the invocation deadline when visibility changes are still out: they
/// are abandoned then, so the response is sent in time.
const SEND_MARGIN: Duration = Duration::from_millis(100);

/// SQS's longest visibility timeout: 12 hours.
pub const MAX_VISIBILITY: Duration = Duration::from_secs(12 * 3600);

/// The backoff of reported messages that are not `locked`: `base × 2^(receives − 1)`, at
/// most `max`, then a random share between half and all of it (jitter), in whole seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first retry's delay.
    pub base: Duration,
    /// The longest delay (at most [`MAX_VISIBILITY`]).
    pub max: Duration,
}

impl Default for Backoff {
    /// 5 s, doubling, at most 15 minutes.
    fn default() -> Self {
        Self {
            base: Duration::from_secs(5),
            max: Duration::from_secs(15 * 60),
        }
    }
}

impl Backoff {
    /// The delay before receive number `receives + 1`, before jitter.
    pub fn ceiling(&self, receives: u32) -> Duration {
        let doublings = receives.saturating_sub(1).min(31);
        self.base
            .saturating_mul(1u32 << doublings)
            .min(self.max)
            .min(MAX_VISIBILITY)
    }
}

/// Builds [`Visibility`] around a [`BatchProcessor`] of SQS events: after each batch, the
/// reported messages' visibility is changed with `ChangeMessageVisibilityBatch` (10 per
/// call, on the queue of each message's `eventSourceARN`). A failed change is logged and
/// changes nothing else: the message comes back after the queue's own timeout. The
/// function's role needs `sqs:ChangeMessageVisibility`.
#[derive(Debug, Clone)]
pub struct VisibilityLayer<C = SystemClock> {
    client: aws_sdk_sqs::Client,
    backoff: Backoff,
    clock: C,
}

impl VisibilityLayer {
    /// Shapes retries through `client`, with the default [`Backoff`].
    pub fn new(client: aws_sdk_sqs::Client) -> Self {
        Self {
            client,
            backoff: Backoff::default(),
            clock: SystemClock,
        }
    }
}

impl<C> VisibilityLayer<C> {
    /// Backs off with `backoff` instead.
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Reads time (for the remaining leases) from `clock`.
    pub fn with_clock<C2: Clock>(self, clock: C2) -> VisibilityLayer<C2> {
        VisibilityLayer {
            client: self.client,
            backoff: self.backoff,
            clock,
        }
    }
}

impl<P, C: Clone> Layer<P> for VisibilityLayer<C> {
    type Service = Visibility<P, C>;

    fn layer(&self, processor: P) -> Visibility<P, C> {
        Visibility {
            processor,
            shaping: self.clone(),
        }
    }
}

/// A [`BatchProcessor`] of SQS events whose reported messages come back when retrying can
/// help (see [`VisibilityLayer`]). A service of `LambdaEvent<SqsEvent>` answering the
/// partial batch response, as the processor is.
#[derive(Debug, Clone)]
pub struct Visibility<P, C = SystemClock> {
    processor: P,
    shaping: VisibilityLayer<C>,
}

/// The new visibility of a reported message: until the holder's lease ends for a `locked`
/// one (plus a second), the backoff otherwise.
pub(crate) fn visibility_of(
    report_error: Option<&Error>,
    outcome: Outcome,
    receives: u32,
    backoff: &Backoff,
    now: SystemTime,
) -> Duration {
    if let (
        Outcome::Locked,
        Some(Error::InProgress {
            lease_ends_ms: Some(end),
            ..
        }),
    ) = (outcome, report_error)
    {
        let remaining_ms = end.saturating_sub(epoch_ms(now));
        return Duration::from_millis(remaining_ms)
            .saturating_add(Duration::from_secs(1))
            .min(MAX_VISIBILITY);
    }
    let ceiling = backoff.ceiling(receives).as_millis() as u64;
    Duration::from_millis(fastrand::u64(ceiling / 2..=ceiling.max(1)))
}

/// The queue URL of an SQS queue ARN (`arn:aws:sqs:region:account:name`).
pub fn queue_url(arn: &str) -> Option<String> {
    let mut parts = arn.split(':');
    let (Some("arn"), Some(partition), Some("sqs"), Some(region), Some(account), Some(name)) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return None;
    };
    let domain = if partition == "aws-cn" {
        "amazonaws.com.cn"
    } else {
        "amazonaws.com"
    };
    Some(format!("https://sqs.{region}.{domain}/{account}/{name}"))
}

impl<C: Clock> VisibilityLayer<C> {
    /// The visibility changes for the reported messages of `records` (the batch, as it came)
    /// after `report`, by queue.
    fn plan<T>(
        &self,
        records: &[SqsMessage],
        report: &BatchReport<T, SqsBatchResponse>,
    ) -> Vec<(String, Vec<ChangeMessageVisibilityBatchRequestEntry>)> {
        let now = self.clock.now();
        let mut by_queue: Vec<(String, Vec<ChangeMessageVisibilityBatchRequestEntry>)> = Vec::new();
        for (record, result) in records.iter().zip(&report.records) {
            if result.outcome.is_acknowledged() {
                continue;
            }
            let (Some(handle), Some(url)) = (
                record.receipt_handle.as_deref(),
                record.event_source_arn.as_deref().and_then(queue_url),
            ) else {
                continue;
            };
            let receives = record
                .attributes
                .get("ApproximateReceiveCount")
                .and_then(|c| c.parse().ok())
                .unwrap_or(1);
            let visibility = visibility_of(
                result.error.as_ref(),
                result.outcome,
                receives,
                &self.backoff,
                now,
            );
            let secs = i32::try_from(
                visibility
                    .as_secs()
                    .max(u64::from(visibility.subsec_millis() > 0)),
            )
            .unwrap_or(i32::MAX);
            let entry = ChangeMessageVisibilityBatchRequestEntry::builder()
                .id(format!(
                    "m{}",
                    by_queue.iter().map(|(_, e)| e.len()).sum::<usize>()
                ))
                .receipt_handle(handle)
                .visibility_timeout(secs)
                .build();
            let Ok(entry) = entry else { continue };
            match by_queue.iter_mut().find(|(u, _)| *u == url) {
                Some((_, entries)) => entries.push(entry),
                None => by_queue.push((url, vec![entry])),
            }
        }
        by_queue
    }

    /// Sends the changes, 10 per call.
    async fn send(&self, by_queue: Vec<(String, Vec<ChangeMessageVisibilityBatchRequestEntry>)>) {
        for (url, entries) in by_queue {
            for chunk in entries.chunks(10) {
                let sent = self
                    .client
                    .change_message_visibility_batch()
                    .queue_url(&url)
                    .set_entries(Some(chunk.to_vec()))
                    .send()
                    .await;
                match sent {
                    Ok(out) if out.failed().is_empty() => {}
                    Ok(out) => tracing::warn!(
                        failed = out.failed().len(),
                        "some visibility changes were refused; those messages come back after the queue's timeout"
                    ),
                    Err(err) => tracing::warn!(
                        error = %aws_sdk_sqs::error::DisplayErrorContext(&err),
                        "visibility change failed; the messages come back after the queue's timeout"
                    ),
                }
            }
        }
    }
}

impl<S, PC, C, T> Service<LambdaEvent<SqsEvent>> for Visibility<BatchProcessor<S, PC>, C>
where
    S: Service<LambdaEvent<SqsMessage>, Response = Processed<T>, Error = Error>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send,
    PC: Clock + Clone,
    C: Clock + Clone,
    T: Send + 'static,
{
    type Response = SqsBatchResponse;
    type Error = BatchError;
    type Future = Pin<Box<dyn Future<Output = Result<SqsBatchResponse, BatchError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BatchError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, event: LambdaEvent<SqsEvent>) -> Self::Future {
        let (processor, shaping) = (self.processor.clone(), self.shaping.clone());
        Box::pin(async move {
            let records = event.payload.records.clone();
            let deadline = Deadline::of(event.context.deadline, shaping.clock.now());
            let report = processor.process(event).await;
            let changes = shaping.plan(&records, &report);
            // The response must reach Lambda before the deadline (a late one retries the
            // whole batch): the changes get what is left, and are abandoned after it.
            tokio::select! {
                () = shaping.send(changes) => {}
                () = shaping.clock.sleep_until(deadline.before(SEND_MARGIN)) => {
                    tracing::warn!("visibility changes cut off at the deadline; those messages come back after the queue's timeout");
                }
            }
            report.into_response()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::IdempotencyKey;

    #[test]
    fn queue_urls_come_from_arns() {
        assert_eq!(
            queue_url("arn:aws:sqs:eu-west-1:123456789012:orders.fifo").as_deref(),
            Some("https://sqs.eu-west-1.amazonaws.com/123456789012/orders.fifo")
        );
        assert_eq!(queue_url("arn:aws:sns:eu-west-1:1:topic"), None);
        assert_eq!(queue_url("not an arn"), None);
    }

    #[test]
    fn backoff_doubles_with_receives_and_saturates() {
        let b = Backoff::default();
        assert_eq!(b.ceiling(0), Duration::from_secs(5));
        assert_eq!(b.ceiling(1), Duration::from_secs(5));
        assert_eq!(b.ceiling(3), Duration::from_secs(20));
        assert_eq!(b.ceiling(u32::MAX), Duration::from_secs(900));
        let huge = Backoff {
            base: Duration::MAX,
            max: Duration::MAX,
        };
        assert_eq!(huge.ceiling(40), MAX_VISIBILITY);
    }

    #[test]
    fn a_locked_message_comes_back_when_the_lease_ends() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let locked = Error::InProgress {
            key: IdempotencyKey::from_stored("k"),
            lease_ends_ms: Some(1_030_000),
        };
        let b = Backoff::default();
        let v = visibility_of(Some(&locked), Outcome::Locked, 1, &b, now);
        assert_eq!(v, Duration::from_secs(31));
        // A lease already over: back in a second.
        let over = Error::InProgress {
            key: IdempotencyKey::from_stored("k"),
            lease_ends_ms: Some(1),
        };
        let v = visibility_of(Some(&over), Outcome::Locked, 1, &b, now);
        assert_eq!(v, Duration::from_secs(1));
        // Anything else: within the jittered backoff.
        for _ in 0..100 {
            let v = visibility_of(None, Outcome::Failed, 3, &b, now);
            assert!(
                v >= Duration::from_secs(10) && v <= Duration::from_secs(20),
                "{v:?}"
            );
        }
    }
}
