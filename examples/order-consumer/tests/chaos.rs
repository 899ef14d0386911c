//! Chaos on the order-consumer binary against DynamoDB Local: see the harness
//! (`lambda_idempotency_test_support::harness::chaos`) for what is done and checked. The
//! record modes (`optimistic`, `lease`) run on a simulated standard queue, the
//! sequence-guarded mode (`IDEMPOTENCY_MODE=sequenced`) on a simulated FIFO queue, one
//! message group per account.
//!
//! CI runs a bounded run. A longer soak, reproducible from its seed:
//! `CHAOS_SEED=7 CHAOS_EVENTS=400 CHAOS_CONTAINERS=4 scripts/soak.sh`
//! (settings: `CHAOS_SEED`, `CHAOS_EVENTS`, `CHAOS_CONTAINERS`, `CHAOS_KILL_RATE`,
//! `CHAOS_FREEZE_RATE`, `CHAOS_DUPLICATE_RATE`, `CHAOS_LOST_ACK_RATE`, `CHAOS_MODES`
//! (default `optimistic,lease,sequenced`), `CHAOS_TIME_LIMIT_SECS`).
mod container;

use lambda_idempotency_test_support as support;
use order_consumer::{Tables, SEQUENCE_ATTRIBUTE};
use support::dynamodb::{balance, create_table, create_table_keyed, sequence};
use support::harness::chaos::{chaos_run, modes, sequenced_mode, Deployment, Settings};
use tokio::process::Child;
use tokio::sync::Mutex;

/// One run at a time: the two tests share the machine's cores and DynamoDB Local, and a
/// starved container misses its deadline.
static ONE_RUN: Mutex<()> = Mutex::const_new(());

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

    async fn sequence(&self, account: &str) -> u64 {
        sequence(
            &self.client,
            &self.tables.ledger,
            account,
            SEQUENCE_ATTRIBUTE,
        )
        .await
    }
}

async fn deployment() -> Option<OnDynamoDb> {
    let client = support::dynamodb::client().await?;
    let tables = Tables {
        idempotency: create_table(&client).await,
        ledger: create_table_keyed(&client, "ledger", "account").await,
    };
    Some(OnDynamoDb { client, tables })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chaos_history_matches_the_model() {
    let settings = Settings::from_env();
    for mode in modes() {
        let _one = ONE_RUN.lock().await;
        let Some(deployment) = deployment().await else {
            return;
        };
        chaos_run(deployment, mode, &settings).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chaos_sequenced_on_a_fifo_queue_matches_the_model() {
    if !sequenced_mode() {
        return;
    }
    let settings = Settings::from_env();
    let _one = ONE_RUN.lock().await;
    let Some(deployment) = deployment().await else {
        return;
    };
    chaos_run(deployment, "sequenced", &settings).await;
}
