//! Invocations that die mid-handler and duplicates that arrive while the first copy runs
//! (two invocations in one task, so the test controls the interleaving).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lambda_idempotency::{CommitStrategy, Outcome};
use lambda_idempotency_test_support::outcomes;
use tokio::sync::Notify;

use crate::{ids, FirstRun, Rig};

/// Runs `invocation` until its handler has credited, then drops it (as a killed process's
/// connection closes).
async fn kill_after_credit<F: Future>(invocation: F, ready: &Notify) {
    tokio::select! {
        _ = invocation => panic!("the invocation hangs in its handler"),
        () = ready.notified() => {}
    }
}

/// An invocation that dies after its handler credited: the server rolls the transaction
/// back. Optimistic mode leaves no record at all, so the next delivery runs at once and
/// credits once.
#[tokio::test]
async fn a_dead_invocation_applies_nothing_optimistic() {
    let Some(rig) = Rig::new().await else {
        return;
    };
    let ready = Arc::new(Notify::new());
    let mode = CommitStrategy::Optimistic;
    let dying = rig.process(mode, FirstRun::CreditsThenHangs, Arc::clone(&ready));
    kill_after_credit(dying, &ready).await;
    assert_eq!(rig.record(&ids("batch.json")[0]).await, None);
    let again = rig.process(mode, FirstRun::Credits, ready).await;
    assert_eq!(outcomes(&again), [Outcome::Executed]);
    assert_eq!(rig.runs(), 2);
    assert_eq!(rig.balances().await, [("acct-alice".to_string(), 25)]);
}

/// Lease mode: the dead invocation's lease stays until its deadline (the duplicate is
/// locked, not run), and its credit is rolled back all the same.
#[tokio::test]
async fn a_dead_invocation_applies_nothing_lease() {
    let Some(rig) = Rig::new().await else {
        return;
    };
    let ready = Arc::new(Notify::new());
    let mode = CommitStrategy::Lease;
    let dying = rig.process(mode, FirstRun::CreditsThenHangs, Arc::clone(&ready));
    kill_after_credit(dying, &ready).await;
    let again = rig.process(mode, FirstRun::Credits, ready).await;
    assert_eq!(outcomes(&again), [Outcome::Locked]);
    assert_eq!(rig.runs(), 1);
    assert_eq!(rig.balances().await, []);
    let record = rig.record(&ids("batch.json")[0]).await.expect("the lease");
    assert!(record.lease_expiration_ms.is_some());
}

/// Optimistic mode: a duplicate that arrives while the first copy's transaction is open
/// waits on its uncommitted record and then replays it: one run, one credit.
#[tokio::test]
async fn a_concurrent_duplicate_waits_and_replays_optimistic() {
    let Some(rig) = Rig::new().await else {
        return;
    };
    let (ready, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let mode = CommitStrategy::Optimistic;
    let first = rig.process_holding(mode, Arc::clone(&ready), Arc::clone(&release));
    let duplicate = async {
        ready.notified().await;
        let duplicate = rig.process(mode, FirstRun::Credits, Arc::new(Notify::new()));
        tokio::pin!(duplicate);
        tokio::select! {
            _ = &mut duplicate => panic!("the duplicate did not wait on the open transaction"),
            () = tokio::time::sleep(Duration::from_millis(300)) => {}
        }
        release.notify_one();
        duplicate.await
    };
    let (first, duplicate) = tokio::join!(first, duplicate);
    assert_eq!(outcomes(&first), [Outcome::Executed]);
    assert_eq!(outcomes(&duplicate), [Outcome::Replayed]);
    assert_eq!(duplicate.records[0].value, first.records[0].value);
    assert_eq!(rig.runs(), 1);
    assert_eq!(rig.balances().await, [("acct-alice".to_string(), 25)]);
}

/// Lease mode: a duplicate that arrives while the first copy runs is locked at once (the
/// lease is committed outside the transaction).
#[tokio::test]
async fn a_concurrent_duplicate_is_locked_lease() {
    let Some(rig) = Rig::new().await else {
        return;
    };
    let (ready, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let mode = CommitStrategy::Lease;
    let first = rig.process_holding(mode, Arc::clone(&ready), Arc::clone(&release));
    let duplicate = async {
        ready.notified().await;
        let duplicate = rig
            .process(mode, FirstRun::Credits, Arc::new(Notify::new()))
            .await;
        release.notify_one();
        duplicate
    };
    let (first, duplicate) = tokio::join!(first, duplicate);
    assert_eq!(outcomes(&duplicate), [Outcome::Locked]);
    assert_eq!(outcomes(&first), [Outcome::Executed]);
    assert_eq!(rig.runs(), 1);
    assert_eq!(rig.balances().await, [("acct-alice".to_string(), 25)]);
}

/// Optimistic mode meets a record another transaction is completing: its acquire waits on
/// that row, finds it completed, but reads (from its snapshot) the in-progress record as it
/// was, with its lease elapsed. It asks again and replays, rather than failing the record.
#[tokio::test]
async fn an_acquire_that_read_a_stale_record_asks_again() {
    let Some(rig) = Rig::new().await else {
        return;
    };
    let id = &ids("batch.json")[0];
    let key = lambda_idempotency::key::IdempotencyKey::derive("orders", id.as_bytes());
    let now = lambda_idempotency::clock::epoch_secs(std::time::SystemTime::now()) as i64;
    let pool = rig.store.pool().clone();
    let setup = pool.get().await.unwrap();
    setup
        .execute(
            &format!(
                "INSERT INTO {} (id, status, expiration, in_progress_expiration, lease_owner) \
                 VALUES ($1, 'INPROGRESS', $2, 1, 'holder')",
                rig.store.table()
            ),
            &[&key.as_str(), &(now + 3_600)],
        )
        .await
        .unwrap();
    let mut holder = pool.get().await.unwrap();
    let completing = holder.transaction().await.unwrap();
    completing
        .execute(
            &format!(
                "UPDATE {} SET status = 'COMPLETED', data = '25', in_progress_expiration = NULL \
                 WHERE id = $1",
                rig.store.table()
            ),
            &[&key.as_str()],
        )
        .await
        .unwrap();
    let duplicate = rig.process(
        CommitStrategy::Optimistic,
        FirstRun::Credits,
        Arc::new(Notify::new()),
    );
    let commit_later = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        completing.commit().await.unwrap();
    };
    let (report, ()) = tokio::join!(duplicate, commit_later);
    assert_eq!(outcomes(&report), [Outcome::Replayed]);
    assert_eq!(report.records[0].value, Some(25));
    assert_eq!(rig.runs(), 0);
    assert_eq!(rig.balances().await, []);
}
