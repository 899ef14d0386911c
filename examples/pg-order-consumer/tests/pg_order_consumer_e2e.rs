//! End to end: the compiled pg-order-consumer binary, driven through a Lambda Runtime API
//! emulator, against the PostgreSQL `scripts/test.sh` starts, in both modes: the sample
//! events, a process killed with SIGKILL in the middle of its transaction, and a database
//! unreachable when the process starts.

use lambda_idempotency::tokio_postgres;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lambda_idempotency_test_support as support;
use serde_json::Value;
use support::harness::function;
use support::harness::runtime_api::{batch_failures as failures, Reply, RuntimeApi};
use tokio::process::Child;

fn spawn(api: &RuntimeApi, database_url: &str, mode: &str) -> Child {
    function::spawn(
        env!("CARGO_BIN_EXE_pg-order-consumer"),
        "pg-order-consumer",
        &api.address(),
        &[("DATABASE_URL", database_url), ("IDEMPOTENCY_MODE", mode)],
    )
}

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect to the test database");
    tokio::spawn(connection);
    client
}

async fn balance(client: &tokio_postgres::Client, account: &str) -> i64 {
    client
        .query_opt("SELECT balance FROM ledger WHERE account = $1", &[&account])
        .await
        .unwrap()
        .map_or(0, |row| row.get(0))
}

async fn invoke(api: &RuntimeApi, name: &str) -> Option<Reply> {
    let body: Value = support::load_event_json(name);
    api.invoke(&body, Duration::from_secs(30), Duration::from_secs(60))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_order_consumer_holds_its_contract_in_both_modes() {
    for mode in ["optimistic", "lease"] {
        let Some(url) = support::postgres::fresh_database().await else {
            return;
        };
        let api = RuntimeApi::start().await;
        let _container = spawn(&api, &url, mode);
        assert_eq!(
            failures(invoke(&api, "batch.json").await),
            Vec::<String>::new()
        );
        assert_eq!(
            failures(invoke(&api, "batch_redelivered.json").await),
            Vec::<String>::new(),
            "{mode}"
        );
        assert_eq!(
            failures(invoke(&api, "producer_retry.json").await),
            Vec::<String>::new(),
            "{mode}"
        );
        let poison: Value = support::load_event_json("poison.json");
        let poisoned = poison["Records"][1]["messageId"].as_str().unwrap();
        assert_eq!(
            failures(invoke(&api, "poison.json").await),
            [poisoned],
            "{mode}"
        );
        let tampered: Value = support::load_event_json("tampered.json");
        let loser = tampered["Records"][0]["messageId"].as_str().unwrap();
        assert_eq!(
            failures(invoke(&api, "tampered.json").await),
            [loser],
            "{mode}"
        );
        let client = connect(&url).await;
        assert_eq!(balance(&client, "acct-alice").await, 20, "{mode}");
        assert_eq!(balance(&client, "acct-bob").await, 40, "{mode}");
        assert_eq!(balance(&client, "acct-carol").await, 17, "{mode}");
        assert!(api.init_errors().await.is_empty());
    }
}

/// SIGKILL in the middle of the transaction: the test holds the ledger row, so the
/// function's credit waits inside its transaction; the process is killed there. Nothing of
/// it is applied; a new process gets the redelivery (after the dead lease, in lease mode)
/// and credits once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_killed_in_its_transaction_applies_nothing_and_the_redelivery_once() {
    for mode in ["optimistic", "lease"] {
        let Some(url) = support::postgres::fresh_database().await else {
            return;
        };
        let api = RuntimeApi::start().await;
        let mut doomed = spawn(&api, &url, mode);
        // The first process creates the tables; the ledger row it will credit exists.
        assert_eq!(
            failures(invoke(&api, "producer_retry.json").await),
            Vec::<String>::new()
        );
        let mut holder = connect(&url).await;
        let hold = holder.transaction().await.unwrap();
        hold.execute(
            "INSERT INTO ledger VALUES ('acct-alice', 0) ON CONFLICT (account) DO NOTHING",
            &[],
        )
        .await
        .unwrap();
        hold.execute(
            "SELECT 1 FROM ledger WHERE account = 'acct-alice' FOR UPDATE",
            &[],
        )
        .await
        .unwrap();
        let mut one = support::load_event_json("batch.json");
        one["Records"].as_array_mut().unwrap().truncate(1);
        let invocation = {
            let api = &api;
            let one = one.clone();
            async move {
                api.invoke(&one, Duration::from_secs(4), Duration::from_secs(10))
                    .await
            }
        };
        let killer = async {
            // Long enough for the function to be waiting on the held row.
            tokio::time::sleep(Duration::from_millis(800)).await;
            doomed.start_kill().unwrap();
            doomed.wait().await.unwrap();
        };
        let (reply, ()) = tokio::join!(invocation, killer);
        assert!(
            !matches!(reply, Some(Reply::Response(_))),
            "{mode}: the killed process answered {reply:?}"
        );
        hold.commit().await.unwrap();
        let client = connect(&url).await;
        assert_eq!(
            balance(&client, "acct-alice").await,
            0,
            "{mode}: nothing applied"
        );
        if mode == "lease" {
            // The dead lease ends at its invocation's deadline.
            tokio::time::sleep(Duration::from_secs(4)).await;
        }
        let _fresh = spawn(&api, &url, mode);
        let reply = api
            .invoke(&one, Duration::from_secs(30), Duration::from_secs(60))
            .await;
        assert_eq!(failures(reply), Vec::<String>::new(), "{mode}");
        assert_eq!(
            balance(&client, "acct-alice").await,
            25,
            "{mode}: credited once"
        );
        let again = api
            .invoke(&one, Duration::from_secs(30), Duration::from_secs(60))
            .await;
        assert_eq!(failures(again), Vec::<String>::new(), "{mode}");
        assert_eq!(balance(&client, "acct-alice").await, 25, "{mode}: replayed");
    }
}

/// A loopback door to PostgreSQL: while closed, every connection is cut at once (a database
/// that cannot be reached); open, it relays them.
struct Door {
    url: String,
    open: Arc<AtomicBool>,
}

impl Door {
    /// A door to the database of `url`, closed; its own URL points at it.
    async fn closed(url: &str) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let config: tokio_postgres::Config = url.parse().unwrap();
        let server = match (&config.get_hosts()[0], config.get_ports()[0]) {
            (tokio_postgres::config::Host::Tcp(host), port) => format!("{host}:{port}"),
            other => panic!("a TCP database, not {other:?}"),
        };
        let open = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&open);
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if !flag.load(Ordering::SeqCst) {
                    continue; // dropped: the connection is cut
                }
                let server = server.clone();
                tokio::spawn(async move {
                    let mut upstream = tokio::net::TcpStream::connect(&server).await.unwrap();
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                });
            }
        });
        let (_, rest) = url.split_once('@').expect("user@host in the URL");
        let (_, path) = rest.split_once('/').expect("a database in the URL");
        let user = url.split_once('@').unwrap().0;
        Self {
            url: format!("{user}@{address}/{path}"),
            open,
        }
    }
}

/// A database unreachable when the function starts does not fail its start: it starts, its
/// invocations fail as a whole (the batch is retried) until the database answers, then the
/// batch is applied once and replays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_unreachable_at_start_fails_invocations_not_the_start() {
    for mode in ["optimistic", "lease"] {
        let Some(url) = support::postgres::fresh_database().await else {
            return;
        };
        let door = Door::closed(&url).await;
        let api = RuntimeApi::start().await;
        let mut container = spawn(&api, &door.url, mode);
        for _ in 0..2 {
            let reply = invoke(&api, "batch.json").await;
            assert!(
                matches!(reply, Some(Reply::Error(_))),
                "{mode}: the invocation fails while the database is unreachable: {reply:?}"
            );
        }
        assert!(
            container.try_wait().unwrap().is_none(),
            "{mode}: the process is still running"
        );
        assert!(api.init_errors().await.is_empty(), "{mode}: no init error");
        door.open.store(true, Ordering::SeqCst);
        assert_eq!(
            failures(invoke(&api, "batch.json").await),
            Vec::<String>::new(),
            "{mode}"
        );
        assert_eq!(
            failures(invoke(&api, "batch.json").await),
            Vec::<String>::new(),
            "{mode}: replayed"
        );
        let client = connect(&url).await;
        assert_eq!(balance(&client, "acct-alice").await, 20, "{mode}: once");
        assert_eq!(balance(&client, "acct-bob").await, 40, "{mode}: once");
    }
}
