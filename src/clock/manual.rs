//! [`ManualClock`]: a clock for tests, moved only by the test (`testing` feature).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::Notify;

use super::{epoch_ms, Clock};

/// A clock that only moves when told to. Clones share the same time.
///
/// ```
/// use lambda_idempotency::clock::{Clock, ManualClock};
/// use std::time::{Duration, UNIX_EPOCH};
///
/// let clock = ManualClock::at_epoch_ms(1_700_000_000_000);
/// clock.advance(Duration::from_secs(5));
/// assert_eq!(clock.now(), UNIX_EPOCH + Duration::from_millis(1_700_000_005_000));
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    epoch_ms: Arc<AtomicU64>,
    moved: Arc<Notify>,
}

impl ManualClock {
    /// A clock standing at `epoch_ms` milliseconds after the Unix epoch.
    pub fn at_epoch_ms(epoch_ms: u64) -> Self {
        Self {
            epoch_ms: Arc::new(AtomicU64::new(epoch_ms)),
            moved: Arc::default(),
        }
    }

    /// A clock standing at the current wall-clock time (it does not move afterwards).
    pub fn starting_now() -> Self {
        Self::at_epoch_ms(epoch_ms(SystemTime::now()))
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let by_ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.epoch_ms.fetch_add(by_ms, Ordering::SeqCst);
        self.moved.notify_waiters();
    }

    /// Sets the clock to `epoch_ms` milliseconds after the Unix epoch.
    pub fn set_epoch_ms(&self, epoch_ms: u64) {
        self.epoch_ms.store(epoch_ms, Ordering::SeqCst);
        self.moved.notify_waiters();
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.epoch_ms.load(Ordering::SeqCst))
    }

    /// Waits until the clock is moved to `target` or later: a deadline passes when the test
    /// says so, never by itself.
    fn sleep_until(&self, target: SystemTime) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            loop {
                let moved = self.moved.notified();
                let mut moved = std::pin::pin!(moved);
                moved.as_mut().enable();
                if self.now() >= target {
                    return;
                }
                moved.await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_clones_share_time() {
        let a = ManualClock::at_epoch_ms(1_000);
        let b = a.clone();
        a.advance(Duration::from_millis(500));
        assert_eq!(epoch_ms(b.now()), 1_500);
        b.set_epoch_ms(10);
        assert_eq!(epoch_ms(a.now()), 10);
    }

    #[tokio::test]
    async fn a_manual_deadline_passes_when_the_clock_is_moved_and_not_before() {
        let clock = ManualClock::at_epoch_ms(1_000);
        let target = UNIX_EPOCH + Duration::from_millis(2_000);
        let mut waiting = tokio::spawn({
            let clock = clock.clone();
            async move { clock.sleep_until(target).await }
        });
        let early = tokio::time::timeout(Duration::from_millis(100), &mut waiting).await;
        assert!(
            early.is_err(),
            "real time passing does not move a manual clock"
        );
        clock.advance(Duration::from_millis(999));
        assert!(
            tokio::time::timeout(Duration::from_millis(50), &mut waiting)
                .await
                .is_err()
        );
        clock.advance(Duration::from_millis(1));
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("woken when moved to the target")
            .unwrap();
        // Any clock: a closure's deadline is checked against its own time.
        let fixed = || UNIX_EPOCH + Duration::from_secs(5);
        tokio::time::timeout(
            Duration::from_secs(1),
            fixed.sleep_until(UNIX_EPOCH + Duration::from_secs(4)),
        )
        .await
        .expect("a passed deadline does not wait");
    }
}
