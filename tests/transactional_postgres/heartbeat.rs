//! The heartbeat against a real COMMIT: its extension waits on the record's row, which the
//! transaction's completion holds until the COMMIT has landed.

use std::time::Duration;

use lambda_idempotency::record::Status;
use lambda_idempotency::{IdempotencyMode, Outcome};
use lambda_idempotency_test_support::outcomes;

use crate::{config, deliver_first, ids, Rig};

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
            config(IdempotencyMode::Lease)
                .with_heartbeat(Duration::from_secs(3), Duration::from_millis(50)),
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
