//! Concurrent invocations in one process (Lambda Managed Instances, where
//! `lambda_runtime::run_concurrent` polls for several events at once): clones of one
//! `BatchProcessor`, each invocation on its own task of a multi-threaded runtime, share the
//! layer's single flight and local cache, so a key that several invocations carry at the
//! same time runs once in the process and the others replay it instead of being reported
//! locked. Checked per invocation: each record's outcome, `batchItemFailures`, and how many
//! times the handler ran per key.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::store::{Attr, InMemoryStore, Write};
use lambda_idempotency::testing::invocation;
use lambda_idempotency::{CommitStrategy, Completion, Config, IdempotencyLayer, Outcome};
use lambda_idempotency_test_support::{outcomes, reported};
use tower::ServiceExt;

const REMAINING: Duration = Duration::from_secs(30);

fn batch(invocation: usize, keys: &[&str]) -> SqsEvent {
    let mut event = SqsEvent::default();
    for (i, key) in keys.iter().enumerate() {
        let mut m = SqsMessage::default();
        m.message_id = Some(format!("inv{invocation}-m{i}"));
        m.body = Some(format!(r#"{{"key":"{key}"}}"#));
        event.records.push(m);
    }
    event
}

type Runs = Arc<Mutex<HashMap<String, usize>>>;

fn runs_of(runs: &Runs, key: &str) -> usize {
    runs.lock().unwrap().get(key).copied().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_key_in_concurrent_invocations_runs_once_in_the_process() {
    for mode in [CommitStrategy::Lease, CommitStrategy::Optimistic] {
        let store = InMemoryStore::new();
        store.define_table("ledger", &["key"]);
        let runs: Runs = Arc::default();
        let layer = IdempotencyLayer::new(store.clone())
            .with_key(lambda_idempotency::key::JsonPointer::new("/key"))
            .with_config(Config::new().with_key_prefix("mi").with_local_cache(64));
        let handler_runs = runs.clone();
        let processor = BatchProcessor::new(layer.with_writes().with_commit(mode).handler(
            move |m: SqsMessage| {
                let runs = handler_runs.clone();
                async move {
                    let body: serde_json::Value = serde_json::from_str(m.body.as_deref().unwrap())
                        .map_err(std::io::Error::other)?;
                    let key = body["key"].as_str().unwrap().to_string();
                    *runs.lock().unwrap().entry(key.clone()).or_default() += 1;
                    // Long enough that the other invocations arrive while it runs.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    let write = Write::update("ledger", [("key", Attr::s(&key))], "ADD #n :one")
                        .name("#n", "credits")
                        .value(":one", Attr::n(1));
                    Ok::<_, std::io::Error>(Completion::new(key).with_write(write))
                }
            },
        ));
        // Four invocations at once, on their own tasks (the processor and its futures are
        // Send): every one carries "shared", two carry "pair", each has its own key too.
        let invocations = (0..4).map(|n| {
            let own = format!("own-{n}");
            let mut keys = vec!["shared", own.as_str()];
            if n < 2 {
                keys.push("pair");
            }
            let event = invocation(batch(n, &keys), REMAINING);
            let processor = processor.clone();
            tokio::spawn(async move { processor.process(event).await })
        });
        let mut answers = Vec::new();
        for task in invocations.collect::<Vec<_>>() {
            answers.push(task.await.unwrap());
        }
        for (n, report) in answers.iter().enumerate() {
            assert!(
                reported(report).is_empty(),
                "{mode:?} invocation {n}: none locked"
            );
            assert!(
                outcomes(report)
                    .iter()
                    .all(|o| matches!(o, Outcome::Executed | Outcome::Replayed)),
                "{mode:?} invocation {n}: {:?}",
                outcomes(report)
            );
        }
        let executed = |key: &str| {
            answers
                .iter()
                .flat_map(|r| r.records.iter())
                .filter(|r| r.outcome == Outcome::Executed && r.value.as_deref() == Some(key))
                .count()
        };
        for key in ["shared", "pair", "own-0", "own-3"] {
            assert_eq!(runs_of(&runs, key), 1, "{mode:?}: {key} ran once");
            assert_eq!(executed(key), 1, "{mode:?}: {key} executed once");
        }
        let key = [("key".to_string(), Attr::s("shared"))]
            .into_iter()
            .collect();
        let ledger = store.item("ledger", &key);
        assert_eq!(
            ledger.and_then(|item| item.get("credits").cloned()),
            Some(Attr::n(1)),
            "{mode:?}"
        );
        // A later invocation of the process answers from the local cache: no store call
        // (the store is down).
        store.set_unavailable(true);
        let later = processor
            .process(invocation(batch(9, &["shared", "pair"]), REMAINING))
            .await;
        assert_eq!(outcomes(&later), [Outcome::Replayed; 2], "{mode:?}");
        assert_eq!(runs_of(&runs, "shared"), 1, "{mode:?}");
    }
}

/// What `lambda_runtime::run_concurrent` needs: the processor as a service is `Clone + Send`
/// and its future `Send`, even for a handler whose error is `lambda_runtime::Error` (a
/// boxed error; calling `process` itself inside `tokio::spawn` with such a handler does not
/// compile, a limit of rustc's reasoning about `async fn`s, not of the processor).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_processor_as_a_service_runs_on_spawned_tasks_with_a_boxed_error_handler() {
    let layer = IdempotencyLayer::new(InMemoryStore::new()).with_config(Config::new());
    let processor = BatchProcessor::new(
        layer.handler(|_m: SqsMessage| async { Ok::<_, lambda_runtime::Error>(1u8) }),
    );
    let tasks: Vec<_> = (0..3)
        .map(|n| {
            tokio::spawn(
                processor
                    .clone()
                    .oneshot(invocation(batch(n, &["k"]), REMAINING)),
            )
        })
        .collect();
    for task in tasks {
        let response = task.await.unwrap().unwrap();
        assert!(response.batch_item_failures.is_empty());
    }
}
