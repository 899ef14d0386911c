//! DynamoDB Local itself stopped mid-run and restarted on the same data.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_lambda_events::sqs::SqsEvent;
use lambda_idempotency::{CommitStrategy, Outcome};
use order_consumer::Tables;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::support;
use crate::support::dynamodb::{balance, client_for, create_table, create_table_keyed};
use crate::support::harness::fault_proxy::{FaultProxy, Scripted};
use crate::support::harness::signal;
use crate::{container, deliver_until_done, delivery, orders, Witness};

/// A fresh directory under the system's temporary one, removed when dropped.
fn scratch_dir(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("{prefix}-"))
        .tempdir()
        .unwrap()
}

/// A DynamoDB Local of the test's own, on disk, so that it can be stopped and restarted.
struct OwnDynamoDbLocal {
    child: tokio::process::Child,
    endpoint: String,
}

impl OwnDynamoDbLocal {
    /// Starts one on a free port; `None` (skipped) only outside the test script, which
    /// names the installation.
    async fn start(db_path: &std::path::Path) -> Option<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Some(Self::start_on(db_path, port).await?.unwrap())
    }

    /// Starts one on `port`: `Err` when it did not come up there (the port taken by another
    /// listener, among others).
    async fn start_on(db_path: &std::path::Path, port: u16) -> Option<Result<Self, String>> {
        let (Ok(classpath), Ok(library)) = (
            std::env::var("LAMBDA_IDEMPOTENCY_DDB_CLASSPATH"),
            std::env::var("LAMBDA_IDEMPOTENCY_DDB_LIBRARY_PATH"),
        ) else {
            assert!(
                std::env::var("LAMBDA_IDEMPOTENCY_REQUIRE_DYNAMODB").is_err(),
                "scripts/dynamodb-local.sh sets LAMBDA_IDEMPOTENCY_DDB_CLASSPATH"
            );
            eprintln!("SKIPPED: no DynamoDB Local installation given");
            return None;
        };
        let mut child = tokio::process::Command::new("java")
            .arg(format!("-Djava.library.path={library}"))
            .args([
                "-cp",
                &classpath,
                "DynamoDbLocalLauncher",
                "-sharedDb",
                "-disableTelemetry",
            ])
            .arg("-dbPath")
            .arg(db_path)
            .args(["-port", &port.to_string()])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start DynamoDB Local");
        // Up when the launcher says it bound this port: a connection alone could reach
        // another listener that holds the port (the JVM then exits, having failed to bind).
        let ready = format!("DynamoDB Local listening on 127.0.0.1:{port}");
        // Read as bytes: a line of other output need not be UTF-8 (a path in the JVM's
        // encoding).
        let mut output = BufReader::new(child.stdout.take().unwrap());
        let up = tokio::time::timeout(Duration::from_secs(30), async {
            let mut line = Vec::new();
            loop {
                line.clear();
                match output.read_until(b'\n', &mut line).await {
                    Ok(0) => return Err("its output ended".to_string()),
                    Ok(_) => {}
                    Err(error) => return Err(format!("its output could not be read: {error}")),
                }
                let line = String::from_utf8_lossy(&line);
                if line.trim_end() == ready {
                    return Ok(());
                }
                if line.starts_with("DynamoDB Local listening") {
                    return Err(format!(
                        "the launcher on LAMBDA_IDEMPOTENCY_DDB_CLASSPATH printed {:?}, not \
                         {ready:?}: it is not this checkout's (scripts/dynamodb-local.sh sets it)",
                        line.trim_end()
                    ));
                }
            }
        })
        .await;
        let failed = match up {
            Ok(Ok(())) => None,
            Ok(Err(why)) => Some(why),
            Err(_) => Some("no ready line within 30 s".to_string()),
        };
        if let Some(why) = failed {
            // Its output ends as it exits: given a few seconds to be seen exiting.
            let status = match tokio::time::timeout(Duration::from_secs(5), child.wait()).await {
                Ok(Ok(status)) => format!("it exited ({status})"),
                _ => "it was still running, and is killed".to_string(),
            };
            let _ = child.kill().await;
            return Some(Err(format!(
                "DynamoDB Local did not start on port {port}: {why}; {status}"
            )));
        }
        // The rest of its output is read, so that a full pipe never blocks it.
        tokio::spawn(async move { tokio::io::copy(&mut output, &mut tokio::io::sink()).await });
        let endpoint = format!("http://127.0.0.1:{port}");
        Some(Ok(Self { child, endpoint }))
    }

    /// Stops it the way an operator would (SIGTERM), and waits.
    async fn stop(mut self) {
        // It bound its port when it started; had it exited since, what answered the test
        // after that was not it.
        assert!(
            matches!(self.child.try_wait(), Ok(None)),
            "DynamoDB Local at {} had exited before it was stopped",
            self.endpoint
        );
        if let Some(pid) = self.child.id() {
            signal(pid, "-TERM");
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
        let _ = self.child.kill().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dynamodb_local_stopped_and_restarted_mid_run() {
    if support::dynamodb::client().await.is_none() {
        return;
    }
    // Removed when the test ends, failed or not (dropped after its DynamoDB Local).
    let dir = scratch_dir("ddb-restart");
    let Some(first) = OwnDynamoDbLocal::start(dir.path()).await else {
        return;
    };
    let proxy = FaultProxy::start(&first.endpoint, 3).await;
    let direct = client_for(&first.endpoint, Duration::from_secs(2)).await;
    let tables = Tables {
        idempotency: create_table(&direct).await,
        ledger: create_table_keyed(&direct, "ledger", "account").await,
    };
    let store_client = client_for(&proxy.endpoint(), Duration::from_millis(400)).await;
    let witness = Arc::new(Witness::default());
    let (event, expected) = orders(20);
    let (first_half, second_half) = {
        let mut a = event.clone();
        let b_records = a.records.split_off(10);
        let mut b = SqsEvent::default();
        b.records = b_records;
        (a, b)
    };
    let processor = container(
        store_client,
        direct.clone(),
        &tables,
        CommitStrategy::Optimistic,
        witness.clone(),
    );
    let report = processor.process(delivery(first_half.clone())).await;
    assert!(report
        .records
        .iter()
        .all(|r| r.outcome == Outcome::Executed));

    // The store goes away: every record fails closed and is reported; nothing is applied.
    first.stop().await;
    let runs = witness.runs.load(Ordering::SeqCst);
    let report = processor.process(delivery(second_half.clone())).await;
    // Each record fails closed: the store's error, or (when the commit's retries outlast the
    // invocation) stopped at the deadline; either way reported, nothing committed.
    assert!(
        report
            .records
            .iter()
            .all(|r| matches!(r.outcome, Outcome::StoreUnavailable | Outcome::DeadlineNear)),
        "{:?}",
        report.records.iter().map(|r| r.outcome).collect::<Vec<_>>()
    );
    assert_eq!(report.response.batch_item_failures.len(), 10);
    // Optimistic mode runs the handler first; with the store down its commit cannot land.
    assert_eq!(
        witness.runs.load(Ordering::SeqCst) - runs,
        10,
        "each record's handler ran once, and nothing was committed"
    );

    // It comes back (same data, new port): the redelivered batches complete exactly once.
    let second = OwnDynamoDbLocal::start(dir.path()).await.unwrap();
    proxy.set_upstream(Some(&second.endpoint));
    let direct = client_for(&second.endpoint, Duration::from_secs(2)).await;
    let started = Instant::now();
    while direct.list_tables().send().await.is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "DynamoDB Local did not come back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Answers lost after the restart: scripted, so that every run loses some (the SDK then
    // sends the commit again and the toolkit recognises its own). Under load the restarted,
    // cold instance also answers after the client's 400 ms attempts give up: a commit lands
    // and its delivery, every answer lost, is reported, so the record replays later.
    for _ in 0..4 {
        proxy.script("TransactWriteItems", Scripted::LoseAnswer);
    }
    // SQS redelivers everything not acknowledged, until it is.
    let first_ids: Vec<String> = first_half
        .records
        .iter()
        .map(|r| r.message_id.clone().unwrap())
        .collect();
    let outage: Vec<Outcome> = report.records.iter().map(|r| r.outcome).collect();
    let delivered = deliver_until_done(&processor, event, &proxy, 0).await;
    // Every delivery's outcome, shown by the assertions below when one fails.
    let deliveries = format!("during the outage: {outage:?}; after the restart: {delivered:?}");
    let mut history: BTreeMap<String, Vec<Outcome>> = BTreeMap::new();
    for (id, outcome) in delivered {
        history.entry(id).or_default().push(outcome);
    }
    let executed = |id: &str| {
        history[id]
            .iter()
            .filter(|o| **o == Outcome::Executed)
            .count()
    };
    // The first half completed before the outage: replayed, never executed again.
    for id in &first_ids {
        assert_eq!(
            executed(id),
            0,
            "{id} ran again after the restart; {deliveries}"
        );
    }
    // The second half's effects apply exactly once (the ledger, below), each record either
    // executed once, or applied by a delivery whose answer was lost (reported unavailable,
    // stopped at the deadline, or locked by a conflict on the resend; so redelivered) and
    // then replayed. That a delivery recognises its own resent commit (Executed, not
    // Replayed) is checked deterministically by
    // `a_commit_whose_response_was_lost_is_recognised_not_applied_twice`.
    for record in &second_half.records {
        let id = record.message_id.as_deref().unwrap();
        let outcomes = &history[id];
        let last = outcomes.last().copied();
        let lost_before = outcomes.iter().any(|o| {
            matches!(
                o,
                Outcome::StoreUnavailable | Outcome::DeadlineNear | Outcome::Locked
            )
        });
        match executed(id) {
            1 => assert_eq!(last, Some(Outcome::Executed), "{id}: {deliveries}"),
            0 => assert!(
                last == Some(Outcome::Replayed) && lost_before,
                "{id} acknowledged without running or a lost answer; {deliveries}"
            ),
            n => panic!("{id} executed {n} times; {deliveries}"),
        }
    }
    assert!(proxy.unused_script().is_empty(), "{deliveries}");
    for (account, amount) in &expected {
        assert_eq!(
            balance(&direct, &tables.ledger, account).await,
            *amount,
            "{account}"
        );
    }
    second.stop().await;
}

/// The harness's own check: a DynamoDB Local that could not bind its port is not mistaken
/// for the listener that holds it (the restart test would then run against something else).
#[tokio::test]
async fn own_dynamodb_local_is_not_mistaken_for_another_listener() {
    if support::dynamodb::client().await.is_none() {
        return;
    }
    let taken = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = taken.local_addr().unwrap().port();
    let dir = scratch_dir("ddb-taken");
    let Some(started) = OwnDynamoDbLocal::start_on(dir.path(), port).await else {
        return;
    };
    match started {
        Ok(own) => {
            own.stop().await;
            panic!("a listener that is not DynamoDB Local was taken for it");
        }
        Err(error) => assert!(error.contains("it exited"), "{error}"),
    }
}
