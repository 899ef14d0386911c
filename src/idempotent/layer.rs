//! [`IdempotencyLayer`]: the configured protocol, building [`Idempotent`] services.

use std::marker::PhantomData;
use std::sync::Arc;

use tower::Layer;

use super::finish::{ResultAndWrites, ResultOnly};
use super::in_transaction::InTransaction;
use super::protocol::{next_protocol_id, Protocol};
use super::record_fn::{record_fn, RecordFn};
use super::sequenced::{Sequence, Sequenced};
use super::service::Idempotent;
use crate::clock::{Clock, SystemClock};
use crate::config::{CommitStrategy, Config};
use crate::key::MessageId;
use crate::store::{GuardedWrite, Store, TransactionScope, TransactionalStore};

/// Builds [`Idempotent`] services: the per-record idempotency protocol around a handler.
///
/// `M` is the handler kind: [`ResultOnly`] (the default: the handler answers its result)
/// or, after [`with_writes`](IdempotencyLayer::with_writes), [`ResultAndWrites`] (the handler
/// answers a [`Completion`](crate::Completion) whose writes commit with the record).
///
/// Clones (and every service built from one layer) share the local cache and the in-process
/// single-flight table.
#[derive(Debug)]
pub struct IdempotencyLayer<St, K = MessageId, C = SystemClock, M = ResultOnly> {
    /// What each service's protocol is made of (each gets its own id).
    pub(crate) protocol: Protocol<St, K, C>,
    mode: PhantomData<fn() -> M>,
}

impl<St: Clone, K: Clone, C: Clone, M> Clone for IdempotencyLayer<St, K, C, M> {
    fn clone(&self) -> Self {
        Self::of(self.protocol.clone())
    }
}

impl<St: Store> IdempotencyLayer<St> {
    /// A layer on `store`, keyed by the event's id ([`MessageId`]), with the default
    /// [`Config`].
    pub fn new(store: St) -> Self {
        Self::of(Protocol::new(store, MessageId, SystemClock))
    }
}

impl<St, K, C, M> IdempotencyLayer<St, K, C, M> {
    /// The layer building services of `protocol`.
    fn of(protocol: Protocol<St, K, C>) -> Self {
        Self {
            protocol,
            mode: PhantomData,
        }
    }
}

impl<St, K, C, M> IdempotencyLayer<St, K, C, M> {
    /// Derives keys with `key` instead (a [`KeyExtractor`](crate::key::KeyExtractor) of the
    /// handler's event).
    pub fn with_key<K2>(self, key: K2) -> IdempotencyLayer<St, K2, C, M> {
        IdempotencyLayer::of(self.protocol.with_parts(|_, clock| (key, clock)))
    }

    /// Reads time from `clock` instead of the system clock.
    pub fn with_clock<C2: Clock>(self, clock: C2) -> IdempotencyLayer<St, K, C2, M> {
        IdempotencyLayer::of(self.protocol.with_parts(|key, _| (key, clock)))
    }

    /// Builds services whose handler's writes commit with its record.
    ///
    /// The handler answers a [`Completion`](crate::Completion): its result and DynamoDB
    /// writes, committed with the record in one transaction, so the writes are applied
    /// exactly once even if the process dies at any instant. The store must be a
    /// [`TransactionalStore`]; [`with_commit`](IdempotencyLayer::with_commit) chooses lease
    /// (the default) or optimistic commits.
    pub fn with_writes(self) -> IdempotencyLayer<St, K, C, ResultAndWrites>
    where
        St: TransactionalStore,
    {
        self.of_kind()
    }

    /// Builds services whose handler writes in the store's own transaction.
    ///
    /// The handler receives the event and the open transaction (for `PostgresStore` (`postgres` feature), a
    /// `PgTransaction`), and its writes commit with the record's final state or not at all,
    /// so they are applied exactly once even if the process dies at any instant.
    /// [`with_commit`](IdempotencyLayer::with_commit) chooses lease (the default: the lease
    /// is kept outside the transaction) or optimistic (the uncommitted record row is the lock)
    /// commits.
    ///
    /// # Errors
    ///
    /// [`StoreError::Misconfigured`](crate::store::StoreError::Misconfigured) for a store
    /// that could never run a handler's transaction
    /// ([`TransactionScope::check_transactions`]): for `PostgresStore`, a pool of fewer than
    /// 2 connections. Each transaction holds one connection while its handler runs, and one
    /// is kept for the lease calls (acquire, heartbeat, release), so the pool's max size is
    /// the transactions to run at once plus one.
    pub fn in_transaction(
        self,
    ) -> Result<IdempotencyLayer<St, K, C, InTransaction>, crate::store::StoreError>
    where
        St: TransactionScope,
    {
        self.protocol.store.check_transactions()?;
        Ok(self.of_kind())
    }

    /// This layer, building services of the handler kind `M2`.
    fn of_kind<M2>(self) -> IdempotencyLayer<St, K, C, M2> {
        IdempotencyLayer::of(self.protocol)
    }

    /// Uses `config`: every setting of the records (see [`Config`]). The layer's clones
    /// and the services already built keep sharing its single-flight table, and its local
    /// cache unless `config` sizes the cache otherwise.
    pub fn with_config(mut self, config: Config) -> Self {
        let protocol = &mut self.protocol;
        protocol.local = protocol.local.reconfigured(&protocol.config, &config);
        protocol.config = config;
        self
    }

    /// The configuration, to change without starting a fresh local cache (clones keep
    /// sharing it).
    pub(crate) fn config_mut(&mut self) -> &mut Config {
        &mut self.protocol.config
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.protocol.config
    }

    /// The store.
    pub fn store(&self) -> &St {
        &self.protocol.store
    }

    /// The key extractor.
    pub fn key(&self) -> &K {
        &self.protocol.key
    }

    /// The clock.
    pub fn clock(&self) -> &C {
        &self.protocol.clock
    }

    /// Wraps a plain async function of one event: `async fn(E) -> Result<T, Err>` (or, with
    /// writes, `Result<Completion<T>, Err>`; in a transaction, `async fn(E, Tx) -> Result<T,
    /// Err>`).
    ///
    /// `f` is any `FnMut` that is `Clone + Send + 'static`, and `Sync` to serve a
    /// `BatchProcessor` handed to `lambda_runtime::run` (a function, or a closure over what
    /// it needs: `move |m| credit(client.clone(), m)`), its future `Send + 'static`;
    /// `T` is `Serialize + DeserializeOwned + Send + 'static` (it is stored and replayed),
    /// and `Err` converts into a `BoxError` (mark a failure that retrying cannot fix with
    /// [`Permanent`](crate::Permanent)).
    pub fn handler<F>(&self, f: F) -> Idempotent<RecordFn<F>, St, K, C, M>
    where
        St: Clone,
        K: Clone,
        C: Clone,
    {
        self.layer(record_fn(f))
    }
}

/// Builds sequence-guarded services: the handler's one write is its own guard (natural
/// idempotency).
///
/// `sequence` places each event in its entity's sequence, and the handler answers a
/// [`Completion`](crate::Completion) with exactly one put or update on that entity, which
/// the toolkit conditions on the entity's sequence and sets to the event's number. No
/// idempotency record is written: one conditional write per fresh event, none for a
/// duplicate found by the read of a redelivered event. The store must be a
/// [`GuardedWrite`]. With no record, there is no key, local cache or record setting to
/// choose: the store, the sequence and the clock are all it takes.
#[derive(Debug, Clone)]
pub struct SequencedLayer<St, P, C = SystemClock> {
    layer: IdempotencyLayer<St, Sequence<P>, C, Sequenced>,
}

impl<St: GuardedWrite, P> SequencedLayer<St, P> {
    /// A layer writing through `store`, each event placed by `sequence`.
    pub fn new(store: St, sequence: Sequence<P>) -> Self {
        Self {
            layer: IdempotencyLayer::of(Protocol::new(store, sequence, SystemClock)),
        }
    }
}

impl<St, P, C> SequencedLayer<St, P, C> {
    /// Reads time from `clock` instead of the system clock.
    pub fn with_clock<C2: Clock>(self, clock: C2) -> SequencedLayer<St, P, C2> {
        SequencedLayer {
            layer: self.layer.with_clock(clock),
        }
    }

    /// The store.
    pub fn store(&self) -> &St {
        self.layer.store()
    }

    /// The sequence.
    pub fn sequence(&self) -> &Sequence<P> {
        self.layer.key()
    }

    /// Wraps a plain async function of one event: `async fn(E) -> Result<Completion<T>, Err>`
    /// whose completion holds the entity's one write.
    pub fn handler<F>(&self, f: F) -> Idempotent<RecordFn<F>, St, Sequence<P>, C, Sequenced>
    where
        St: Clone,
        P: Clone,
        C: Clone,
    {
        self.layer.handler(f)
    }
}

impl<S, St: Clone, P: Clone, C: Clone> Layer<S> for SequencedLayer<St, P, C> {
    type Service = Idempotent<S, St, Sequence<P>, C, Sequenced>;

    fn layer(&self, inner: S) -> Self::Service {
        self.layer.layer(inner)
    }
}

/// The commit strategy, on the layers of handlers with writes (the only ones it applies to).
macro_rules! with_commit {
    ($($kind:ty),+) => {$(
        impl<St, K, C> IdempotencyLayer<St, K, C, $kind> {
            /// Commits the handler's writes with `strategy`: a lease first (the default), or
            /// optimistically (see [`CommitStrategy`]).
            pub fn with_commit(mut self, strategy: CommitStrategy) -> Self {
                self.protocol.commit = strategy;
                self
            }

            /// The commit strategy.
            pub fn commit(&self) -> CommitStrategy {
                self.protocol.commit
            }
        }
    )+};
}

with_commit!(ResultAndWrites, InTransaction);

impl<S, St: Clone, K: Clone, C: Clone, M> Layer<S> for IdempotencyLayer<St, K, C, M> {
    type Service = Idempotent<S, St, K, C, M>;

    fn layer(&self, inner: S) -> Self::Service {
        let protocol = Protocol {
            id: next_protocol_id(),
            ..self.protocol.clone()
        };
        Idempotent::new(inner, Arc::new(protocol))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::InMemoryStore;

    /// The order of the builders does not matter: a configuration given after the layer
    /// was cloned (or services were built) keeps one single-flight table for all of them,
    /// and the cache too unless its size changes. (Before, `with_config` started both
    /// afresh, so two services of one layer each ran a record of the same key.)
    #[test]
    fn a_later_configuration_keeps_the_shared_answers() {
        let layer = IdempotencyLayer::new(InMemoryStore::new())
            .with_config(Config::new().with_local_cache(8));
        let earlier = layer.clone();
        let later = layer.with_config(Config::new().with_local_cache(8).with_key_prefix("p"));
        assert!(Arc::ptr_eq(&earlier.protocol.local, &later.protocol.local));
        let resized = later.with_config(Config::new().with_local_cache(16));
        assert!(Arc::ptr_eq(
            &earlier.protocol.local.in_flight,
            &resized.protocol.local.in_flight
        ));
        assert!(!Arc::ptr_eq(
            &earlier.protocol.local,
            &resized.protocol.local
        ));
    }
}
