//! Kills at the commit, in process (the invocation's future dropped where a killed process
//! would stop, its connection closed) and a lost answer to the `COMMIT` (a proxy that
//! forwards it and then cuts the connection), in both modes, with pg-order-consumer's
//! wiring: the ledger moves exactly once.

use lambda_idempotency::{aws_lambda_events, tokio_postgres};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lambda_idempotency::batch::BatchReport;
use lambda_idempotency::key::IdempotencyKey;
use lambda_idempotency::record::{Record, Status};
use lambda_idempotency::store::{PostgresStore, Store};
use lambda_idempotency::{CommitStrategy, Outcome};
use lambda_idempotency_test_support as support;
use pg_order_consumer::{connect, processor, Applied, Settings, Tables, KEY_PREFIX};
use support::faulty_store::{FaultyStore, Inject};
use support::{invocation, load_event, outcomes, reported};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const MODES: [CommitStrategy; 2] = [CommitStrategy::Lease, CommitStrategy::Optimistic];
const REMAINING: Duration = Duration::from_secs(3);

fn first_order() -> lambda_runtime::LambdaEvent<aws_lambda_events::sqs::SqsEvent> {
    let mut event = load_event("batch.json");
    event.records.truncate(1);
    invocation(event, std::time::SystemTime::now(), REMAINING)
}

/// The first order's message, in `events/batch.json`.
const MESSAGE: &str = "0b1f5a52-7d3e-4c1a-9f60-2a51c1d0e001";

/// The one record was answered `outcome` and acknowledged.
#[track_caller]
fn acknowledged(report: &BatchReport<Applied>, outcome: Outcome, mode: CommitStrategy) {
    assert_eq!(outcomes(report), [outcome], "{mode:?}");
    assert!(reported(report).is_empty(), "{mode:?}");
}

/// The record is completed and holds no lease.
#[track_caller]
fn assert_completed(record: &Record, mode: CommitStrategy) {
    assert_eq!(record.status, Status::Completed, "{mode:?}");
    assert_eq!(record.lease_expiration_ms, None, "{mode:?}: no lease");
    assert!(record.owner.is_some(), "{mode:?}");
}

async fn balance(store: &PostgresStore) -> i64 {
    let client = store.pool().get().await.unwrap();
    client
        .query_opt(
            "SELECT balance FROM ledger WHERE account = 'acct-alice'",
            &[],
        )
        .await
        .unwrap()
        .map_or(0, |row| row.get(0))
}

struct Rig {
    store: PostgresStore,
    faulty: FaultyStore<PostgresStore>,
    settings: Settings,
}

impl Rig {
    async fn new(url: &str, mode: CommitStrategy) -> Self {
        let store = connect(url).expect("a pool");
        Tables::default().ensure(&store).await.expect("the tables");
        let faulty = FaultyStore::new(store.clone());
        let mut settings = Settings::new(url, mode);
        settings.deadline_margin = Duration::from_millis(500);
        Self {
            store,
            faulty,
            settings,
        }
    }

    async fn deliver(&self) -> BatchReport<Applied> {
        processor(self.faulty.clone(), &self.settings)
            .expect("a pool with room for transactions")
            .process(first_order())
            .await
    }

    /// The first order's idempotency record, as stored.
    async fn record(&self) -> Option<Record> {
        let key = IdempotencyKey::derive(KEY_PREFIX, b"evt-1001");
        self.store.get(&key).await.unwrap()
    }

    /// Delivers with `fault` armed on the write that commits the transaction: the
    /// invocation "dies" where it strikes (the fault never lets it answer, and its future
    /// is dropped after a second).
    async fn deliver_and_die(&self, fault: Inject) {
        self.faulty.inject(fault);
        let processor = processor(self.faulty.clone(), &self.settings)
            .expect("a pool with room for transactions");
        let run = processor.process(first_order());
        let died = tokio::time::timeout(Duration::from_secs(1), run).await;
        assert!(died.is_err(), "it did not die");
        assert!(self.faulty.pending().is_empty(), "the fault struck");
    }
}

#[tokio::test]
async fn a_kill_before_the_commit_applies_nothing_and_the_redelivery_once() {
    for mode in MODES {
        let Some(url) = support::postgres::fresh_database().await else {
            return;
        };
        let rig = Rig::new(&url, mode).await;
        rig.deliver_and_die(Inject::CommitNeverSent).await;
        assert_eq!(balance(&rig.store).await, 0, "{mode:?}");
        let dead_owner = if mode == CommitStrategy::Lease {
            // The dead lease holds until its invocation's deadline.
            let held = rig.record().await.expect("the dead invocation's lease");
            assert_eq!(held.status, Status::InProgress);
            assert!(held.lease_expiration_ms.is_some());
            let report = rig.deliver().await;
            assert_eq!(outcomes(&report), [Outcome::Locked]);
            assert_eq!(reported(&report), [MESSAGE]);
            assert_eq!(rig.record().await, Some(held.clone()), "untouched");
            tokio::time::sleep(REMAINING).await;
            held.owner
        } else {
            assert_eq!(rig.record().await, None, "nothing before the commit");
            None
        };
        acknowledged(&rig.deliver().await, Outcome::Executed, mode);
        let committed = rig.record().await.expect("a record");
        assert_completed(&committed, mode);
        assert_ne!(committed.owner, dead_owner, "{mode:?}: the redelivery's");
        assert_eq!(balance(&rig.store).await, 25, "{mode:?}");
        acknowledged(&rig.deliver().await, Outcome::Replayed, mode);
        assert_eq!(rig.record().await, Some(committed), "{mode:?}: unchanged");
        assert_eq!(balance(&rig.store).await, 25, "{mode:?}");
    }
}

#[tokio::test]
async fn a_kill_after_the_commit_replays_on_redelivery() {
    for mode in MODES {
        let Some(url) = support::postgres::fresh_database().await else {
            return;
        };
        let rig = Rig::new(&url, mode).await;
        rig.deliver_and_die(Inject::CommitAppliedThenDies).await;
        assert_eq!(balance(&rig.store).await, 25, "{mode:?}");
        let committed = rig.record().await.expect("a record");
        assert_completed(&committed, mode);
        acknowledged(&rig.deliver().await, Outcome::Replayed, mode);
        assert_eq!(rig.record().await, Some(committed), "{mode:?}: unchanged");
        assert_eq!(balance(&rig.store).await, 25, "{mode:?}");
    }
}

/// A loopback proxy to PostgreSQL that, when armed, forwards the next `COMMIT` and then cuts
/// that connection without relaying the answer.
struct CommitCutter {
    address: String,
    armed: Arc<AtomicBool>,
}

impl CommitCutter {
    async fn start(server: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let armed = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&armed);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let upstream = TcpStream::connect(&server).await.unwrap();
                tokio::spawn(relay(client, upstream, Arc::clone(&flag)));
            }
        });
        Self { address, armed }
    }
}

async fn read_message(from: &mut (impl AsyncReadExt + Unpin), typed: bool) -> Option<Vec<u8>> {
    let mut message = Vec::new();
    if typed {
        message.push(from.read_u8().await.ok()?);
    }
    let length = from.read_u32().await.ok()?;
    message.extend_from_slice(&length.to_be_bytes());
    let mut body = vec![0; (length as usize).checked_sub(4)?];
    from.read_exact(&mut body).await.ok()?;
    message.extend_from_slice(&body);
    Some(message)
}

async fn relay(client: TcpStream, upstream: TcpStream, armed: Arc<AtomicBool>) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut upstream_read, mut upstream_write) = upstream.into_split();
    let answers = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut upstream_read, &mut client_write).await;
    });
    // The startup: an optional SSLRequest, then the startup message, both untyped.
    let Some(first) = read_message(&mut client_read, false).await else {
        return;
    };
    let ssl_request = first.len() == 8 && first[4..8] == 80_877_103u32.to_be_bytes();
    if upstream_write.write_all(&first).await.is_err() {
        return;
    }
    if ssl_request {
        let Some(startup) = read_message(&mut client_read, false).await else {
            return;
        };
        if upstream_write.write_all(&startup).await.is_err() {
            return;
        }
    }
    while let Some(message) = read_message(&mut client_read, true).await {
        let commit = message[0] == b'Q' && message[5..].starts_with(b"COMMIT");
        if commit && armed.swap(false, Ordering::SeqCst) {
            // Nothing more reaches the client; the server gets the COMMIT, commits, and its
            // answer is lost with the connection.
            answers.abort();
            let _ = upstream_write.write_all(&message).await;
            tokio::time::sleep(Duration::from_millis(300)).await;
            return;
        }
        if upstream_write.write_all(&message).await.is_err() {
            break;
        }
    }
    answers.abort();
}

#[tokio::test]
async fn a_commit_whose_answer_was_lost_is_recognised_and_applied_once() {
    for mode in MODES {
        let Some(url) = support::postgres::fresh_database().await else {
            return;
        };
        let config: tokio_postgres::Config = url.parse().unwrap();
        let tokio_postgres::config::Host::Tcp(host) = &config.get_hosts()[0] else {
            panic!("a TCP host");
        };
        let server = format!("{host}:{}", config.get_ports()[0]);
        let cutter = CommitCutter::start(server).await;
        let (_, database) = url.rsplit_once('/').unwrap();
        let proxied = format!("postgres://postgres@{}/{database}", cutter.address);
        let rig = Rig::new(&proxied, mode).await;
        cutter.armed.store(true, Ordering::SeqCst);
        let report = rig.deliver().await;
        assert!(
            !cutter.armed.load(Ordering::SeqCst),
            "{mode:?}: a COMMIT was cut"
        );
        acknowledged(&report, Outcome::Executed, mode);
        assert_eq!(balance(&rig.store).await, 25, "{mode:?}");
        let committed = rig.record().await.expect("a record");
        assert_completed(&committed, mode);
        acknowledged(&rig.deliver().await, Outcome::Replayed, mode);
        assert_eq!(rig.record().await, Some(committed), "{mode:?}: unchanged");
        assert_eq!(balance(&rig.store).await, 25, "{mode:?}");
    }
}
