//! The pre-check of a batch's records: the records a batch offers (by default those its
//! source delivered before, as SQS's `ApproximateReceiveCount` tells) are looked up in the
//! store together, once per batch ([`Store::get_many`]: one `BatchGetItem` per 100 keys on
//! DynamoDB), the first time one of the batch's records reaches admission (or, with batch
//! replay, the batch's replay phase: [`replay_offered`]). A record found completed then
//! replays without a write (and, in optimistic mode, without running the handler again);
//! one held under a live lease is answered "in progress" without a write, but only in the
//! turn the lookup was read in: a lease may end at any moment (its holder completes or
//! releases the record), so once a later record's turn has begun (a record that runs after
//! earlier ones in an ordered batch, or waits for a slot in a concurrent one) the lease found
//! is read again by the record's conditional write ([`Offer::begin_turn`]; in optimistic mode, by a
//! read of the record before its handler runs). A completed or failed record is final until
//! it expires, which is checked at each record's turn.
//! Whatever the pre-check did not find, or could not read, goes on to the conditional
//! write, which stays the only judge of a record's lease: the pre-check can only save calls.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use futures_util::FutureExt;
use lambda_runtime::Context;
use serde::de::DeserializeOwned;
use tokio::sync::OnceCell;

use super::in_flight::FailureMemo;
use super::invoke::panic_message;
use super::known_answer::answer_known;
use super::protocol::Protocol;
use super::record_key::{derive, Derived};
use super::store_call::within_deadline;
use super::stored_result::replay_of;
use crate::clock::{Clock, Deadline};
use crate::hooks::ReplaySource;
use crate::input::Input;
use crate::key::PayloadHash;
use crate::key::{IdempotencyKey, KeyExtractor};
use crate::outcome::Processed;
use crate::record::{decide, Decision, Record, Status};
use crate::store::{Store, StoreError};

/// What the pre-check found, sorted by key (one record per key).
type Found = Vec<Arc<Record>>;

/// One offered record's replay, decided at the record's turn (its expiry, lease and payload
/// checked against what was read then, the response hook called, the local cache filled):
/// `None` when its own call answers it instead.
pub(crate) type Candidate<T> = Box<dyn FnOnce() -> Option<Processed<T>> + Send>;

/// One protocol's lookup of the offered records: their keys, derived when the first record
/// of the batch reaches the protocol, and what the store answered for them.
struct Lookup {
    /// The function name the keys were derived under (their prefix may come from it).
    function_name: String,
    /// Each offered record's key and payload hash, in the offered order, until its record
    /// takes it (`None`: its key could not be derived, or it was taken already; the record
    /// then derives it on its own path).
    derived: Mutex<Vec<Option<Derived>>>,
    /// The indexes in `derived` of the offered records with an id, sorted by id, the first
    /// record of each id only.
    by_id: Vec<usize>,
    /// The derived keys, sorted, each once.
    keys: Vec<IdempotencyKey>,
    found: OnceCell<Found>,
    /// How many of the batch's records had begun their turn when the read began: a record
    /// whose turn began later (during the read, or after it) may find its lease ended since.
    read_in_turn: OnceLock<usize>,
}

impl Lookup {
    /// What the store holds of the offered keys: read by the first to ask, once, within
    /// the batch's `deadline`.
    async fn read<St: Store, C: Clock, I>(
        &self,
        offer: &Offer<I>,
        store: &St,
        clock: &C,
        deadline: Deadline,
    ) -> &Found {
        self.found
            // Boxed: the store's read (an SDK call, kilobytes of future) is built by the one
            // record that does the lookup, not carried in every record's future.
            .get_or_init(|| {
                Box::pin(async move {
                    let read_in = offer.turns_begun();
                    let found = look_up(store, clock, deadline, &self.keys).await;
                    let _ = self.read_in_turn.set(read_in);
                    found
                })
            })
            .await
    }

    /// Whether no record's turn has begun since the read began: what it found of a record
    /// asking now is not older than that record's turn.
    fn read_in_this_turn<I>(&self, offer: &Offer<I>) -> bool {
        self.read_in_turn
            .get()
            .is_some_and(|&read_in| offer.turns_begun() <= read_in)
    }
}

/// The records a batch offers to the pre-check, each protocol's lookup of them (one per
/// configured layer: the batch's service may hold more than one), and how many of the
/// batch's records have begun their turn. It reaches the batch's records in their requests
/// ([`BatchRecord`](super::batch_scope::BatchRecord)).
pub(crate) struct Offer<I> {
    records: Vec<I>,
    lookups: Mutex<HashMap<u64, Arc<Lookup>>>,
    turns: AtomicUsize,
}

impl<I> Offer<I> {
    /// `records` offered to the pre-check of the protocols the batch's records reach. With
    /// no records offered, nothing is looked up.
    pub(crate) fn new(records: Vec<I>) -> Self {
        Self {
            records,
            lookups: Mutex::default(),
            turns: AtomicUsize::new(0),
        }
    }

    /// The offered records, in the batch's order.
    pub(crate) fn records(&self) -> &[I] {
        &self.records
    }

    /// Tells the pre-check that the schedule starts a record: the record's turn begins, and
    /// a lookup read before it is older than that turn. The schedule calls it as it starts
    /// each record (before the record's call, for every record of a concurrent batch's first
    /// slots before any runs), so that a record that runs after others, or waits for a slot,
    /// is not answered "in progress" from a lease read before it started.
    pub(crate) fn begin_turn(&self) {
        self.turns.fetch_add(1, Ordering::SeqCst);
    }

    /// How many of the batch's records have begun their turn.
    fn turns_begun(&self) -> usize {
        self.turns.load(Ordering::SeqCst)
    }
}

/// This protocol's lookup of the batch's offered records: created by the first record of the batch to reach the protocol,
/// which derives every offered record's key.
fn lookup_of<St, K, C, I>(
    protocol: &Protocol<St, K, C>,
    offer: &Offer<I>,
    context: &Context,
) -> Option<Arc<Lookup>>
where
    K: KeyExtractor<I>,
    I: Input,
{
    let records = &offer.records;
    if records.is_empty() {
        return None;
    }
    // One lookup per protocol: its key extractor, prefix and store are its own. Its
    // id, not its address: a protocol freed within the batch (a service built per
    // record) may leave its address to another one, with another store.
    let id = protocol.id;
    let mut lookups = offer.lookups.lock().unwrap_or_else(|p| p.into_inner());
    let lookup = lookups.entry(id).or_insert_with(|| {
        let derived: Vec<Option<Derived>> = records
            .iter()
            .map(|r| derive(&protocol.key, &protocol.config, r, context).ok())
            .collect();
        // Borrowed from the records (no copy of each id): stable-sorted, so the first
        // record of an id leads its run and is the one kept.
        let mut by_id: Vec<usize> = (0..records.len())
            .filter(|&i| records[i].id().is_some())
            .collect();
        by_id.sort_by(|&a, &b| records[a].id().cmp(&records[b].id()));
        by_id.dedup_by(|later, first| records[*later].id() == records[*first].id());
        let mut keys: Vec<IdempotencyKey> = derived
            .iter()
            .flatten()
            .map(|(key, _)| key.clone())
            .collect();
        keys.sort_unstable();
        keys.dedup();
        Arc::new(Lookup {
            function_name: context.env_config.function_name.clone(),
            derived: Mutex::new(derived),
            by_id,
            keys,
            found: OnceCell::new(),
            read_in_turn: OnceLock::new(),
        })
    });
    Some(Arc::clone(lookup))
}

/// The current batch's pre-check as one record's admission sees it: the protocol's lookup
/// is fetched (or created) the first time the record needs it, then kept for the rest of
/// the record's admission.
pub(crate) struct BatchLookup<'a, St, K, C, I> {
    protocol: &'a Protocol<St, K, C>,
    context: &'a Context,
    /// The records the record's batch offered (none outside a batch).
    offer: Option<&'a Offer<I>>,
    /// `None` until first needed; then the lookup, if the batch offered records.
    lookup: Option<Option<Arc<Lookup>>>,
}

impl<'a, St, K, C, I> BatchLookup<'a, St, K, C, I>
where
    K: KeyExtractor<I>,
    I: Input,
{
    pub(crate) fn new(
        protocol: &'a Protocol<St, K, C>,
        offer: Option<&'a Offer<I>>,
        context: &'a Context,
    ) -> Self {
        Self {
            protocol,
            context,
            offer,
            lookup: None,
        }
    }

    fn lookup(&mut self) -> Option<(&Arc<Lookup>, &'a Offer<I>)> {
        let (protocol, context, offer) = (self.protocol, self.context, self.offer?);
        let lookup = self
            .lookup
            .get_or_insert_with(|| lookup_of(protocol, offer, context))
            .as_ref()?;
        Some((lookup, offer))
    }

    /// The key and payload hash the pre-check derived for `payload`, when the record's
    /// batch offered this very record (the same event, field for field, under the same
    /// function name), so that it is not derived twice; `None` otherwise (the caller derives
    /// it). A key is a function of the event alone ([`KeyExtractor`]).
    pub(crate) fn derived(&mut self, payload: &I) -> Option<Derived> {
        let id = payload.id()?;
        let context = self.context;
        let (lookup, offer) = self.lookup()?;
        let records = offer.records();
        let at = lookup
            .by_id
            .binary_search_by(|&i| records[i].id().unwrap_or_default().cmp(id))
            .ok()?;
        let index = lookup.by_id[at];
        if !records[index].same_event(payload)
            || lookup.function_name != context.env_config.function_name
        {
            return None;
        }
        // The record takes what was derived for it; another record with the same id and
        // event (a repeat within the batch) derives its own.
        let mut derived = lookup.derived.lock().unwrap_or_else(|p| p.into_inner());
        derived[index].take()
    }

    /// What the pre-check found in the store for `key`, if the current batch offered a
    /// record with this key (of this protocol's record type). The first offered record to
    /// ask does the lookup for all of them, and the other offered records wait for it; a
    /// record not offered (a first delivery) does not wait. A failed lookup finds nothing:
    /// the records go on to their conditional writes. A record found in progress by a read
    /// older than the asking record's turn is not given ([`LookedUp::HeldBeforeTurn`]).
    pub(crate) async fn found(&mut self, key: &IdempotencyKey) -> Option<LookedUp>
    where
        St: Store,
        C: Clock,
    {
        let (protocol, context) = (self.protocol, self.context);
        let (lookup, offer) = self.lookup()?;
        lookup.keys.binary_search(key).ok()?;
        let deadline = Deadline::of(context.deadline, protocol.clock.now());
        let found = lookup
            .read(offer, &protocol.store, &protocol.clock, deadline)
            .await;
        let record = find(found, key)?;
        // A completed or failed record is final until it expires (`decide` checks that at
        // this turn); a lease may have ended since an older read.
        if record.status == Status::InProgress && !lookup.read_in_this_turn(offer) {
            return Some(LookedUp::HeldBeforeTurn);
        }
        Some(LookedUp::Record(Arc::clone(record)))
    }
}

/// What the batch's pre-check found for a record's key, as of the record's turn.
pub(crate) enum LookedUp {
    /// The stored record: read in this record's turn, or final (completed or failed).
    Record(Arc<Record>),
    /// In progress when the lookup read it, before this record's turn began: its holder may
    /// have completed or released it since. The record's own conditional write reads it as it
    /// is now.
    HeldBeforeTurn,
}

/// The record found for `key`.
fn find<'a>(found: &'a Found, key: &IdempotencyKey) -> Option<&'a Arc<Record>> {
    let at = found.binary_search_by(|record| record.key.cmp(key)).ok()?;
    Some(&found[at])
}

/// The batch's offered records ready to be replayed at their turn, by offered position:
/// their keys and payload hashes derived (the lookup's), and the store's answer for them
/// read once, unless the local cache answers every record's own path. Each record's
/// [`Candidate`] then decides at its turn as the record's admission would
/// ([`replay_at_turn`]), `failures` being its batch's; one that does not replay puts its key
/// back for its own call. A record without a key has no candidate. Empty when the batch
/// offered no records.
pub(crate) async fn replay_offered<St, K, C, I, T>(
    protocol: &Arc<Protocol<St, K, C>>,
    offer: &Offer<I>,
    failures: &Arc<FailureMemo>,
    context: &Context,
) -> Vec<Option<Candidate<T>>>
where
    St: Store,
    K: KeyExtractor<I>,
    C: Clock,
    I: Input,
    T: DeserializeOwned + Send + 'static,
{
    let Some(lookup) = lookup_of::<St, K, C, I>(protocol, offer, context) else {
        return Vec::new();
    };
    // Taken, not copied: each candidate puts its key back if its record goes its own way. A
    // record that looks for its key meanwhile derives it again.
    let derived: Vec<Option<Derived>> = lookup
        .derived
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter_mut()
        .map(Option::take)
        .collect();
    // The record's own path reads unless the cache answers it (completed, failed, or for
    // another payload).
    let now = protocol.clock.now();
    let to_read = derived.iter().flatten().any(|(key, validation)| {
        let cached = protocol.local.cached(key, now);
        !matches!(
            cached.map(|record| decide(&record, now, validation.as_ref())),
            Some(
                Decision::Replay { .. }
                    | Decision::ReplayFailure { .. }
                    | Decision::PayloadMismatch
            )
        )
    });
    let found = match to_read {
        true => {
            let deadline = Deadline::of(context.deadline, now);
            Some(
                lookup
                    .read(offer, &protocol.store, &protocol.clock, deadline)
                    .await,
            )
        }
        false => None,
    };
    derived
        .into_iter()
        .enumerate()
        .map(|(index, derived)| {
            let (key, validation) = derived?;
            let stored = found.and_then(|found| find(found, &key)).cloned();
            let (protocol, lookup) = (Arc::clone(protocol), Arc::clone(&lookup));
            let failures = Arc::clone(failures);
            let candidate: Candidate<T> = Box::new(move || {
                let replay = replay_at_turn(
                    &protocol,
                    &key,
                    validation.as_ref(),
                    stored.as_deref(),
                    &failures,
                );
                if replay.is_none() {
                    let mut slots = lookup.derived.lock().unwrap_or_else(|p| p.into_inner());
                    slots[index] = Some((key, validation));
                }
                replay
            });
            Some(candidate)
        })
        .collect()
}

/// The replay of an offered record at its turn, decided as its admission would decide it
/// with the pre-check's answer `stored`: the local cache first, then a failure of its key
/// earlier in this batch, then the record found. `None` for anything but a replay: the
/// record's own call answers it.
fn replay_at_turn<St, K, C: Clock, T: DeserializeOwned>(
    protocol: &Protocol<St, K, C>,
    key: &IdempotencyKey,
    validation: Option<&PayloadHash>,
    stored: Option<&Record>,
    failures: &FailureMemo,
) -> Option<Processed<T>> {
    let now = protocol.clock.now();
    match answer_known(protocol, key, validation, now, Some(failures)) {
        Some(Ok(replay)) => return Some(replay),
        Some(Err(_)) => return None,
        None => {}
    }
    let stored = stored?;
    let replay = replay_of(
        &protocol.config,
        key,
        validation,
        stored,
        now,
        ReplaySource::Store,
    )?;
    protocol.local.remember_copy(stored);
    Some(replay)
}

/// Reads `keys` (sorted, each once) from the store within `deadline`: what it holds of them,
/// sorted by key. A lookup that fails, or panics (a store's bug), finds nothing.
async fn look_up<St: Store, C: Clock>(
    store: &St,
    clock: &C,
    deadline: Deadline,
    keys: &[IdempotencyKey],
) -> Found {
    // Caught here, once: left to unwind, the panic would reach every offered record in turn
    // (each retries the lookup) and fail them all.
    let get_many = || async {
        let read = AssertUnwindSafe(store.get_many(keys)).catch_unwind().await;
        read.unwrap_or_else(|panic| {
            Err(StoreError::Unavailable(
                format!("get_many panicked: {}", panic_message(panic.as_ref())).into(),
            ))
        })
    };
    let read = within_deadline(clock, deadline, get_many).await;
    match read {
        Ok(records) => {
            tracing::debug!(keys = keys.len(), found = records.len(), "pre-check");
            // Reversed before the stable sort, so that of two answers for one key (a store
            // that breaks `get_many`'s contract) the last one given is kept. A record for a
            // key not asked is kept too, and never asked for: `found` asks only `keys`.
            let mut found: Found = records.into_iter().rev().map(Arc::new).collect();
            found.sort_by(|a, b| a.key.cmp(&b.key));
            found.dedup_by(|a, b| a.key == b.key);
            found
        }
        Err(err) => {
            tracing::warn!(
                error = %err,
                keys = keys.len(),
                "pre-check lookup failed; the records go on to their conditional writes"
            );
            Found::new()
        }
    }
}
