//! Chaos on the pg-order-consumer binary against the PostgreSQL `scripts/test.sh` starts:
//! the order-consumer's chaos (`lambda_idempotency_test_support::harness::chaos`: SIGKILLs,
//! freezes past the deadline, in-flight duplicates, producer retries, poison and tampered
//! messages), its history checked against the model. `CHAOS_*` settings as there.

use lambda_idempotency::tokio_postgres;
use lambda_idempotency_test_support as support;
use support::harness::chaos::{chaos_run, modes, Deployment, Settings};
use support::harness::function;
use tokio::process::Child;

#[derive(Clone)]
struct OnPostgres {
    database_url: String,
}

impl Deployment for OnPostgres {
    fn name(&self) -> &'static str {
        "pg-order-consumer"
    }

    fn spawn(&self, runtime_api: &str, mode: &str) -> Child {
        function::spawn(
            env!("CARGO_BIN_EXE_pg-order-consumer"),
            "pg-order-consumer",
            runtime_api,
            &[
                ("DATABASE_URL", &self.database_url),
                ("IDEMPOTENCY_MODE", mode),
            ],
        )
    }

    async fn balance(&self, account: &str) -> i64 {
        let (client, connection) =
            tokio_postgres::connect(&self.database_url, tokio_postgres::NoTls)
                .await
                .expect("connect to the test database");
        tokio::spawn(connection);
        client
            .query_opt("SELECT balance FROM ledger WHERE account = $1", &[&account])
            .await
            .expect("read the ledger")
            .map_or(0, |row| row.get(0))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chaos_history_matches_the_model() {
    let settings = Settings::from_env();
    for mode in modes() {
        let Some(database_url) = support::postgres::fresh_database().await else {
            return;
        };
        chaos_run(OnPostgres { database_url }, mode, &settings).await;
    }
}
