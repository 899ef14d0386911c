//! A bounded, least-recently-used cache of completed records, so a warm container answers
//! repeated duplicates without a store call. In-progress records are never cached.

use std::collections::{BTreeMap, HashMap};
use std::time::SystemTime;

use crate::key::IdempotencyKey;
use crate::record::{Record, Status};

#[derive(Debug)]
pub(crate) struct CompletedCache {
    capacity: usize,
    tick: u64,
    entries: HashMap<IdempotencyKey, (Record, u64)>,
    by_use: BTreeMap<u64, IdempotencyKey>,
}

impl CompletedCache {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            tick: 0,
            entries: HashMap::new(),
            by_use: BTreeMap::new(),
        }
    }

    /// The cached record for `key`, unless it has expired at `now` (then it is dropped).
    pub(crate) fn get(&mut self, key: &IdempotencyKey, now: SystemTime) -> Option<Record> {
        let (record, used) = self.entries.get(key)?;
        if record.is_expired(now) {
            let used = *used;
            self.by_use.remove(&used);
            self.entries.remove(key);
            return None;
        }
        let record = record.clone();
        self.touch(key);
        Some(record)
    }

    /// Caches a completed record; anything else is ignored.
    pub(crate) fn insert(&mut self, record: Record) {
        if self.capacity == 0 || record.status != Status::Completed {
            return;
        }
        self.tick += 1;
        let key = record.key.clone();
        if let Some((_, old)) = self.entries.insert(key.clone(), (record, self.tick)) {
            self.by_use.remove(&old);
        }
        self.by_use.insert(self.tick, key);
        while self.entries.len() > self.capacity {
            match self.by_use.pop_first() {
                Some((_, oldest)) => {
                    self.entries.remove(&oldest);
                }
                None => break,
            }
        }
    }

    fn touch(&mut self, key: &IdempotencyKey) {
        self.tick += 1;
        if let Some((_, used)) = self.entries.get_mut(key) {
            self.by_use.remove(used);
            *used = self.tick;
            self.by_use.insert(self.tick, key.clone());
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn completed(key: &str, expiration_secs: u64) -> Record {
        Record {
            key: IdempotencyKey::from_stored(key),
            status: Status::Completed,
            expiration_secs,
            lease_expiration_ms: None,
            owner: None,
            data: Some("1".into()),
            validation: None,
        }
    }

    fn at_secs(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn evicts_the_least_recently_used() {
        let mut cache = CompletedCache::new(2);
        cache.insert(completed("a", 100));
        cache.insert(completed("b", 100));
        assert!(cache
            .get(&IdempotencyKey::from_stored("a"), at_secs(1))
            .is_some());
        cache.insert(completed("c", 100));
        assert_eq!(cache.len(), 2);
        assert!(cache
            .get(&IdempotencyKey::from_stored("b"), at_secs(1))
            .is_none());
        assert!(cache
            .get(&IdempotencyKey::from_stored("a"), at_secs(1))
            .is_some());
        assert!(cache
            .get(&IdempotencyKey::from_stored("c"), at_secs(1))
            .is_some());
    }

    #[test]
    fn never_returns_expired_or_in_progress_records() {
        let mut cache = CompletedCache::new(4);
        cache.insert(completed("a", 10));
        assert!(cache
            .get(&IdempotencyKey::from_stored("a"), at_secs(11))
            .is_none());
        assert_eq!(cache.len(), 0);
        let mut in_progress = completed("b", 100);
        in_progress.status = Status::InProgress;
        cache.insert(in_progress);
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn zero_capacity_caches_nothing() {
        let mut cache = CompletedCache::new(0);
        cache.insert(completed("a", 100));
        assert_eq!(cache.len(), 0);
    }
}
