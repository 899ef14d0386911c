//! Review: resource use of InMemoryStore's commit on values a handler supplies.
mod common;
use std::time::{Duration, Instant, SystemTime};

use lambda_idempotency::{
    epoch_secs, Attr, Commit, CommitRequest, IdempotencyKey, InMemoryStore, OwnerToken, Status,
    TransactionalStore, Write,
};

fn request(writes: Vec<Write>) -> CommitRequest {
    let now = SystemTime::now();
    CommitRequest {
        key: IdempotencyKey::derive("review2", uuid::Uuid::new_v4().to_string().as_bytes()),
        owner: OwnerToken::generate(),
        now,
        status: Status::Completed,
        data: "1".into(),
        expiration_secs: epoch_secs(now + Duration::from_secs(3600)),
        validation: None,
        writes,
    }
}

fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

fn commit(store: &InMemoryStore, writes: Vec<Write>) -> Commit {
    block(store.commit_fresh(&request(writes))).unwrap()
}

fn numbers(from: usize, count: usize) -> Vec<String> {
    (from..from + count).map(|i| i.to_string()).collect()
}

/// ADD of a number set to a number set: time grows with the product of the sizes.
#[test]
fn review2_number_set_union_is_quadratic() {
    for n in [1_000usize, 2_000, 4_000, 8_000] {
        let store = InMemoryStore::new();
        store.define_table("t", &["k"]);
        let seed = Write::put(
            "t",
            [
                ("k".to_string(), Attr::s("a")),
                ("ns".to_string(), Attr::Ns(numbers(0, n))),
            ],
        );
        assert_eq!(commit(&store, vec![seed]), Commit::Applied);
        let add = Write::update("t", [("k", Attr::s("a"))], "ADD ns :more")
            .value(":more", Attr::Ns(numbers(n, n)));
        let size = add.clone();
        let started = Instant::now();
        assert_eq!(commit(&store, vec![add]), Commit::Applied);
        let elapsed = started.elapsed();
        let bytes: usize = numbers(n, n).iter().map(String::len).sum();
        println!("NS ADD: {n} + {n} elements (~{bytes} bytes of value): {elapsed:?}");
        drop(size);
    }
}

/// The same for string sets (DELETE).
#[test]
fn review2_string_set_delete_is_quadratic() {
    for n in [5_000usize, 10_000, 20_000, 40_000] {
        let store = InMemoryStore::new();
        store.define_table("t", &["k"]);
        let seed = Write::put(
            "t",
            [
                ("k".to_string(), Attr::s("a")),
                ("ss".to_string(), Attr::Ss(numbers(0, n))),
            ],
        );
        assert_eq!(commit(&store, vec![seed]), Commit::Applied);
        let delete = Write::update("t", [("k", Attr::s("a"))], "DELETE ss :gone")
            .value(":gone", Attr::Ss(numbers(n, n)));
        let started = Instant::now();
        assert_eq!(commit(&store, vec![delete]), Commit::Applied);
        println!("SS DELETE: {n} from {n} elements: {:?}", started.elapsed());
    }
}

fn nested(depth: usize) -> Attr {
    let mut value = Attr::s("leaf");
    for _ in 0..depth {
        value = Attr::L(vec![value]);
    }
    value
}

/// On a 2 MiB stack (a tokio worker's), build and drop a deeply nested value: fine.
#[test]
fn review2_deep_value_alone_is_fine() {
    let depth: usize = std::env::var("REVIEW2_DEPTH")
        .ok()
        .and_then(|d| d.parse().ok())
        .unwrap_or(5_000);
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            let put = Write::put(
                "t",
                [
                    ("k".to_string(), Attr::s("a")),
                    ("v".to_string(), nested(depth)),
                ],
            );
            let cloned = put.clone();
            drop(cloned);
            drop(put);
        })
        .unwrap()
        .join()
        .unwrap();
}

/// On a 2 MiB stack, commit a Put holding that value: the process dies of a stack overflow
/// (DynamoDB refuses more than 32 levels of nesting).
#[test]
#[ignore = "aborts the process: run alone"]
fn review2_deep_value_overflows_the_stack() {
    let depth: usize = std::env::var("REVIEW2_DEPTH")
        .ok()
        .and_then(|d| d.parse().ok())
        .unwrap_or(5_000);
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            let store = InMemoryStore::new();
            store.define_table("t", &["k"]);
            let put = Write::put(
                "t",
                [
                    ("k".to_string(), Attr::s("a")),
                    ("v".to_string(), nested(depth)),
                ],
            );
            let answer = commit(&store, vec![put]);
            println!("depth {depth}: {answer:?}");
        })
        .unwrap()
        .join()
        .unwrap();
}

/// The same Put on DynamoDbStore (DynamoDB Local), on a 2 MiB stack.
#[test]
#[ignore = "may abort the process: run alone"]
fn review2_deep_value_on_dynamodb() {
    let depth: usize = std::env::var("REVIEW2_DEPTH")
        .ok()
        .and_then(|d| d.parse().ok())
        .unwrap_or(5_000);
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let answer = runtime.block_on(Box::pin(async move {
                let store = common::dynamodb::fresh_store()
                    .await
                    .expect("DynamoDB Local");
                let table = common::dynamodb::create_table_keyed(store.client(), "deep", "k").await;
                let put = Write::put(
                    table,
                    [
                        ("k".to_string(), Attr::s("a")),
                        ("v".to_string(), nested(depth)),
                    ],
                );
                store.commit_fresh(&request(vec![put])).await
            }));
            println!("depth {depth}: {:?}", answer.map_err(|e| e.to_string()));
        })
        .unwrap()
        .join()
        .unwrap();
}
