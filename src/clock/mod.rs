//! Injected time: the [`Clock`] trait, the wall clock, the invocation [`Deadline`], and (with
//! the `testing` feature) a manual clock for tests.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

mod epoch;
#[cfg(any(test, feature = "testing"))]
mod manual;

#[cfg(not(feature = "testing"))]
pub(crate) use epoch::{epoch_ms, epoch_secs};
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub use epoch::{epoch_ms, epoch_secs};
pub(crate) use epoch::{later_ms, later_secs};
#[cfg(any(test, feature = "testing"))]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub use manual::ManualClock;

/// A source of the current time.
///
/// The idempotency logic never reads the system clock itself: it asks a `Clock`. Production
/// code uses [`SystemClock`] (the default); tests drive a `ManualClock` (with the `testing`
/// feature). Any `Fn() -> SystemTime` closure is a clock too.
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
    /// follows any clock; [`SystemClock`] sleeps once, and `ManualClock` wakes when it is
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

/// The time a batch keeps before the invocation deadline to answer Lambda. A record still
/// running then is stopped and reported (its store calls with it), so that the batch's
/// response, built from every record's report, reaches Lambda before the deadline (Lambda
/// discards a late one and retries the whole batch).
pub const ANSWER_MARGIN: Duration = Duration::from_millis(500);

/// The time kept before the invocation deadline after the last store call. Every store call
/// is bounded by the time left before it, whatever the store's client is configured with, so
/// that an invocation outside a batch (a whole invocation, an HTTP request) still answers
/// in time. Shorter than [`ANSWER_MARGIN`]: a handler that returns with half a second left
/// still stores its result, rather than running again on the retry.
pub const CALL_MARGIN: Duration = Duration::from_millis(100);

/// The least time a store call needs to be worth sending: a call with less than this left
/// before the call margin is not sent (no store answers faster than a round trip).
pub const SHORTEST_CALL: Duration = Duration::from_millis(10);

/// Deadlines below this many epoch milliseconds (September 2001) cannot be absolute times:
/// local emulators such as `cargo lambda watch` send the remaining time instead.
pub const RELATIVE_DEADLINE_BELOW_MS: u64 = 1_000_000_000_000;

/// The invocation deadline: normalised from the `Lambda-Runtime-Deadline-Ms` value by
/// [`Deadline::of`], and carried as this value afterwards. Normalising an absolute deadline
/// again leaves it as it is, so a batch can hand the normalised value on in the `Context`
/// (for clocks after September 2001, see [`RELATIVE_DEADLINE_BELOW_MS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Deadline {
    epoch_ms: u64,
}

impl Deadline {
    /// The deadline of an invocation whose context says `context_deadline_ms`, read at `now`.
    ///
    /// AWS sends an absolute time. `cargo lambda watch` sends the remaining milliseconds
    /// (600000 by default): a value below [`RELATIVE_DEADLINE_BELOW_MS`] is read as that, from
    /// `now`. A deadline of 0 stays passed: it never means "unknown".
    pub fn of(context_deadline_ms: u64, now: SystemTime) -> Self {
        let epoch_ms =
            if context_deadline_ms > 0 && context_deadline_ms < RELATIVE_DEADLINE_BELOW_MS {
                epoch_ms(now).saturating_add(context_deadline_ms)
            } else {
                context_deadline_ms
            };
        Self { epoch_ms }
    }

    /// The deadline as epoch milliseconds.
    pub fn epoch_ms(self) -> u64 {
        self.epoch_ms
    }

    /// The deadline as a time.
    pub fn time(self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.epoch_ms)
    }

    /// The instant `margin` before the deadline (the epoch at the earliest).
    pub fn before(self, margin: Duration) -> SystemTime {
        let margin_ms = u64::try_from(margin.as_millis()).unwrap_or(u64::MAX);
        UNIX_EPOCH + Duration::from_millis(self.epoch_ms.saturating_sub(margin_ms))
    }

    /// Whether `now` is at most `margin` before the deadline (or past it).
    pub fn is_within(self, margin: Duration, now: SystemTime) -> bool {
        later_ms(now, margin) >= self.epoch_ms
    }

    /// The instant by which a batch's records must end so its answer reaches Lambda in
    /// time: [`ANSWER_MARGIN`] before the deadline.
    pub fn answer_by(self) -> SystemTime {
        self.before(ANSWER_MARGIN)
    }

    /// The instant by which every store call must have its answer: [`CALL_MARGIN`] before
    /// the deadline.
    pub fn calls_end(self) -> SystemTime {
        self.before(CALL_MARGIN)
    }

    /// The time left at `now` for store calls, before [`calls_end`](Self::calls_end) (zero
    /// when it has passed).
    pub fn left_for_calls(self, now: SystemTime) -> Duration {
        self.calls_end().duration_since(now).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closures_are_clocks() {
        let clock = || UNIX_EPOCH + Duration::from_secs(42);
        assert_eq!(epoch_secs(Clock::now(&clock)), 42);
    }

    #[test]
    fn relative_deadlines_from_local_emulators_are_anchored_at_now() {
        let now = UNIX_EPOCH + Duration::from_millis(1_795_000_000_000);
        assert_eq!(Deadline::of(600_000, now).epoch_ms(), 1_795_000_600_000);
        let absolute = Deadline::of(1_795_000_030_000, now);
        assert_eq!(absolute.epoch_ms(), 1_795_000_030_000);
        assert_eq!(
            Deadline::of(absolute.epoch_ms(), now),
            absolute,
            "normalised once"
        );
        assert_eq!(
            Deadline::of(0, now).epoch_ms(),
            0,
            "a zero deadline stays passed"
        );
        assert!(Deadline::of(0, now).is_within(Duration::ZERO, now));
        assert!(absolute.is_within(Duration::from_secs(30), now));
        assert!(!absolute.is_within(Duration::from_millis(29_999), now));
        assert_eq!(
            absolute.before(Duration::from_secs(1)),
            UNIX_EPOCH + Duration::from_millis(1_795_000_029_000)
        );
    }
}
