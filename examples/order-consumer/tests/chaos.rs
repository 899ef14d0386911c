//! Chaos on the order-consumer binary against DynamoDB Local: see the harness
//! (`lambda_idempotency_test_support::harness::chaos`) for what is done and checked. The
//! record modes (`optimistic`, `lease`) run on a simulated standard queue, the
//! sequence-guarded mode (`IDEMPOTENCY_MODE=sequenced`) on a simulated FIFO queue, one
//! message group per account. Every mode runs with the binary's default settings under
//! Lambda's default 3 s timeout, and its DynamoDB requests go through a fault proxy
//! ([`STORE_FAULTS`]: throttling, 5xx answers, slow answers, connections dropped before a
//! request is applied and after, its answer lost) besides the kills.
//!
//! CI runs a bounded run. A longer soak, reproducible from its seed:
//! `CHAOS_SEED=7 CHAOS_EVENTS=400 CHAOS_CONTAINERS=4 scripts/soak.sh`
//! (settings: `CHAOS_SEED`, `CHAOS_EVENTS`, `CHAOS_CONTAINERS`, `CHAOS_KILL_RATE`,
//! `CHAOS_FREEZE_RATE`, `CHAOS_DUPLICATE_RATE`, `CHAOS_LOST_ACK_RATE`, `CHAOS_MODES`
//! (default `optimistic,lease,sequenced`), `CHAOS_TIME_LIMIT_SECS`, and
//! `CHAOS_STORE_FAULTS=0` to send the requests to DynamoDB Local without faults).
mod container;

use std::sync::Arc;
use std::time::Duration;

use lambda_idempotency_test_support as support;
use order_consumer::{Tables, SEQUENCE_ATTRIBUTE};
use support::dynamodb::{balance, create_table, create_table_keyed, sequence};
use support::harness::chaos::{chaos_run, modes, sequenced_mode, Deployment, Settings};
use support::harness::fault_proxy::{FaultProxy, FaultRates};
use tokio::process::Child;
use tokio::sync::Mutex;

/// How often each store fault strikes a DynamoDB request (the SDK retries throttling, 5xx
/// answers and dropped connections itself, up to 3 attempts; a slow answer is held back past
/// its 2 s attempt timeout, and the invocation's deadline bounds the whole call).
const STORE_FAULTS: FaultRates = FaultRates {
    throttle: 0.03,
    server_error: 0.03,
    slow: 0.01,
    drop_before: 0.02,
    drop_after: 0.03,
};

/// One run at a time: the two tests share the machine's cores and DynamoDB Local, and a
/// starved container misses its deadline.
static ONE_RUN: Mutex<()> = Mutex::const_new(());

#[derive(Clone)]
struct OnDynamoDb {
    client: aws_sdk_dynamodb::Client,
    tables: Tables,
    /// The fault proxy the containers' requests go through (none: straight to DynamoDB
    /// Local).
    proxy: Option<Arc<FaultProxy>>,
}

impl Deployment for OnDynamoDb {
    fn name(&self) -> &'static str {
        "order-consumer"
    }

    fn spawn(&self, runtime_api: &str, mode: &str) -> Child {
        match &self.proxy {
            Some(proxy) => {
                container::spawn_with_endpoint(runtime_api, &self.tables, mode, &proxy.endpoint())
            }
            None => container::spawn(runtime_api, &self.tables, mode),
        }
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

async fn deployment(settings: &Settings) -> Option<OnDynamoDb> {
    let client = support::dynamodb::client().await?;
    let tables = Tables {
        idempotency: create_table(&client).await,
        ledger: create_table_keyed(&client, "ledger", "account").await,
    };
    let proxy = match std::env::var("CHAOS_STORE_FAULTS").as_deref() {
        Ok("0") => None,
        _ => {
            let endpoint = std::env::var("AWS_ENDPOINT_URL_DYNAMODB").ok()?;
            let proxy = FaultProxy::start(&endpoint, settings.seed()).await;
            proxy.set_rates(STORE_FAULTS);
            proxy.set_slow_by(Duration::from_millis(2500));
            Some(Arc::new(proxy))
        }
    };
    Some(OnDynamoDb {
        client,
        tables,
        proxy,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chaos_history_matches_the_model() {
    let settings = Settings::from_env();
    for mode in modes() {
        let _one = ONE_RUN.lock().await;
        let Some(deployment) = deployment(&settings).await else {
            return;
        };
        run(deployment, mode, &settings).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn chaos_sequenced_on_a_fifo_queue_matches_the_model() {
    if !sequenced_mode() {
        return;
    }
    let settings = Settings::from_env();
    let _one = ONE_RUN.lock().await;
    let Some(deployment) = deployment(&settings).await else {
        return;
    };
    run(deployment, "sequenced", &settings).await;
}

/// One chaos run, then what the store faults did.
async fn run(deployment: OnDynamoDb, mode: &'static str, settings: &Settings) {
    let proxy = deployment.proxy.clone();
    chaos_run(deployment, mode, settings).await;
    if let Some(proxy) = proxy {
        eprintln!("{mode}: store faults: {}", proxy.counts.summary());
    }
}
