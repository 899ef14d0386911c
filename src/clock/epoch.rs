//! Times as epoch numbers, as records store them: conversions round down and saturate,
//! never panic.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))]
pub fn epoch_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Whole seconds since the Unix epoch, rounded down (0 for times before it).
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))]
pub fn epoch_secs(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

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
