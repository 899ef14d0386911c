//! [`Protocol`]: one configured instance of the idempotency protocol (store, key extractor,
//! clock, configuration), and the answers this process keeps between records
//! ([`LocalAnswers`]).

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use super::cache::CompletedCache;
use super::heartbeat::Heartbeat;
use super::in_flight::InFlight;
use crate::clock::Deadline;
use crate::config::{CommitStrategy, Config};
use crate::key::IdempotencyKey;
use crate::record::{OwnerToken, Record};

/// What this process knows without asking the store: completed records (the local cache)
/// and the records running now (single flight). Shared by every service of one layer.
#[derive(Debug)]
pub(crate) struct LocalAnswers {
    cache: Option<Mutex<CompletedCache>>,
    pub(crate) in_flight: Arc<InFlight>,
}

impl LocalAnswers {
    pub(crate) fn new(config: &Config) -> Arc<Self> {
        Arc::new(LocalAnswers {
            cache: Self::cache_for(config),
            in_flight: Arc::default(),
        })
    }

    /// These answers under `config`: the same ones (the cache and the single-flight table
    /// stay shared) unless `config` sizes the cache otherwise, which starts a cache of that
    /// size and keeps the single-flight table.
    pub(crate) fn reconfigured(self: &Arc<Self>, old: &Config, config: &Config) -> Arc<Self> {
        if old.local_cache_capacity == config.local_cache_capacity {
            return Arc::clone(self);
        }
        Arc::new(LocalAnswers {
            cache: Self::cache_for(config),
            in_flight: Arc::clone(&self.in_flight),
        })
    }

    fn cache_for(config: &Config) -> Option<Mutex<CompletedCache>> {
        (config.local_cache_capacity > 0)
            .then(|| Mutex::new(CompletedCache::new(config.local_cache_capacity)))
    }

    /// The completed record for `key`, if it is cached and not expired at `now`.
    pub(crate) fn cached(&self, key: &IdempotencyKey, now: SystemTime) -> Option<Record> {
        let cache = self.cache.as_ref()?;
        cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key, now)
    }

    /// Caches a copy of a completed record (anything else is ignored), copied only when
    /// there is a cache to keep it.
    pub(crate) fn remember_copy(&self, record: &Record) {
        if self.cache.is_some() {
            self.remember(record.clone());
        }
    }

    /// Caches a completed record (anything else is ignored).
    pub(crate) fn remember(&self, record: Record) {
        if let Some(cache) = &self.cache {
            cache
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(record);
        }
    }
}

/// Everything a service needs to run the protocol, behind one `Arc`. A layer holds one as
/// the pattern of its services' (each service's gets a fresh id).
#[derive(Debug, Clone)]
pub(crate) struct Protocol<St, K, C> {
    /// Unique in the process, for as long as it runs (never reused, unlike an address): the
    /// batch pre-check files its lookups under it.
    pub(crate) id: u64,
    pub(crate) store: St,
    pub(crate) key: K,
    pub(crate) clock: C,
    pub(crate) config: Config,
    /// How a handler with writes commits (the layer's; unused by the other handler kinds).
    pub(crate) commit: CommitStrategy,
    pub(crate) local: Arc<LocalAnswers>,
}

impl<St, K, C> Protocol<St, K, C> {
    /// A protocol on `store`, keyed by `key`, reading `clock`, with the default [`Config`]
    /// and lease commits.
    pub(crate) fn new(store: St, key: K, clock: C) -> Self {
        let config = Config::default();
        Self {
            id: next_protocol_id(),
            store,
            key,
            clock,
            local: LocalAnswers::new(&config),
            config,
            commit: CommitStrategy::Lease,
        }
    }

    /// This protocol with its key extractor and clock replaced by what `parts` makes of
    /// them.
    pub(crate) fn with_parts<K2, C2>(
        self,
        parts: impl FnOnce(K, C) -> (K2, C2),
    ) -> Protocol<St, K2, C2> {
        let (key, clock) = parts(self.key, self.clock);
        Protocol {
            id: self.id,
            store: self.store,
            key,
            clock,
            config: self.config,
            commit: self.commit,
            local: self.local,
        }
    }

    /// The heartbeat of the lease held on `key` under `owner` until `held_until_ms`.
    pub(crate) fn heartbeat<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        owner: &'a OwnerToken,
        deadline: Deadline,
        held_until_ms: u64,
    ) -> Heartbeat<'a, St, C> {
        Heartbeat {
            store: &self.store,
            clock: &self.clock,
            config: &self.config,
            key,
            owner,
            deadline,
            held_until_ms,
            final_write_sent: AtomicBool::new(false),
        }
    }
}

/// A fresh [`Protocol::id`].
pub(crate) fn next_protocol_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}
