//! Chaos on the order-consumer binary against DynamoDB Local: see the harness
//! (`lambda_idempotency_test_support::harness::chaos`) for what is done and checked.
//!
//! CI runs a bounded run. A longer soak, reproducible from its seed:
//! `CHAOS_SEED=7 CHAOS_EVENTS=400 CHAOS_CONTAINERS=4 scripts/soak.sh`
//! (settings: `CHAOS_SEED`, `CHAOS_EVENTS`, `CHAOS_CONTAINERS`, `CHAOS_KILL_RATE`,
//! `CHAOS_FREEZE_RATE`, `CHAOS_DUPLICATE_RATE`, `CHAOS_MODES`, `CHAOS_TIME_LIMIT_SECS`).
mod container;

use lambda_idempotency_test_support as support;
use order_consumer::Tables;
use support::dynamodb::{balance, create_table, create_table_keyed};
use support::harness::chaos::{chaos_run, modes, Deployment, Settings};
use tokio::process::Child;

#[derive(Clone)]
struct OnDynamoDb {
    client: aws_sdk_dynamodb::Client,
    tables: Tables,
}

impl Deployment for OnDynamoDb {
    fn name(&self) -> &'static str {
        "order-consumer"
    }

    fn spawn(&self, runtime_api: &str, mode: &str) -> Child {
        container::spawn(runtime_api, &self.tables, mode)
    }

    async fn balance(&self, account: &str) -> i64 {
        balance(&self.client, &self.tables.ledger, account).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chaos_history_matches_the_model() {
    let settings = Settings::from_env();
    for mode in modes() {
        let Some(client) = support::dynamodb::client().await else {
            return;
        };
        let tables = Tables {
            idempotency: create_table(&client).await,
            ledger: create_table_keyed(&client, "ledger", "account").await,
        };
        chaos_run(OnDynamoDb { client, tables }, mode, &settings).await;
    }
}
