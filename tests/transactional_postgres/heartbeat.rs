//! The heartbeat against a real COMMIT: its extension waits on the record's row, which the
//! transaction's completion holds until the COMMIT has landed.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::sqs::SqsMessage;
use lambda_idempotency::batch::BatchProcessor;
use lambda_idempotency::record::Status;
use lambda_idempotency::store::postgres::PgTransaction;
use lambda_idempotency::store::PostgresStore;
use lambda_idempotency::{CommitStrategy, IdempotencyLayer, Outcome};
use lambda_idempotency_test_support as support;
use support::outcomes;

use crate::{config, credit, deliver, deliver_first, ids, Order, Rig};

/// The ledger's writes make the COMMIT take `seconds` (a deferred constraint trigger that
/// sleeps), while the transaction holds the record's row.
async fn slow_commits(rig: &Rig, seconds: f64) {
    let ledger = &rig.ledger;
    let client = rig.store.pool().get().await.expect("a connection");
    client
        .batch_execute(&format!(
            "CREATE FUNCTION {ledger}_slow() RETURNS trigger LANGUAGE plpgsql AS \
               $$ BEGIN PERFORM pg_sleep({seconds}); RETURN NULL; END $$; \
             CREATE CONSTRAINT TRIGGER {ledger}_slow AFTER INSERT OR UPDATE ON {ledger} \
               DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {ledger}_slow();"
        ))
        .await
        .expect("the trigger");
}

/// Heartbeats every 50 ms wait on the record's row through a 0.6 s COMMIT; when it lands
/// they are refused (the record is completed). The record is executed, once, not
/// `lease_lost`, and the redelivery replays it. (A guard: the COMMIT's answer comes before
/// the refused extension's here, so this passed before the heartbeat read records back too.)
#[tokio::test]
async fn a_heartbeat_waiting_on_the_row_through_the_commit_lets_the_record_finish() {
    let Some(rig) = Rig::new().await else {
        return;
    };
    slow_commits(&rig, 0.6).await;
    let process = || {
        rig.crediting(
            config().with_heartbeat(Duration::from_secs(3), Duration::from_millis(50)),
            CommitStrategy::Lease,
        )
    };
    let report = process().process(deliver_first()).await;
    assert_eq!(outcomes(&report), [Outcome::Executed]);
    assert!(report.response.batch_item_failures.is_empty());
    assert_eq!(rig.runs(), 1);
    assert_eq!(rig.balances().await, [("acct-alice".to_string(), 25)]);
    let record = rig.record(&ids("batch.json")[0]).await.expect("the record");
    assert_eq!(record.status, Status::Completed);
    assert!(record.owner.is_some());

    let again = process().process(deliver_first()).await;
    assert_eq!(outcomes(&again), [Outcome::Replayed]);
    assert_eq!(rig.runs(), 1);
    assert_eq!(rig.balances().await, [("acct-alice".to_string(), 25)]);
}

/// A pool of 2 and a concurrent batch of 3 records whose handlers outlive the first
/// heartbeat: the heartbeats' extensions must not wait behind the handlers' own transactions
/// for a connection. Every record is executed once, its credit committed with it, and the
/// redelivery replays them. (Before the fix, the two transactions held both connections, the
/// extensions waited for one until the leases lapsed, and every record ended `lease_lost`
/// and rolled back, on every delivery.)
#[tokio::test]
async fn heartbeats_on_a_small_pool_never_starve_behind_their_own_transactions() {
    let Some(rig) = Rig::new().await else {
        return;
    };
    let pool = support::postgres::pool_of(2).expect("PostgreSQL, as the rig");
    let store = PostgresStore::new(pool).with_table(rig.store.table());
    let process = || {
        let (runs, ledger) = (Arc::clone(&rig.runs), rig.ledger.clone());
        let handler = IdempotencyLayer::new(store.clone())
            .with_config(
                config().with_heartbeat(Duration::from_millis(600), Duration::from_millis(200)),
            )
            .in_transaction()
            .expect("a pool with room for transactions")
            .with_commit(CommitStrategy::Lease)
            .handler(move |message: SqsMessage, transaction: PgTransaction| {
                runs.fetch_add(1, Ordering::SeqCst);
                let ledger = ledger.clone();
                async move {
                    let order: Order = serde_json::from_str(message.body.as_deref().unwrap_or(""))?;
                    // Past the first heartbeat (200 ms) and the lease taken (600 ms).
                    tokio::time::sleep(Duration::from_millis(700)).await;
                    credit(&transaction, &ledger, &order).await
                }
            });
        BatchProcessor::new(handler)
    };
    let expected = [("acct-alice".to_string(), 20), ("acct-bob".to_string(), 40)];

    let first = process().process(deliver("batch.json")).await;
    assert_eq!(outcomes(&first), [Outcome::Executed; 3]);
    assert!(first.response.batch_item_failures.is_empty());
    assert_eq!(rig.runs(), 3, "each handler ran once");
    assert_eq!(rig.balances().await, expected, "each credit committed");
    let mut owners = Vec::new();
    for id in ids("batch.json") {
        let record = rig.record(&id).await.expect("the record");
        assert_eq!(record.status, Status::Completed);
        assert_eq!(record.lease_expiration_ms, None);
        owners.push(record.owner.expect("the owner that completed it"));
    }

    let again = process().process(deliver("batch.json")).await;
    assert_eq!(outcomes(&again), [Outcome::Replayed; 3]);
    assert!(again.response.batch_item_failures.is_empty());
    assert_eq!(rig.runs(), 3, "no handler ran again");
    assert_eq!(rig.balances().await, expected, "nothing credited twice");
    for (id, owner) in ids("batch.json").into_iter().zip(&owners) {
        let record = rig.record(&id).await.expect("the record");
        assert_eq!(record.status, Status::Completed);
        assert_eq!(
            record.owner.as_ref(),
            Some(owner),
            "the record is unchanged"
        );
    }
}

/// The store runs one transaction fewer than its pool's connections: on a pool of 2, one. The
/// record waiting for it holds no lease meanwhile (it takes its lease when its transaction is
/// open), so a lease sized for the handler does not lapse in the queue; then it runs.
#[tokio::test]
async fn a_record_waiting_for_a_transaction_holds_no_lease() {
    let Some(rig) = Rig::new().await else {
        return;
    };
    let pool = support::postgres::pool_of(2).expect("PostgreSQL, as the rig");
    let store = PostgresStore::new(pool).with_table(rig.store.table());
    let started = Arc::new(tokio::sync::Notify::new());
    let release = Arc::new(tokio::sync::Notify::new());
    let handler = {
        let (runs, ledger) = (Arc::clone(&rig.runs), rig.ledger.clone());
        let (started, release) = (Arc::clone(&started), Arc::clone(&release));
        IdempotencyLayer::new(store)
            .with_config(config())
            .in_transaction()
            .expect("a pool with room for transactions")
            .with_commit(CommitStrategy::Lease)
            .handler(move |message: SqsMessage, transaction: PgTransaction| {
                runs.fetch_add(1, Ordering::SeqCst);
                let (ledger, started, release) =
                    (ledger.clone(), Arc::clone(&started), Arc::clone(&release));
                async move {
                    let order: Order = serde_json::from_str(message.body.as_deref().unwrap_or(""))?;
                    started.notify_one();
                    release.notified().await;
                    credit(&transaction, &ledger, &order).await
                }
            })
    };
    let mut event = support::load_event("batch.json");
    event.records.truncate(2);
    let delivery =
        support::invocation(event, std::time::SystemTime::now(), Duration::from_secs(30));
    let processor = BatchProcessor::new(handler);
    let ids = &ids("batch.json")[..2];
    let watch = async {
        started.notified().await;
        // Time for the other record to reach the store, were it not waiting.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(rig.runs(), 1, "one transaction at a time");
        let mut held = Vec::new();
        for id in ids {
            held.push(rig.record(id).await.map(|record| record.status));
        }
        held.sort_by_key(Option::is_some);
        assert_eq!(
            held,
            [None, Some(Status::InProgress)],
            "only the running record holds a lease"
        );
        release.notify_one();
        started.notified().await;
        release.notify_one();
    };
    let (report, ()) = tokio::join!(processor.process(delivery), watch);
    assert_eq!(outcomes(&report), [Outcome::Executed; 2]);
    assert!(report.response.batch_item_failures.is_empty());
    assert_eq!(rig.runs(), 2);
    assert_eq!(
        rig.balances().await,
        [("acct-alice".to_string(), 25), ("acct-bob".to_string(), 40)]
    );
    for id in ids {
        let record = rig.record(id).await.expect("the record");
        assert_eq!(record.status, Status::Completed);
        assert!(record.owner.is_some());
    }
}
