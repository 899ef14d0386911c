//! Bounded retries of store calls that are safe to send again (owner-fenced completions and
//! releases, commits carrying a request token): exponential backoff with jitter, slept
//! through the injected clock, never past the invocation deadline.

use std::future::Future;
use std::time::Duration;

use crate::clock::{later_ms, Clock, Deadline};

/// The first backoff; each retry doubles it, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(25);
/// The longest backoff.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// The wait before retry number `retry` (1 for the first): between half and all of
/// `FIRST_BACKOFF * 2^(retry-1)`, capped at `MAX_BACKOFF`.
fn backoff(retry: u32) -> Duration {
    let ceiling = FIRST_BACKOFF
        .saturating_mul(1u32 << retry.saturating_sub(1).min(16))
        .min(MAX_BACKOFF);
    let ceiling_ms = u64::try_from(ceiling.as_millis()).unwrap_or(u64::MAX);
    Duration::from_millis(fastrand::u64(ceiling_ms / 2..=ceiling_ms))
}

/// Calls `call` up to `attempts` times while `again` says its answer is worth another try,
/// backing off between calls; gives up early rather than sleep past `deadline`. Returns
/// the last answer.
pub(crate) async fn with_retries<C, F, Fut, T>(
    clock: &C,
    deadline: Deadline,
    attempts: u32,
    mut call: F,
    again: impl Fn(&T) -> bool,
) -> T
where
    C: Clock,
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
{
    let mut attempt = 1;
    loop {
        let answer = call().await;
        if attempt >= attempts || !again(&answer) {
            return answer;
        }
        let wait = backoff(attempt);
        if later_ms(clock.now(), wait) >= deadline.epoch_ms() {
            tracing::debug!(attempt, "no time left before the deadline to retry");
            return answer;
        }
        tracing::debug!(attempt, wait_ms = wait.as_millis() as u64, "retrying");
        clock.sleep(wait).await;
        attempt += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{epoch_ms, ManualClock};
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn backoff_grows_with_jitter_and_a_cap() {
        for _ in 0..100 {
            let first = backoff(1);
            assert!(first >= Duration::from_millis(12) && first <= FIRST_BACKOFF);
            let third = backoff(3);
            assert!(third >= Duration::from_millis(50) && third <= Duration::from_millis(100));
            assert!(backoff(40) <= MAX_BACKOFF);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retries_until_an_answer_is_final_or_attempts_run_out() {
        let clock = ManualClock::starting_now();
        let deadline = Deadline::of(epoch_ms(clock.now()) + 60_000, clock.now());
        let calls = AtomicU32::new(0);
        let answer = with_retries(
            &clock,
            deadline,
            5,
            || async { calls.fetch_add(1, Ordering::SeqCst) + 1 },
            |n| *n < 3,
        )
        .await;
        assert_eq!((answer, calls.load(Ordering::SeqCst)), (3, 3));
        calls.store(0, Ordering::SeqCst);
        let answer = with_retries(
            &clock,
            deadline,
            2,
            || async { calls.fetch_add(1, Ordering::SeqCst) + 1 },
            |_| true,
        )
        .await;
        assert_eq!(answer, 2, "bounded by the attempts");
    }

    #[tokio::test(start_paused = true)]
    async fn never_sleeps_past_the_deadline() {
        let clock = ManualClock::starting_now();
        let deadline = Deadline::of(epoch_ms(clock.now()) + 10, clock.now());
        let calls = AtomicU32::new(0);
        with_retries(
            &clock,
            deadline,
            10,
            || async { calls.fetch_add(1, Ordering::SeqCst) },
            |_| true,
        )
        .await;
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
