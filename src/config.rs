//! [`Config`]: how the idempotency layer behaves. Immutable; built with `with_*` methods.

use std::sync::Arc;
use std::time::Duration;

use crate::hooks::{Created, Hooks, Replay};
use crate::key::PayloadValidation;
use crate::powertools::PowertoolsFormat;

/// The default record window ([`Config::with_expires_after`]): 43 days, longer than a message
/// can live in SQS with a dead-letter queue and one redrive at the longest retention SQS
/// allows. A message lives up to 14 days in its queue; a dead-letter queue keeps it up to 14
/// days more (a FIFO queue's restarts the clock when the message moves; a standard queue's
/// counts from the first send, so 14 days for both queues there); a redrive sends it to the
/// queue anew, for up to 14 days again. 3 × 14 days, plus a day: a message redriven from the
/// dead-letter queue still finds its record, and is replayed rather than applied again (keyed
/// by a producer's id: a redriven message has a new `messageId`). A shorter window is an
/// explicit choice: make it longer than your queues' retention periods added up.
pub const DEFAULT_EXPIRES_AFTER: Duration = Duration::from_secs((3 * 14 + 1) * 24 * 3600);

/// What to do with a record whose idempotency key cannot be derived.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum MissingKey {
    /// Fail the record with [`Error::Key`](crate::Error::Key) and report it (the default).
    #[default]
    Fail,
    /// Run the handler without idempotency when the key's source is absent
    /// ([`KeyError::is_absent`](crate::key::KeyError::is_absent)). The outcome is
    /// [`Outcome::Unprotected`](crate::Outcome::Unprotected), so it shows in metrics. Only a
    /// handler that answers its result alone runs unprotected: one whose writes commit with
    /// the record (with writes, in a transaction) fails the record with the key error, as
    /// with `Fail`.
    ProcessUnprotected,
}

/// How a handler's writes are committed with its record: chosen on the layer of a handler
/// with writes ([`IdempotencyLayer::with_commit`](crate::IdempotencyLayer::with_commit)), the
/// only place it applies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum CommitStrategy {
    /// Take a lease first, then commit the writes with the record, fenced by the lease (the
    /// default). The handler never runs twice at once.
    #[default]
    Lease,
    /// No lease: run the handler, then commit the writes with the record if no live record
    /// exists. One round trip per fresh record; concurrent duplicates may both compute, one
    /// commits.
    Optimistic,
}

impl CommitStrategy {
    /// Parses `lease` or `optimistic` (as in the `IDEMPOTENCY_MODE` variable).
    pub fn parse(value: &str) -> Option<Self> {
        match value.trim().to_ascii_lowercase().as_str() {
            "lease" => Some(CommitStrategy::Lease),
            "optimistic" => Some(CommitStrategy::Optimistic),
            _ => None,
        }
    }
}

/// The settings of the records: how they are keyed, kept, validated, leased, retried and
/// observed.
///
/// Where a setting lives, in one sentence: **what a record is and how it is kept** (key
/// prefix, window, lease, payload validation, local cache, attempts, hooks) is `Config`;
/// **what the layer is built from** (store, key, clock) **and the kind of handler it wraps**
/// (plain, with writes and their [`CommitStrategy`], in a transaction) is the
/// [`IdempotencyLayer`](crate::IdempotencyLayer); **how a batch runs** (scheduling,
/// pre-check, replay) is the [`BatchProcessor`](crate::batch::BatchProcessor); and **how HTTP
/// maps to records** (header, methods, stored responses, callers) is the `IdempotentHttpLayer`.
/// [`IdempotencyLayer::with_config`](crate::IdempotencyLayer::with_config) may come before or
/// after the layer's other builders. (Two builders of the HTTP layer set records' settings:
/// `IdempotentHttpLayer::new` turns payload validation on (`Body`) when it is off, and `key_optional` sets [`MissingKey::ProcessUnprotected`].)
///
/// # Default
/// - key prefix: the Lambda function name (from the invocation `Context`, else
///   `AWS_LAMBDA_FUNCTION_NAME`);
/// - records expire [`DEFAULT_EXPIRES_AFTER`] (43 days) after completion: longer than a
///   message can live in SQS with a dead-letter queue and a redrive;
/// - the lease ends at the invocation deadline, with no further cap;
/// - no payload validation, no local cache, a missing key fails the record;
/// - 3 acquire attempts when the record changes underneath; 3 attempts, with backoff and
///   jitter and never past the deadline, for a completion, release or commit that meets a
///   store fault (or, for a commit, a transaction conflict);
/// - no heartbeat;
/// - a permanent failure stores a fixed text, not its message (which may quote the input).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub(crate) key_prefix: Option<String>,
    pub(crate) expires_after: Duration,
    pub(crate) max_lease: Option<Duration>,
    pub(crate) validation: PayloadValidation,
    pub(crate) local_cache_capacity: usize,
    pub(crate) missing_key: MissingKey,
    pub(crate) acquire_attempts: u32,
    pub(crate) commit_attempts: u32,
    pub(crate) heartbeat: Option<Duration>,
    pub(crate) store_failure_messages: bool,
    pub(crate) hooks: Hooks,
    /// Set for an idempotent function's layer: its records are namespaced by its name, so
    /// no other record (whatever its key material) shares one.
    pub(crate) function: Option<FunctionScope>,
    /// Records in Powertools for AWS Lambda's format.
    pub(crate) powertools: Option<PowertoolsFormat>,
}

/// An idempotent function's records: its name, and whether its key prefix is its own
/// ([`IdempotentFn::with_key_prefix`](crate::function::IdempotentFn::with_key_prefix)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FunctionScope {
    pub(crate) name: String,
    pub(crate) own_prefix: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            key_prefix: None,
            expires_after: DEFAULT_EXPIRES_AFTER,
            max_lease: None,
            validation: PayloadValidation::Off,
            local_cache_capacity: 0,
            missing_key: MissingKey::Fail,
            acquire_attempts: 3,
            commit_attempts: 3,
            heartbeat: None,
            store_failure_messages: false,
            hooks: Hooks::default(),
            function: None,
            powertools: None,
        }
    }
}

impl Config {
    /// Whether this is an idempotent function's configuration ([`function`] set): its
    /// calls wait for another call with the same key up to their own deadline.
    ///
    /// [`function`]: Self::function
    pub(crate) fn is_a_function(&self) -> bool {
        self.function.is_some()
    }

    /// The default configuration.
    pub fn new() -> Self {
        Self::default()
    }

    /// Namespaces stored keys as `<prefix>#<hash>`. Choose a name that stays the same across
    /// refactors and deployments of the function; two functions sharing a table need
    /// different prefixes. Records in the
    /// [Powertools format](Self::with_powertools_format) take the format's prefix instead.
    pub fn with_key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = Some(prefix.into());
        self
    }

    /// How long a completed record is replayed (and a record counts at all); default
    /// [`DEFAULT_EXPIRES_AFTER`], 43 days. A duplicate that arrives after the window runs
    /// again: keep it longer than the longest a message can live in your queues (the queue's
    /// retention, the dead-letter queue's, and the queue's again after a redrive).
    pub fn with_expires_after(mut self, window: Duration) -> Self {
        self.expires_after = window;
        self
    }

    /// Caps the in-progress lease below the invocation deadline. Without a cap the lease ends
    /// at the deadline, which is always also a bound.
    pub fn with_max_lease(mut self, max_lease: Duration) -> Self {
        self.max_lease = Some(max_lease);
        self
    }

    /// Writes and reads records in the format of Powertools for AWS Lambda (key ids, payload
    /// hashes, stored results), so that a function written with Powertools and this one share
    /// records while both run. See [`powertools`](crate::powertools) and the
    /// [migration chapter](crate::guide::migrating).
    ///
    /// The key is `<prefix>#<digest>`, with the format's prefix ([`PowertoolsFormat::new`]):
    /// the exact text before `#` in the Powertools function's ids; the
    /// [key prefix](Self::with_key_prefix) does not apply. An
    /// [idempotent function](crate::IdempotencyLayer::function) `name` of the layer keys
    /// under `<prefix>.<name>`, apart from the handler's records and other functions'; to
    /// share a Python function's records, give it that function's exact prefix
    /// ([`IdempotentFn::with_key_prefix`](crate::function::IdempotentFn::with_key_prefix)).
    /// Results are never compressed (Powertools reads `data` as JSON); one too large for the
    /// record is stored as the JSON string `"~omitted:too-large"`.
    pub fn with_powertools_format(mut self, format: PowertoolsFormat) -> Self {
        self.powertools = Some(format);
        self
    }

    /// The Powertools format, when records are written in it.
    pub fn powertools_format(&self) -> Option<&PowertoolsFormat> {
        self.powertools.as_ref()
    }

    /// Stores a hash of the payload and rejects the same key with another payload.
    pub fn with_payload_validation(mut self, validation: PayloadValidation) -> Self {
        self.validation = validation;
        self
    }

    /// Keeps up to `capacity` completed records in memory (0 turns the cache off).
    pub fn with_local_cache(mut self, capacity: usize) -> Self {
        self.local_cache_capacity = capacity;
        self
    }

    /// Chooses what happens to a record without a key.
    pub fn with_missing_key(mut self, policy: MissingKey) -> Self {
        self.missing_key = policy;
        self
    }

    /// How many times to try the acquire when the record changes underneath (at least 1).
    pub fn with_acquire_attempts(mut self, attempts: u32) -> Self {
        self.acquire_attempts = attempts.max(1);
        self
    }

    /// How many times to send a completion, release or commit that met a store fault (or, for
    /// a commit, a transaction conflict), at least 1. Retries back off with jitter and stop
    /// before the invocation deadline. All of them are safe to send again: completions and
    /// releases are owner-fenced, and a commit carries the same request token each time.
    pub fn with_commit_attempts(mut self, attempts: u32) -> Self {
        self.commit_attempts = attempts.max(1);
        self
    }

    /// Keeps leases of `lease` length (never past the invocation deadline) and extends them
    /// every `every` while the handler runs, so work longer than one lease stays protected.
    /// The extension is fenced by the owner token and stops when the handler ends. The period
    /// is at most a third of the lease in force, also when
    /// [`with_max_lease`](Config::with_max_lease) changes the lease afterwards.
    pub fn with_heartbeat(mut self, lease: Duration, every: Duration) -> Self {
        self.max_lease = Some(lease);
        self.heartbeat = Some(every);
        self
    }

    /// The heartbeat period in force: the configured one, at most a third of the lease cap,
    /// at least 1 ms; `None` without a heartbeat.
    pub fn heartbeat_period(&self) -> Option<Duration> {
        let every = self.heartbeat?;
        let cap = self.max_lease.map_or(every, |lease| lease / 3);
        Some(every.min(cap).max(Duration::from_millis(1)))
    }

    /// Stores a [`Permanent`](crate::Permanent) failure's message in the record, and replays
    /// it to duplicates. The message is its error chain, cut to
    /// [`MAX_STORED_FAILURE_BYTES`](crate::idempotent::MAX_STORED_FAILURE_BYTES). Off by default: error messages often quote the input (an
    /// account number, a card number), and the record is kept for the whole window; the
    /// default stores [`UNSTORED_FAILURE_MESSAGE`](crate::idempotent::UNSTORED_FAILURE_MESSAGE).
    pub fn with_stored_failure_messages(mut self, store: bool) -> Self {
        self.store_failure_messages = store;
        self
    }

    /// Calls `hook` with the stored result, as JSON, for every duplicate answered from it.
    /// The result comes from the store, the local cache or a record of this process with the
    /// same key; the duplicate gets the hook's answer, decoded as the handler's result type (an answer
    /// that does not decode is acknowledged without a result, as
    /// [`Processed::ReplayedWithoutResult`](crate::Processed::ReplayedWithoutResult)). Not
    /// called when no result is stored, nor for a stored permanent failure. Powertools for
    /// AWS Lambda calls this a response hook. For an HTTP API the JSON is the stored response
    /// (`status`, `headers`, `body`). The JSON is a `serde_json::Value`: an integer past 64
    /// bits arrives as a float, so a hook that changes a result holding one loses its
    /// precision (an answer equal to the JSON it got replays the stored result exactly).
    /// See [`hooks`](crate::hooks).
    pub fn with_response_hook<F>(mut self, hook: F) -> Self
    where
        F: Fn(serde_json::Value, &Replay<'_>) -> serde_json::Value + Send + Sync + 'static,
    {
        self.hooks.response = Some(Arc::new(hook));
        self
    }

    /// Calls `hook` each time a write of this process is confirmed to have created a record,
    /// for example for an audit log. The record is a lease before the handler runs, or, with
    /// an optimistic commit, the record with its result. Not called for a record that existed already (a
    /// duplicate, a locked record), nor for a write whose answer was lost and could not be
    /// confirmed (a lease that may have been taken is then released). See
    /// [`hooks`](crate::hooks).
    pub fn with_record_created_hook<F>(mut self, hook: F) -> Self
    where
        F: Fn(&Created<'_>) + Send + Sync + 'static,
    {
        self.hooks.created = Some(Arc::new(hook));
        self
    }

    /// The configured key prefix, if any.
    pub fn key_prefix(&self) -> Option<&str> {
        self.key_prefix.as_deref()
    }

    /// The record expiry window.
    pub fn expires_after(&self) -> Duration {
        self.expires_after
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_window_outlives_sqs_with_a_dead_letter_queue_and_a_redrive() {
        // SQS's longest retention, in the queue, the dead-letter queue and the queue again.
        let longest_sqs_life = 3 * Duration::from_secs(14 * 24 * 3600);
        assert!(Config::new().expires_after() > longest_sqs_life);
        assert_eq!(DEFAULT_EXPIRES_AFTER, Duration::from_secs(43 * 24 * 3600));
        // A shorter one is a choice.
        let hour = Config::new().with_expires_after(Duration::from_secs(3600));
        assert_eq!(hour.expires_after(), Duration::from_secs(3600));
    }

    #[test]
    fn the_heartbeat_period_follows_the_lease_in_force() {
        let config = Config::new().with_heartbeat(Duration::from_secs(30), Duration::from_secs(5));
        assert_eq!(config.heartbeat_period(), Some(Duration::from_secs(5)));
        // A shorter lease set afterwards shortens the period with it.
        let shorter = config.clone().with_max_lease(Duration::from_secs(3));
        assert_eq!(shorter.heartbeat_period(), Some(Duration::from_secs(1)));
        let clamped = Config::new().with_heartbeat(Duration::from_secs(3), Duration::from_secs(60));
        assert_eq!(clamped.heartbeat_period(), Some(Duration::from_secs(1)));
        let tiny = Config::new().with_heartbeat(Duration::ZERO, Duration::ZERO);
        assert_eq!(tiny.heartbeat_period(), Some(Duration::from_millis(1)));
        assert_eq!(Config::new().heartbeat_period(), None);
    }
}
