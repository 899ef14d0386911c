//! Injected time: the [`Clock`] trait, the wall clock and a manual clock for tests.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::Notify;

/// A source of the current time.
///
/// The idempotency logic never reads the system clock itself: it asks a `Clock`. Production
/// code uses [`SystemClock`] (the default); tests drive a [`ManualClock`]. Any
/// `Fn() -> SystemTime` closure is a clock too.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> SystemTime;

    /// Waits for `duration` of real time (pacing: retry backoff, heartbeat periods). The
    /// default is [`tokio::time::sleep`], which tests can pause and advance.
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(tokio::time::sleep(duration))
    }

    /// Waits until this clock reads `target` or later (deadlines: a record's cut-off, a
    /// follower's wait). The default checks [`now`](Clock::now) at least every 50 ms, so it
    /// follows any clock; [`SystemClock`] sleeps once, and [`ManualClock`] wakes when it is
    /// moved.
    fn sleep_until(&self, target: SystemTime) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            while let Ok(left) = target.duration_since(self.now()) {
                if left.is_zero() {
                    break;
                }
                tokio::time::sleep(left.min(Duration::from_millis(50))).await;
            }
        })
    }
}

/// The wall clock, [`SystemTime::now`].
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }

    fn sleep_until(&self, target: SystemTime) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        let left = target.duration_since(SystemTime::now()).unwrap_or_default();
        Box::pin(tokio::time::sleep(left))
    }
}

impl<F> Clock for F
where
    F: Fn() -> SystemTime + Send + Sync + 'static,
{
    fn now(&self) -> SystemTime {
        self()
    }
}

/// A clock that only moves when told to. Clones share the same time.
///
/// ```
/// use lambda_idempotency::{Clock, ManualClock};
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

/// Deadlines below this many epoch milliseconds (September 2001) cannot be absolute times:
/// local emulators such as `cargo lambda watch` send the remaining time instead.
pub const RELATIVE_DEADLINE_BELOW_MS: u64 = 1_000_000_000_000;

/// The invocation deadline in epoch milliseconds, given the `Lambda-Runtime-Deadline-Ms`
/// value and the time it was read.
///
/// AWS sends an absolute time. `cargo lambda watch` sends the remaining milliseconds
/// (600000 by default): a value below [`RELATIVE_DEADLINE_BELOW_MS`] is read as that, from
/// `now`. A deadline of 0 stays passed: it never means "unknown".
pub fn deadline_ms(context_deadline_ms: u64, now: SystemTime) -> u64 {
    if context_deadline_ms > 0 && context_deadline_ms < RELATIVE_DEADLINE_BELOW_MS {
        epoch_ms(now).saturating_add(context_deadline_ms)
    } else {
        context_deadline_ms
    }
}

/// Epoch milliseconds `after` past `now`, saturating at `u64::MAX` instead of overflowing
/// (a configured window of `Duration::MAX` means "never").
pub(crate) fn later_ms(now: SystemTime, after: Duration) -> u64 {
    epoch_ms(now).saturating_add(u64::try_from(after.as_millis()).unwrap_or(u64::MAX))
}

/// Epoch seconds `after` past `now`, rounded down, saturating at `u64::MAX`.
pub(crate) fn later_secs(now: SystemTime, after: Duration) -> u64 {
    epoch_secs(now).saturating_add(after.as_secs())
}

/// Milliseconds since the Unix epoch (0 for times before it).
pub fn epoch_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Whole seconds since the Unix epoch, rounded down (0 for times before it).
pub fn epoch_secs(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
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

    #[test]
    fn closures_are_clocks() {
        let clock = || UNIX_EPOCH + Duration::from_secs(42);
        assert_eq!(epoch_secs(Clock::now(&clock)), 42);
    }

    #[test]
    fn relative_deadlines_from_local_emulators_are_anchored_at_now() {
        let now = UNIX_EPOCH + Duration::from_millis(1_795_000_000_000);
        assert_eq!(deadline_ms(600_000, now), 1_795_000_600_000);
        assert_eq!(deadline_ms(1_795_000_030_000, now), 1_795_000_030_000);
        assert_eq!(deadline_ms(0, now), 0, "a zero deadline stays passed");
    }

    #[test]
    fn later_times_saturate_instead_of_panicking() {
        let now = UNIX_EPOCH + Duration::from_millis(1_999);
        assert_eq!(later_ms(now, Duration::from_millis(1)), 2_000);
        assert_eq!(later_secs(now, Duration::from_secs(2)), 3);
        assert_eq!(later_ms(now, Duration::MAX), u64::MAX);
        assert_eq!(later_secs(now, Duration::MAX), u64::MAX);
    }

    #[test]
    fn epoch_conversions_round_down() {
        let t = UNIX_EPOCH + Duration::from_millis(1_999);
        assert_eq!(epoch_secs(t), 1);
        assert_eq!(epoch_ms(t), 1_999);
        assert_eq!(epoch_ms(UNIX_EPOCH - Duration::from_secs(1)), 0);
    }
}
