//! Store calls under the invocation deadline: every call the protocol makes is bounded by the
//! time left before [`Deadline::calls_end`] (the deadline less
//! [`CALL_MARGIN`](crate::clock::CALL_MARGIN)), whatever the store's client is configured
//! with ([`within_deadline`]); a batch stops its records earlier, at its answer margin; and the calls that are safe to send again (owner-fenced
//! completions and releases, commits carrying a request token) are retried with exponential
//! backoff and jitter, slept through the injected clock, never past it ([`with_retries`]).

use std::future::Future;
use std::time::Duration;

use crate::clock::{later_ms, Clock, Deadline, SHORTEST_CALL};
use crate::store::StoreError;

/// Sends the store call `call` makes if there is time for it, and waits for its answer until
/// `deadline`'s [`calls_end`](Deadline::calls_end) at most. With less than [`SHORTEST_CALL`]
/// left, the call is not made ([`StoreError::DeadlineReached`] `{ sent: false }`: nothing was
/// asked); one still unanswered at `calls_end` is dropped (`{ sent: true }`): its answer is
/// lost, as after a timeout, which the protocol treats as it treats any lost answer. `call`
/// is only invoked when the call is sent: some stores act as soon as the call is made.
pub(crate) async fn within_deadline<C, F, Fut, T>(
    clock: &C,
    deadline: Deadline,
    call: F,
) -> Result<T, StoreError>
where
    C: Clock,
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let calls_end = deadline.calls_end();
    if deadline.left_for_calls(clock.now()) < SHORTEST_CALL {
        return Err(StoreError::DeadlineReached { sent: false });
    }
    tokio::select! {
        biased;
        answer = call() => answer,
        () = clock.sleep_until(calls_end) => Err(StoreError::DeadlineReached { sent: true }),
    }
}

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

/// Makes the store call `call` makes up to `attempts` times, each [within the
/// deadline](within_deadline), while `again` says its answer is worth another try, backing
/// off between calls; gives up early rather than sleep past `deadline`'s
/// [`calls_end`](Deadline::calls_end). Returns the last answer.
pub(crate) async fn with_retries<C, F, Fut, T>(
    clock: &C,
    deadline: Deadline,
    attempts: u32,
    mut call: F,
    again: impl Fn(&Result<T, StoreError>) -> bool,
) -> Result<T, StoreError>
where
    C: Clock,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let calls_end_ms = crate::clock::epoch_ms(deadline.calls_end());
    let mut attempt = 1;
    loop {
        let answer = within_deadline(clock, deadline, &mut call).await;
        if attempt >= attempts || !again(&answer) {
            return answer;
        }
        let wait = backoff(attempt);
        if later_ms(clock.now(), wait) >= calls_end_ms {
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

    /// A deadline that leaves `ms` milliseconds before its call margin.
    fn leaving(clock: &ManualClock, ms: u64) -> Deadline {
        let margin_ms = crate::clock::CALL_MARGIN.as_millis() as u64;
        Deadline::of(epoch_ms(clock.now()) + margin_ms + ms, clock.now())
    }

    #[tokio::test(start_paused = true)]
    async fn retries_until_an_answer_is_final_or_attempts_run_out() {
        let clock = ManualClock::starting_now();
        let deadline = leaving(&clock, 60_000);
        let calls = AtomicU32::new(0);
        let call = || async { Ok::<_, StoreError>(calls.fetch_add(1, Ordering::SeqCst) + 1) };
        let answer = with_retries(&clock, deadline, 5, call, |n| *n.as_ref().unwrap() < 3).await;
        assert_eq!((answer.unwrap(), calls.load(Ordering::SeqCst)), (3, 3));
        calls.store(0, Ordering::SeqCst);
        let answer = with_retries(&clock, deadline, 2, call, |_| true).await;
        assert_eq!(answer.unwrap(), 2, "bounded by the attempts");
    }

    #[tokio::test(start_paused = true)]
    async fn never_sleeps_past_the_call_margin() {
        let clock = ManualClock::starting_now();
        // Time for one call, not for the first backoff (12 ms at least) and another.
        let deadline = leaving(&clock, 11);
        let calls = AtomicU32::new(0);
        let call = || async { Ok::<_, StoreError>(calls.fetch_add(1, Ordering::SeqCst)) };
        with_retries(&clock, deadline, 10, call, |_| true)
            .await
            .unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_without_time_for_an_answer_is_not_made() {
        let clock = ManualClock::starting_now();
        let calls = AtomicU32::new(0);
        let call = || async { Ok::<_, StoreError>(calls.fetch_add(1, Ordering::SeqCst)) };
        for deadline in [
            leaving(&clock, 9),
            Deadline::of(epoch_ms(clock.now()), clock.now()),
        ] {
            let answer = within_deadline(&clock, deadline, call).await;
            assert!(matches!(
                answer,
                Err(StoreError::DeadlineReached { sent: false })
            ));
        }
        // Past the deadline, and well before it (whatever the call margin is).
        let past = Deadline::of(epoch_ms(clock.now()) - 1_000, clock.now());
        assert!(within_deadline(&clock, past, call).await.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 0, "the call was never made");
        let answer = within_deadline(&clock, leaving(&clock, 10), call).await;
        assert_eq!(answer.unwrap(), 0, "10 ms left: sent");
    }

    #[tokio::test]
    async fn a_call_unanswered_at_the_call_margin_is_cut_short_as_a_lost_answer() {
        let clock = ManualClock::starting_now();
        let deadline = leaving(&clock, 2_000);
        let hung = || std::future::pending::<Result<(), StoreError>>();
        let call = within_deadline(&clock, deadline, hung);
        let mover = async {
            // The call waits whatever the store's client would; the deadline stops it.
            tokio::task::yield_now().await;
            clock.advance(Duration::from_millis(1_999));
            tokio::task::yield_now().await;
            clock.advance(Duration::from_millis(1));
        };
        let (answer, ()) = tokio::join!(call, mover);
        let err = answer.unwrap_err();
        assert!(matches!(err, StoreError::DeadlineReached { sent: true }));
        assert!(err.is_transient(), "a lost answer, as after a timeout");
        assert_eq!(clock.now(), deadline.calls_end());
    }
}
