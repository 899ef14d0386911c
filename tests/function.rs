//! Idempotent functions (`IdempotencyLayer::function`), on the embedded store with a manual
//! clock and on DynamoDB Local: per call, how many times the function ran, what the caller
//! got, and the stored record.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_lambda_events::sqs::SqsEvent;
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::clock::ManualClock;
use lambda_idempotency::input::Serialized;
use lambda_idempotency::key::PayloadValidation;
use lambda_idempotency::key::{JsonPointer, KeyError};
use lambda_idempotency::store::{InMemoryStore, Store};
use lambda_idempotency::{
    BoxError, Config, Error, IdempotencyLayer, Outcome, Permanent, Processed,
};
use lambda_idempotency_test_support::dynamodb::fresh_store;
use lambda_idempotency_test_support::{context_at, invocation, load_event, outcomes};
use lambda_runtime::{service_fn, LambdaEvent};
use serde::Serialize;
use tokio::sync::Notify;
use tower::Layer;

#[derive(Debug, Clone, Serialize)]
struct Charge {
    customer: String,
    cents: u64,
}

fn charge(customer: &str, cents: u64) -> Charge {
    Charge {
        customer: customer.into(),
        cents,
    }
}

/// What the function does on each run, in turn (then succeeds).
#[derive(Clone, Copy, Debug)]
enum Run {
    Fail,
    FailPermanently,
    Succeed,
}

/// A payment function that counts its runs, follows a script and may wait at a gate.
#[derive(Clone, Default)]
struct Provider {
    runs: Arc<AtomicUsize>,
    script: Arc<std::sync::Mutex<Vec<Run>>>,
    gate: Option<(Arc<Notify>, Arc<Notify>)>,
}

impl Provider {
    fn scripted(runs: &[Run]) -> Self {
        Self {
            script: Arc::new(std::sync::Mutex::new(runs.iter().rev().copied().collect())),
            ..Self::default()
        }
    }

    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    async fn charge(self, charge: Charge) -> Result<u64, BoxError> {
        let run = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some((started, release)) = &self.gate {
            started.notify_one();
            release.notified().await;
        }
        match self.script.lock().unwrap().pop().unwrap_or(Run::Succeed) {
            Run::Fail => Err("the provider timed out".into()),
            Run::FailPermanently => Err(Permanent::new("card declined").into()),
            Run::Succeed => Ok(charge.cents * 100 + run as u64),
        }
    }
}

const LEASE: Duration = Duration::from_secs(10);

#[tokio::test]
async fn calls_replay_and_names_keep_functions_apart() {
    let provider = Provider::default();
    let layer = IdempotencyLayer::new(InMemoryStore::new());
    let p = provider.clone();
    let pay = layer.function("charge-card", move |c| p.clone().charge(c));
    let p = provider.clone();
    let refund = layer.function("refund-card", move |c| p.clone().charge(c));

    let first = pay.call_with_lease(charge("c-1", 5), LEASE).await.unwrap();
    assert_eq!(first, Processed::Executed(501));
    assert_eq!(
        pay.call_with_lease(charge("c-1", 5), LEASE).await.unwrap(),
        Processed::Replayed(501)
    );
    assert_eq!(provider.runs(), 1);
    // Other arguments, or another function with the same arguments: a run each.
    assert_eq!(
        pay.call_with_lease(charge("c-1", 6), LEASE).await.unwrap(),
        Processed::Executed(602)
    );
    assert_eq!(
        refund
            .call_with_lease(charge("c-1", 5), LEASE)
            .await
            .unwrap(),
        Processed::Executed(503)
    );
    assert_eq!(provider.runs(), 3);
    assert_eq!(pay.name(), "charge-card");

    // Keyed on one field: another amount for the same customer replays.
    let p = provider.clone();
    let once_per_customer = layer
        .function("welcome-email", move |c| p.clone().charge(c))
        .with_key(JsonPointer::new("/customer"));
    assert_eq!(
        once_per_customer
            .call_with_lease(charge("c-9", 1), LEASE)
            .await
            .unwrap(),
        Processed::Executed(104)
    );
    assert_eq!(
        once_per_customer
            .call_with_lease(charge("c-9", 2), LEASE)
            .await
            .unwrap(),
        Processed::Replayed(104)
    );
    assert_eq!(provider.runs(), 4);

    // Arguments that are not JSON never run the function.
    let p = provider.clone();
    let odd = layer.function("odd", move |_: std::collections::HashMap<(u8, u8), u8>| {
        let p = p.clone();
        async move { p.charge(charge("x", 0)).await }
    });
    let err = odd
        .call_with_lease(std::collections::HashMap::from([((1, 2), 3)]), LEASE)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Key(KeyError::Unserializable(_))),
        "{err:?}"
    );
    assert_eq!(provider.runs(), 4);
}

#[tokio::test]
async fn failures_release_and_permanent_ones_are_stored() {
    let provider = Provider::scripted(&[Run::Fail, Run::Succeed, Run::FailPermanently]);
    let layer = IdempotencyLayer::new(InMemoryStore::new());
    let p = provider.clone();
    let pay = layer.function("charge-card", move |c| p.clone().charge(c));

    let err = pay
        .call_with_lease(charge("c-1", 5), LEASE)
        .await
        .unwrap_err();
    assert_eq!(err.outcome(), Outcome::Failed, "{err:?}");
    let retry = pay.call_with_lease(charge("c-1", 5), LEASE).await.unwrap();
    assert_eq!(
        retry,
        Processed::Executed(502),
        "the failure released the lease"
    );

    let err = pay
        .call_with_lease(charge("c-2", 1), LEASE)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Permanent {
                replayed: false,
                ..
            }
        ),
        "{err:?}"
    );
    let err = pay
        .call_with_lease(charge("c-2", 1), LEASE)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Permanent { replayed: true, .. }),
        "{err:?}"
    );
    assert_eq!(provider.runs(), 3);
}

/// A handler that retries its call in a loop, inside a batch: the failed call does not stop
/// the retry (each call has its own memo of failures).
#[tokio::test]
async fn a_handler_retries_a_failed_call_within_its_batch() {
    let provider = Provider::scripted(&[Run::Fail]);
    let layer = IdempotencyLayer::new(InMemoryStore::new());
    let p = provider.clone();
    let pay = layer.function("charge-card", move |c| p.clone().charge(c));
    let handler = service_fn(
        move |event: LambdaEvent<aws_lambda_events::sqs::SqsMessage>| {
            let pay = pay.clone();
            async move {
                let mut last = None;
                for _ in 0..2 {
                    match pay.call(charge("c-1", 7), &event.context).await {
                        Ok(done) => return Ok::<_, Error>(done.into_value()),
                        Err(err) => last = Some(err),
                    }
                }
                Err(last.unwrap())
            }
        },
    );
    let processor = BatchProcessor::new(layer.layer(handler));
    let mut event: SqsEvent = load_event("batch.json");
    event.records.truncate(1);
    let report = processor
        .process(invocation(
            event,
            SystemTime::now(),
            Duration::from_secs(30),
        ))
        .await;
    assert_eq!(outcomes(&report), [Outcome::Executed]);
    assert_eq!(provider.runs(), 2);
}

/// Two processes (two layers on one store): the second is locked out while the first holds
/// the lease; once the explicit lease elapses it takes over, and the first, fenced out, gets
/// `LeaseLost`.
async fn leases_fence_concurrent_calls<St: Store + Clone>(store: St, clock: Option<ManualClock>) {
    let (started, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let provider = Provider {
        gate: Some((started.clone(), release.clone())),
        ..Provider::default()
    };
    let config = Config::new().with_key_prefix("payments");
    let gated = {
        let layer = IdempotencyLayer::new(store.clone()).with_config(config.clone());
        let p = provider.clone();
        layer
            .with_clock(clock.clone().unwrap_or_else(ManualClock::starting_now))
            .function("charge-card", move |c| p.clone().charge(c))
    };
    let free = Provider::default();
    let other = {
        let layer = IdempotencyLayer::new(store).with_config(config);
        let p = free.clone();
        layer
            .with_clock(clock.clone().unwrap_or_else(ManualClock::starting_now))
            .function("charge-card", move |c| p.clone().charge(c))
    };

    let running = tokio::spawn({
        let gated = gated.clone();
        async move { gated.call_with_lease(charge("c-1", 3), LEASE).await }
    });
    started.notified().await;
    let err = other
        .call_with_lease(charge("c-1", 3), LEASE)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InProgress { .. }), "{err:?}");
    assert_eq!(free.runs(), 0);

    let Some(clock) = clock else {
        release.notify_one();
        assert_eq!(running.await.unwrap().unwrap(), Processed::Executed(301));
        assert_eq!(
            other
                .call_with_lease(charge("c-1", 3), LEASE)
                .await
                .unwrap(),
            Processed::Replayed(301)
        );
        return;
    };
    clock.advance(LEASE + Duration::from_secs(1));
    assert_eq!(
        other
            .call_with_lease(charge("c-1", 3), LEASE)
            .await
            .unwrap(),
        Processed::Executed(301)
    );
    release.notify_one();
    let err = running.await.unwrap().unwrap_err();
    assert!(matches!(err, Error::LeaseLost { .. }), "{err:?}");
    assert_eq!((provider.runs(), free.runs()), (1, 1));
}

#[tokio::test]
async fn an_elapsed_explicit_lease_is_taken_over_and_fenced() {
    leases_fence_concurrent_calls(InMemoryStore::new(), Some(ManualClock::starting_now())).await;
}

#[tokio::test]
async fn concurrent_calls_on_dynamodb_local() {
    if let Some(store) = fresh_store().await {
        leases_fence_concurrent_calls(store, None).await;
    }
}

#[tokio::test]
async fn names_cannot_spell_each_others_keys_and_leases_saturate() {
    let provider = Provider::default();
    let layer = IdempotencyLayer::new(InMemoryStore::new());
    let named = |name: &str| {
        let p = provider.clone();
        layer
            .function(name, move |c| p.clone().charge(c))
            .with_key(JsonPointer::new("/customer"))
    };
    // Name "a" with customer "\0b" against name "a\0" with customer "b".
    let (a, a_nul) = (named("a"), named("a\0"));
    let huge = Duration::MAX;
    assert!(
        a.call_with_lease(charge("\0b", 1), huge)
            .await
            .unwrap()
            .outcome()
            == Outcome::Executed
    );
    assert!(
        a_nul
            .call_with_lease(charge("b", 1), huge)
            .await
            .unwrap()
            .outcome()
            == Outcome::Executed
    );
    assert_eq!(provider.runs(), 2, "two names, two records");
    let err = a
        .call_with_lease(charge("c", 1), Duration::ZERO)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::DeadlineNear), "{err:?}");
}

#[tokio::test]
async fn a_context_past_its_deadline_runs_nothing() {
    let provider = Provider::default();
    let p = provider.clone();
    let pay = IdempotencyLayer::new(InMemoryStore::new())
        .function("charge-card", move |c| p.clone().charge(c));
    let context = context_at(SystemTime::now() - Duration::from_secs(1), Duration::ZERO);
    let err = pay.call(charge("c-1", 1), &context).await.unwrap_err();
    assert!(matches!(err, Error::DeadlineNear), "{err:?}");
    assert_eq!(provider.runs(), 0);
    // A closure key reads the arguments through `Deref`.
    let p = provider.clone();
    let by_customer = IdempotencyLayer::new(InMemoryStore::new())
        .function("charge-card", move |c| p.clone().charge(c))
        .with_key(|args: &Serialized<Charge>| Ok::<_, KeyError>(args.customer.clone()));
    let context = context_at(SystemTime::now(), Duration::from_secs(30));
    assert_eq!(
        by_customer.call(charge("c-1", 1), &context).await.unwrap(),
        Processed::Executed(101)
    );
    assert_eq!(
        by_customer.call(charge("c-1", 2), &context).await.unwrap(),
        Processed::Replayed(101)
    );
}

/// Concurrent calls of an idempotent function in one process, as its docs say: a call waiting
/// for a running one that fails gets `SameKeyFailed`; one whose own lease is short still
/// waits for the running call to its end. (Found in re-review: the first retried the function
/// itself; the second answered "in progress" at once, its lease shorter than 500 ms.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_function_calls_share_the_running_calls_end() {
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let f = IdempotencyLayer::new(InMemoryStore::new()).function("charge", move |cents: u64| {
        let calls = c.clone();
        async move {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(200)).await;
            match cents {
                500 => Err(std::io::Error::other("transient")),
                _ => Ok::<_, std::io::Error>(n),
            }
        }
    });
    for (cents, lease, second) in [
        (
            500u64,
            Duration::from_secs(30),
            Err("Idempotency.SameKeyFailed"),
        ),
        (700, Duration::from_millis(400), Ok(Outcome::Replayed)),
    ] {
        let first = tokio::spawn({
            let f = f.clone();
            async move { f.call_with_lease(cents, lease).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let answer = f.call_with_lease(cents, lease).await;
        assert!(first.await.unwrap().is_ok() == (cents != 500), "{cents}");
        assert_eq!(
            answer.map(|p| p.outcome()).map_err(|e| e.error_type()),
            second,
            "{cents}"
        );
    }
    assert_eq!(calls.load(Ordering::SeqCst), 2, "each amount ran once");
}

/// A call whose function hangs holds its key in this process only until its lease ends: a
/// second call with the same arguments waits for it, then takes the key over. (Found in
/// review: with no invocation deadline the second call waited for ever.)
#[tokio::test]
async fn a_call_waits_for_a_hung_one_only_until_its_lease_ends() {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let f = IdempotencyLayer::new(InMemoryStore::new()).function("hangs-first", move |_: u32| {
        let run = counted.fetch_add(1, Ordering::SeqCst) + 1;
        async move {
            if run == 1 {
                std::future::pending::<()>().await;
            }
            Ok::<_, std::io::Error>(run)
        }
    });
    let lease = Duration::from_secs(1);
    let hung = tokio::spawn({
        let f = f.clone();
        async move { f.call_with_lease(7, lease).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = tokio::time::timeout(Duration::from_secs(5), f.call_with_lease(7, lease))
        .await
        .expect("the second call stops waiting when the hung call's lease ends");
    hung.abort();
    assert_eq!(second.unwrap(), Processed::Executed(2));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}
/// Two equal sets whose iteration orders differ (built with other insertion orders and
/// capacities until they do): as a function's arguments, one call.
fn equal_sets_iterating_differently() -> (HashSet<String>, HashSet<String>) {
    let skus: Vec<String> = (0..24).map(|i| format!("sku-{i}")).collect();
    let a: HashSet<String> = skus.iter().cloned().collect();
    for capacity in 0..200 {
        let mut b = HashSet::with_capacity(capacity);
        b.extend(skus.iter().rev().cloned());
        if a.iter().ne(b.iter()) {
            assert_eq!(a, b);
            return (a, b);
        }
    }
    panic!("200 sets of the same elements all iterated in one order");
}

/// A function counting its runs, answering its run number.
fn counted<A>(
    runs: &Arc<AtomicUsize>,
) -> impl Fn(A) -> std::future::Ready<Result<usize, BoxError>> + Clone {
    let runs = runs.clone();
    move |_| std::future::ready(Ok(runs.fetch_add(1, Ordering::SeqCst) + 1))
}

/// Equal `HashSet` arguments are one call, whatever order the two sets iterate in: the
/// second is replayed. (Found in issue 40: the key was the arguments' JSON in iteration
/// order, so the second ran again.)
#[tokio::test]
async fn equal_hash_set_arguments_are_one_call() {
    let runs = Arc::new(AtomicUsize::new(0));
    let layer = IdempotencyLayer::new(InMemoryStore::new());
    let tag = layer.function("tag-order", counted::<HashSet<String>>(&runs));
    let (a, b) = equal_sets_iterating_differently();
    assert_eq!(
        tag.call_with_lease(a, LEASE).await.unwrap(),
        Processed::Executed(1)
    );
    assert_eq!(
        tag.call_with_lease(b, LEASE).await.unwrap(),
        Processed::Replayed(1),
        "an equal set is the same call"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[derive(Debug, Clone, Serialize)]
struct Order {
    id: String,
    skus: HashSet<String>,
}

/// A `HashSet` in a field of the arguments: keyed on all of them, or on another field with
/// payload validation, equal arguments are one call and the second is replayed, never
/// refused as another payload.
#[tokio::test]
async fn a_hash_set_field_is_one_call_and_passes_payload_validation() {
    let runs = Arc::new(AtomicUsize::new(0));
    let layer = IdempotencyLayer::new(InMemoryStore::new())
        .with_config(Config::new().with_payload_validation(PayloadValidation::Body));
    let by_args = layer.function("ship-order", counted::<Order>(&runs));
    let by_id = layer
        .function("bill-order", counted::<Order>(&runs))
        .with_key(JsonPointer::new("/id"));
    let order = |skus| Order {
        id: "o-1".into(),
        skus,
    };
    let (a, b) = equal_sets_iterating_differently();
    assert_eq!(
        by_args.call_with_lease(order(a), LEASE).await.unwrap(),
        Processed::Executed(1)
    );
    assert_eq!(
        by_args
            .call_with_lease(order(b), LEASE)
            .await
            .map_err(|e| e.error_type()),
        Ok(Processed::Replayed(1)),
        "keyed on the arguments: an equal set is the same call"
    );
    let (a, b) = equal_sets_iterating_differently();
    assert_eq!(
        by_id.call_with_lease(order(a), LEASE).await.unwrap(),
        Processed::Executed(2)
    );
    assert_eq!(
        by_id
            .call_with_lease(order(b), LEASE)
            .await
            .map_err(|e| e.error_type()),
        Ok(Processed::Replayed(2)),
        "keyed on the id: an equal set is the same payload"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

/// A `Vec` keeps its order: two orders of the same elements are two calls.
#[tokio::test]
async fn vec_arguments_in_another_order_are_another_call() {
    let runs = Arc::new(AtomicUsize::new(0));
    let layer = IdempotencyLayer::new(InMemoryStore::new());
    let pick = layer.function("pick-items", counted::<Vec<String>>(&runs));
    let items = |order: [&str; 2]| order.map(String::from).to_vec();
    assert_eq!(
        pick.call_with_lease(items(["a", "b"]), LEASE)
            .await
            .unwrap(),
        Processed::Executed(1)
    );
    assert_eq!(
        pick.call_with_lease(items(["b", "a"]), LEASE)
            .await
            .unwrap(),
        Processed::Executed(2)
    );
    assert_eq!(
        pick.call_with_lease(items(["a", "b"]), LEASE)
            .await
            .unwrap(),
        Processed::Replayed(1)
    );
}
