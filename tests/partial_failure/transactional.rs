//! Transactional handlers on the embedded store, in both modes: one commit, then replays.

use lambda_idempotency_test_support as support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use aws_lambda_events::sqs::SqsMessage;
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::clock::{Clock, ManualClock};
use lambda_idempotency::store::InMemoryStore;
use lambda_idempotency::{Error, IdempotencyLayer, Outcome};
use support::{invocation, outcomes, reported};

use crate::{batch, config, message, REMAINING};

/// A transactional handler over the embedded store crediting `acct-1` with 5 in `ledger`.
fn ledger_credit(
    store: &InMemoryStore,
    clock: &ManualClock,
    mode: lambda_idempotency::CommitStrategy,
    runs: Arc<AtomicUsize>,
    broken: Arc<AtomicBool>,
) -> BatchProcessor<
    impl tower::Service<
            lambda_idempotency::batch::BatchRecord<SqsMessage>,
            Response = lambda_idempotency::Processed<u32>,
            Error = Error,
        > + Clone,
    ManualClock,
> {
    use lambda_idempotency::store::{Attr, Write};
    use lambda_idempotency::Completion;
    let layer = IdempotencyLayer::new(store.clone())
        .with_clock(clock.clone())
        .with_config(config());
    BatchProcessor::new(layer.clone().with_writes().with_commit(mode).handler(
        move |_m: SqsMessage| {
            let (runs, broken) = (runs.clone(), broken.clone());
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                if broken.load(Ordering::SeqCst) {
                    return Err(std::io::Error::other("downstream is down"));
                }
                let credit = Write::update("ledger", [("account", Attr::s("acct-1"))], "ADD #b :a")
                    .name("#b", "balance")
                    .value(":a", Attr::n(5));
                Ok(Completion::new(5u32).with_write(credit))
            }
        },
    ))
    .with_clock(clock.clone())
}

fn balance(store: &InMemoryStore) -> String {
    use lambda_idempotency::store::Attr;
    let key = [("account".to_string(), Attr::s("acct-1"))].into();
    match store
        .item("ledger", &key)
        .and_then(|i| i.get("balance").cloned())
    {
        Some(Attr::N(n)) => n,
        other => format!("{other:?}"),
    }
}

#[tokio::test]
async fn transactional_handlers_commit_once_on_the_embedded_store_in_both_modes() {
    use lambda_idempotency::CommitStrategy;
    for mode in [CommitStrategy::Lease, CommitStrategy::Optimistic] {
        let store = InMemoryStore::new();
        store.define_table("ledger", &["account"]);
        let clock = ManualClock::starting_now();
        let (runs, broken) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let processor = ledger_credit(&store, &clock, mode, runs.clone(), broken.clone());
        let deliver = || {
            processor.process(invocation(
                batch([message("m-1", "{}")]),
                clock.now(),
                REMAINING,
            ))
        };
        assert_eq!(outcomes(&deliver().await), [Outcome::Executed], "{mode:?}");
        assert_eq!(balance(&store), "5", "{mode:?}");
        // A redelivered duplicate whose handler now fails is still a duplicate.
        broken.store(true, Ordering::SeqCst);
        let again = deliver().await;
        assert_eq!(outcomes(&again), [Outcome::Replayed], "{mode:?}");
        assert!(reported(&again).is_empty(), "{mode:?}");
        assert_eq!(balance(&store), "5", "{mode:?}");
        let expected_runs = if mode == CommitStrategy::Lease { 1 } else { 2 };
        assert_eq!(runs.load(Ordering::SeqCst), expected_runs, "{mode:?}");
    }
}
