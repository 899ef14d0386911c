//! The lease's times (when it ends, how long the record lives around it), the heartbeat that
//! extends it while the handler runs, and its release.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::store_call::{with_retries, within_deadline};
use crate::clock::{epoch_ms, later_ms, later_secs, Clock, Deadline};
use crate::config::Config;
use crate::error::Error;
use crate::key::IdempotencyKey;
use crate::record::{OwnerToken, Status};
use crate::store::{ExtendRequest, Fenced, Store};

/// The end of the lease for an acquire or extension at `now`: the invocation deadline, or
/// the configured cap if that comes first.
pub(crate) fn lease_end_ms(config: &Config, deadline: Deadline, now: SystemTime) -> u64 {
    match config.max_lease {
        Some(max) => deadline.epoch_ms().min(later_ms(now, max)),
        None => deadline.epoch_ms(),
    }
}

/// The record's expiry for a lease ending at `lease_ms`: the configured window from `now`,
/// and never before the lease ends.
pub(crate) fn expiration_for(config: &Config, now: SystemTime, lease_ms: u64) -> u64 {
    later_secs(now, config.expires_after).max(lease_ms.div_ceil(1000))
}

/// The lease a handler runs under, for its heartbeat.
pub(crate) struct Heartbeat<'a, St, C> {
    pub(crate) store: &'a St,
    pub(crate) clock: &'a C,
    pub(crate) config: &'a Config,
    pub(crate) key: &'a IdempotencyKey,
    pub(crate) owner: &'a OwnerToken,
    pub(crate) deadline: Deadline,
    /// When the lease taken by the acquire ends, in epoch milliseconds.
    pub(crate) held_until_ms: u64,
    /// Set by the work as it sends its final write: only then can a refused extension mean
    /// that the write landed.
    pub(crate) final_write_sent: AtomicBool,
}

impl<St: Store, C: Clock> Heartbeat<'_, St, C> {
    /// Runs `work` (the handler, then storing its result). With a heartbeat configured,
    /// extends the lease every period, concurrently with the work (a slow or hung extension
    /// never holds it back). When an extension finds the lease taken over, or the lease
    /// ends before an extension could confirm it (a hung store), the work is cancelled (its
    /// future dropped at its next await) and the record ends [`LeaseLost`](Error::LeaseLost):
    /// another invocation may hold the key now. Storing the result is fenced by the owner
    /// token either way. An extension refused after the work sent its final write
    /// ([`final_write_sending`](Self::final_write_sending)) is checked against the record:
    /// when that write has landed (its answer still on the way), the work may finish and
    /// give its own answer, until the lease it held would have ended.
    pub(crate) async fn run<F, R>(&self, work: F) -> Result<R, Error>
    where
        F: Future<Output = R>,
    {
        let Some(every) = self.config.heartbeat_period() else {
            return Ok(work.await);
        };
        let heartbeat = async {
            let mut held_until_ms = self.held_until_ms;
            loop {
                self.clock.sleep(every).await;
                let now = self.clock.now();
                let lease_ms = lease_end_ms(self.config, self.deadline, now);
                if lease_ms <= epoch_ms(now) {
                    // The deadline has come: there is nothing left to extend to.
                    std::future::pending::<()>().await;
                }
                let request = ExtendRequest {
                    key: self.key.clone(),
                    owner: self.owner.clone(),
                    lease_expiration_ms: lease_ms,
                    expiration_secs: expiration_for(self.config, now, lease_ms),
                    now,
                };
                let lapses = UNIX_EPOCH + Duration::from_millis(held_until_ms);
                let extend = || self.store.extend(&request);
                let extended = tokio::select! {
                    answer = within_deadline(self.clock, self.deadline, extend) => answer,
                    // No answer before the lease ends: it may be someone else's now.
                    () = self.clock.sleep_until(lapses) => return,
                };
                match extended {
                    Ok(Fenced::Applied) => {
                        held_until_ms = lease_ms;
                        tracing::debug!(lease_expiration_ms = lease_ms, "lease extended");
                    }
                    Ok(Fenced::LeaseLost) => {
                        if self.final_write_sent.load(Ordering::Acquire)
                            && self.finished_by_us(every).await
                        {
                            // Our final write landed and its answer is on its way: the
                            // work ends by itself, within the lease it held.
                            let lapses = UNIX_EPOCH + Duration::from_millis(held_until_ms);
                            self.clock.sleep_until(lapses).await;
                        }
                        return;
                    }
                    Err(err) => {
                        tracing::warn!(error = %err, "could not extend the lease");
                        if epoch_ms(self.clock.now()) > held_until_ms {
                            return;
                        }
                    }
                }
            }
        };
        tokio::select! {
            result = work => Ok(result),
            () = heartbeat => {
                tracing::warn!("lease lost or lapsed while the record ran: cancelled");
                Err(Error::LeaseLost { key: self.key.clone() })
            }
        }
    }

    /// Called by the work just before it sends its final write.
    pub(crate) fn final_write_sending(&self) {
        self.final_write_sent.store(true, Ordering::Release);
    }

    /// Whether the record, read within `budget`, holds this lease's final result (completed
    /// under our owner token). Unread in time or unreadable, it does not.
    async fn finished_by_us(&self, budget: Duration) -> bool {
        let get = || self.store.get(self.key);
        let read = tokio::select! {
            read = within_deadline(self.clock, self.deadline, get) => read,
            () = self.clock.sleep(budget) => return false,
        };
        matches!(read, Ok(Some(record))
            if record.status == Status::Completed && record.owner.as_ref() == Some(self.owner))
    }
}

/// Releases the lease after a failure so a retry can run at once, sent up to `attempts`
/// times while the store is down (a release is owner-fenced, so sending it again is safe).
/// A release that still fails is only logged: the lease then ends by itself at the deadline.
pub(crate) async fn release<St: Store, C: Clock>(
    store: &St,
    clock: &C,
    attempts: u32,
    key: &IdempotencyKey,
    owner: &OwnerToken,
    deadline: Deadline,
) {
    let released = with_retries(
        clock,
        deadline,
        attempts,
        || store.release(key, owner),
        |answer| matches!(answer, Err(err) if err.is_transient()),
    )
    .await;
    match released {
        Ok(Fenced::Applied) => {}
        Ok(Fenced::LeaseLost) => {
            tracing::warn!(idempotency_key = %key, "lease was lost before it could be released");
        }
        Err(err) => tracing::warn!(
            idempotency_key = %key,
            error = %err,
            "could not release the lease; it ends at the invocation deadline"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn lease_ends_at_the_deadline_or_the_cap() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_100);
        let config = Config::new();
        let at = |ms| Deadline::of(ms, now);
        assert_eq!(
            lease_end_ms(&config, at(1_000_000_130_000), now),
            1_000_000_130_000
        );
        let capped = Config::new().with_max_lease(Duration::from_secs(5));
        assert_eq!(
            lease_end_ms(&capped, at(1_000_000_130_000), now),
            1_000_000_105_000
        );
        assert_eq!(
            lease_end_ms(&capped, at(1_000_000_101_000), now),
            1_000_000_101_000
        );
        // A lease past the record window keeps the record alive until the lease ends.
        let short = Config::new().with_expires_after(Duration::from_secs(1));
        assert_eq!(
            expiration_for(&short, now, 1_000_000_130_500),
            1_000_000_131
        );
    }

    #[test]
    fn huge_durations_saturate() {
        let now = SystemTime::now();
        let config = Config::new()
            .with_max_lease(Duration::MAX)
            .with_expires_after(Duration::MAX);
        assert_eq!(lease_end_ms(&config, Deadline::of(0, now), now), 0);
        assert_eq!(expiration_for(&config, now, 42), u64::MAX);
    }
}
