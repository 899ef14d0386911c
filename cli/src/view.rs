//! How records are shown: text for people, JSON for scripts.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lambda_idempotency::record::{OwnerToken, Record, Status};
use serde_json::{json, Value};

/// Milliseconds since the Unix epoch (0 before it).
pub fn epoch_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The instant `ms` milliseconds after the Unix epoch.
pub fn from_epoch_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

/// The instant `secs` seconds after the Unix epoch.
pub fn from_epoch_secs(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

/// `time` relative to `now`, in its largest whole unit: `in 3m`, `4h ago`, `now`.
pub fn relative(time: SystemTime, now: SystemTime) -> String {
    match time.duration_since(now) {
        Ok(ahead) if ahead.as_secs() > 0 => format!("in {}", coarse(ahead)),
        Ok(_) => "now".into(),
        Err(err) if err.duration().as_secs() > 0 => format!("{} ago", coarse(err.duration())),
        Err(_) => "now".into(),
    }
}

/// A duration in its largest whole unit (`7d`, `4h`, `3m`, `12s`).
fn coarse(duration: Duration) -> String {
    let secs = duration.as_secs();
    match secs {
        86_400.. => format!("{}d", secs / 86_400),
        3_600.. => format!("{}h", secs / 3_600),
        60.. => format!("{}m", secs / 60),
        _ => format!("{secs}s"),
    }
}

/// RFC 3339 UTC with seconds (`2026-01-02T03:04:05Z`).
pub fn rfc3339_secs(secs: u64) -> String {
    humantime::format_rfc3339_seconds(from_epoch_secs(secs)).to_string()
}

/// RFC 3339 UTC with milliseconds (`2026-01-02T03:04:05.678Z`).
pub fn rfc3339_ms(ms: u64) -> String {
    humantime::format_rfc3339_millis(from_epoch_ms(ms)).to_string()
}

/// The lease is live at `now`, as the library decides it ([`Record::lease_elapsed`]): the
/// record is in progress and its lease end (`in_progress_expiration`, epoch ms) is not before
/// `now`, or it has no lease end at all (the library never lets such a lease elapse).
pub fn lease_live(record: &Record, now: SystemTime) -> bool {
    record.status == Status::InProgress && !record.lease_elapsed(now)
}

/// A record as one JSON object: every stored field, with times also in RFC 3339 and
/// relative to `now`.
pub fn record_json(record: &Record, now: SystemTime) -> Value {
    let lease = record.lease_expiration_ms;
    json!({
        "found": true,
        "id": record.key.as_str(),
        "status": record.status.as_str(),
        "expiration": record.expiration_secs,
        "expiration_rfc3339": rfc3339_secs(record.expiration_secs),
        "expiration_relative": relative(from_epoch_secs(record.expiration_secs), now),
        "expired": record.is_expired(now),
        "in_progress_expiration": lease,
        "in_progress_expiration_rfc3339": lease.map(rfc3339_ms),
        "in_progress_expiration_relative": lease.map(|ms| relative(from_epoch_ms(ms), now)),
        "lease_live": lease_live(record, now),
        "lease_owner": record.owner.as_ref().map(OwnerToken::as_str),
        "data": record.data,
        "validation": record.validation,
    })
}

/// A record as labelled lines, for people.
pub fn record_text(record: &Record, now: SystemTime) -> String {
    let mut text = format!("id:         {}\n", record.key);
    text.push_str(&format!("status:     {}\n", record.status));
    let expired = if record.is_expired(now) {
        " (expired: no longer counts)"
    } else {
        ""
    };
    text.push_str(&format!(
        "expires:    {} ({}){expired}\n",
        rfc3339_secs(record.expiration_secs),
        relative(from_epoch_secs(record.expiration_secs), now)
    ));
    let lease = match record.lease_expiration_ms {
        Some(ms) => {
            let state = if lease_live(record, now) {
                "live"
            } else {
                "elapsed"
            };
            format!(
                "{} ({}, {state})",
                rfc3339_ms(ms),
                relative(from_epoch_ms(ms), now)
            )
        }
        None => "-".into(),
    };
    text.push_str(&format!("lease end:  {lease}\n"));
    let owner = record.owner.as_ref().map_or("-", OwnerToken::as_str);
    text.push_str(&format!("owner:      {owner}\n"));
    text.push_str(&format!(
        "data:       {}\n",
        record.data.as_deref().unwrap_or("-")
    ));
    text.push_str(&format!(
        "validation: {}\n",
        record.validation.as_deref().unwrap_or("-")
    ));
    text
}

/// A record on one line, for `list`: id, status, expiry and lease end (relative), owner.
pub fn record_line(record: &Record, now: SystemTime) -> String {
    let lease = record.lease_expiration_ms.map_or("-".into(), |ms| {
        format!("lease {}", relative(from_epoch_ms(ms), now))
    });
    format!(
        "{}  {}  expires {}  {}  owner {}",
        record.key,
        record.status,
        relative(from_epoch_secs(record.expiration_secs), now),
        lease,
        record.owner.as_ref().map_or("-", OwnerToken::as_str)
    )
}

#[cfg(test)]
mod tests {
    use lambda_idempotency::key::IdempotencyKey;

    use super::*;

    #[test]
    fn relative_times_use_the_largest_unit() {
        let now = from_epoch_secs(1_000_000);
        assert_eq!(relative(from_epoch_secs(1_000_180), now), "in 3m");
        assert_eq!(
            relative(from_epoch_secs(1_000_000 - 4 * 3600 - 5), now),
            "4h ago"
        );
        assert_eq!(
            relative(from_epoch_secs(1_000_000 + 7 * 86_400), now),
            "in 7d"
        );
        assert_eq!(relative(now, now), "now");
        assert_eq!(relative(from_epoch_ms(1_000_000_400), now), "now");
    }

    #[test]
    fn times_are_rfc3339_utc() {
        assert_eq!(rfc3339_secs(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_ms(1_500), "1970-01-01T00:00:01.500Z");
    }

    #[test]
    fn a_lease_is_live_until_its_end() {
        let record = Record {
            key: IdempotencyKey::from_stored("p#abc"),
            status: Status::InProgress,
            expiration_secs: 100,
            lease_expiration_ms: Some(5000),
            owner: Some(OwnerToken::new("o")),
            data: None,
            validation: None,
        };
        assert!(lease_live(&record, from_epoch_ms(5000)));
        assert!(!lease_live(&record, from_epoch_ms(5001)));
    }
}
