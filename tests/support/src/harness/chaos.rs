//! Chaos: several function processes ("containers") behind the Lambda Runtime API, fed by a
//! simulated SQS queue with at-least-once delivery, while containers are killed with SIGKILL
//! at random moments, frozen past their deadline (and then killed, as Lambda cuts them off),
//! and messages are delivered again while in flight. The workload mixes producer retries,
//! poison bodies and tampered duplicates of the order consumer's contract (`{"eventId",
//! "account", "amount"}`, keyed by the `Idempotency-Key` attribute or `eventId`, payload
//! validation on the body). At the end the history is checked against the model: every
//! balance is the sum of its unique events, every valid message was acknowledged and none
//! dead-lettered, every poison and losing tampered message was dead-lettered, and each
//! tampered pair applied exactly one amount.
//!
//! The `sequenced` mode (a deployment whose orders carry their account's `sequence`, each
//! credit one conditional write in turn) runs on a simulated SQS FIFO queue
//! instead ([`Queue::fifo`]): one message group per account, in order; no in-flight
//! duplicates (FIFO never hands out a message in flight), but lost acknowledgments
//! (`CHAOS_LOST_ACK_RATE`) besides the kills, so processed batches come back after the
//! visibility timeout. Its model adds that each account's ledger `sequence` is its number of
//! unique events, and tampered twins (same event and sequence, another amount) are
//! acknowledged as already applied, the first one's amount counted.
//!
//! A [`Deployment`] says how to start the function and read a balance, so any order
//! consumer (on DynamoDB, on PostgreSQL) runs the same chaos.

mod sequenced;
mod workload;

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::process::Child;

use super::runtime_api::{Reply, RuntimeApi};
use super::signal;
use super::sqs_sim::{Queue, Rng};

fn requested_modes() -> Option<Vec<String>> {
    let modes = std::env::var("CHAOS_MODES").ok()?;
    let modes: Vec<String> = modes.split(',').map(|m| m.trim().to_string()).collect();
    for mode in &modes {
        assert!(
            ["optimistic", "lease", "sequenced"].contains(&mode.as_str()),
            "unknown mode {mode}"
        );
    }
    Some(modes)
}

/// The record modes to run (`optimistic`, `lease`), from `CHAOS_MODES` (default
/// `optimistic,lease`). `sequenced` is accepted there too, and left to [`sequenced_mode`].
pub fn modes() -> Vec<&'static str> {
    let Some(modes) = requested_modes() else {
        return vec!["optimistic", "lease"];
    };
    ["optimistic", "lease"]
        .into_iter()
        .filter(|mode| modes.iter().any(|m| m == mode))
        .collect()
}

/// Whether to run the `sequenced` mode, for a deployment that has it: when `CHAOS_MODES`
/// names it, or is unset.
pub fn sequenced_mode() -> bool {
    requested_modes().is_none_or(|modes| modes.iter().any(|m| m == "sequenced"))
}

/// The function under fire: how to start one process of it and read the ledger.
pub trait Deployment: Clone + Send + Sync + 'static {
    /// Its name, for the summary line.
    fn name(&self) -> &'static str;
    /// Starts one process polling `runtime_api`, in `mode` (killed when dropped), with its
    /// default settings: invocations last 3 s, Lambda's default timeout.
    fn spawn(&self, runtime_api: &str, mode: &str) -> Child;
    /// The balance of `account` (0 when it has none).
    fn balance(&self, account: &str) -> impl Future<Output = i64> + Send;
    /// The `sequence` of `account`'s ledger item (0 when it has none), for the `sequenced`
    /// mode: a deployment without that mode need not answer.
    fn sequence(&self, account: &str) -> impl Future<Output = u64> + Send {
        let (name, account) = (self.name(), account.to_string());
        async move { panic!("{name} has no sequenced mode (asked for {account}'s sequence)") }
    }
}

/// Time a container gets per invocation (the function timeout): Lambda's default, 3 s.
const DEADLINE: Duration = Duration::from_secs(3);
/// The queue's visibility timeout: past an invocation's deadline and the harness's wait for
/// a late answer, as Lambda requires it to be at least the function's timeout.
const VISIBILITY: Duration = Duration::from_millis(3500);
/// Receives before a message is dead-lettered.
const MAX_RECEIVES: u32 = 6;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The run's settings, from the environment (`CHAOS_*`).
#[derive(Debug, Clone)]
pub struct Settings {
    seed: u64,
    events: usize,
    containers: usize,
    kill_rate: f64,
    freeze_rate: f64,
    duplicate_rate: f64,
    lost_ack_rate: f64,
    time_limit: Duration,
}

impl Settings {
    /// The run's seed (`CHAOS_SEED`), for anything else the run draws (a fault proxy's).
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The settings from `CHAOS_SEED`, `CHAOS_EVENTS`, `CHAOS_CONTAINERS`,
    /// `CHAOS_KILL_RATE`, `CHAOS_FREEZE_RATE`, `CHAOS_DUPLICATE_RATE` (in-flight duplicates,
    /// standard queue), `CHAOS_LOST_ACK_RATE` (answered batches whose acknowledgment is lost,
    /// FIFO queue) and `CHAOS_TIME_LIMIT_SECS`, with CI's bounded defaults.
    pub fn from_env() -> Self {
        Self {
            seed: env_or("CHAOS_SEED", 1),
            events: env_or("CHAOS_EVENTS", 40),
            containers: env_or("CHAOS_CONTAINERS", 3),
            kill_rate: env_or("CHAOS_KILL_RATE", 0.12),
            freeze_rate: env_or("CHAOS_FREEZE_RATE", 0.05),
            duplicate_rate: env_or("CHAOS_DUPLICATE_RATE", 0.2),
            // Lower than the in-flight duplicates: a lost acknowledgment counts as a receive
            // for the whole batch, and 6 receives dead-letter a message.
            lost_ack_rate: env_or("CHAOS_LOST_ACK_RATE", 0.05),
            time_limit: Duration::from_secs(env_or("CHAOS_TIME_LIMIT_SECS", 240)),
        }
    }
}

#[derive(Debug, Default)]
struct Counters {
    invocations: AtomicU64,
    kills: AtomicU64,
    freezes: AtomicU64,
    cut_off: AtomicU64,
    restarts: AtomicU64,
    lost_acks: AtomicU64,
}

/// One container slot: receives batches, invokes its function process, acknowledges
/// what the response allows, and suffers the chaos.
async fn run_container<D: Deployment>(
    slot: usize,
    queue: Arc<Queue>,
    deployment: D,
    mode: &'static str,
    settings: Settings,
    stop: Arc<AtomicBool>,
    counters: Arc<Counters>,
) {
    let mut rng = Rng::new(settings.seed.wrapping_mul(31).wrapping_add(slot as u64));
    let mut api = RuntimeApi::start().await;
    let mut child = deployment.spawn(&api.address(), mode);
    while !stop.load(Ordering::SeqCst) {
        let Some(event) = queue.receive(10, rng.chance(settings.duplicate_rate)) else {
            tokio::time::sleep(Duration::from_millis(25)).await;
            continue;
        };
        counters.invocations.fetch_add(1, Ordering::SeqCst);
        let pid = child.id().expect("running container");
        let kill = rng.chance(settings.kill_rate);
        let freeze = !kill && rng.chance(settings.freeze_rate);
        if kill {
            counters.kills.fetch_add(1, Ordering::SeqCst);
            let delay = Duration::from_millis(rng.below(50));
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                signal(pid, "-KILL");
            });
        } else if freeze {
            counters.freezes.fetch_add(1, Ordering::SeqCst);
            let delay = Duration::from_millis(rng.below(60));
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                signal(pid, "-STOP");
            });
        }
        let reply = api
            .invoke(&event, DEADLINE, DEADLINE + Duration::from_millis(300))
            .await;
        match &reply {
            Some(Reply::Response(_)) if queue.is_fifo() && rng.chance(settings.lost_ack_rate) => {
                // Answered, but the deletion is lost: the batch comes back after the
                // visibility timeout (a FIFO queue's source of duplicates).
                counters.lost_acks.fetch_add(1, Ordering::SeqCst);
            }
            Some(Reply::Response(body)) => {
                let failed: BTreeSet<&str> = body["batchItemFailures"]
                    .as_array()
                    .map(|f| {
                        f.iter()
                            .filter_map(|f| f["itemIdentifier"].as_str())
                            .collect()
                    })
                    .unwrap_or_default();
                let ids = event["Records"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|r| r["messageId"].as_str())
                    .filter(|id| !failed.contains(id));
                queue.ack(ids);
            }
            Some(Reply::Error(_)) => {}
            None => {
                // No answer by the deadline: Lambda cuts the container off; the batch
                // comes back after the visibility timeout.
                counters.cut_off.fetch_add(1, Ordering::SeqCst);
            }
        }
        let exited = child.try_wait().ok().flatten().is_some();
        if reply.is_none() || exited || kill || freeze {
            signal(pid, "-KILL");
            let _ = child.wait().await;
            api = RuntimeApi::start().await;
            child = deployment.spawn(&api.address(), mode);
            counters.restarts.fetch_add(1, Ordering::SeqCst);
        }
    }
    let _ = child.kill().await;
}

/// One chaos run of `deployment` in `mode` (`optimistic` or `lease` on a standard queue,
/// `sequenced` on a FIFO queue): the workload through the simulated queue into
/// `settings.containers` processes under fire, then the history checked against the model
/// (panics with what broke).
pub async fn chaos_run<D: Deployment>(deployment: D, mode: &'static str, settings: &Settings) {
    let fifo = mode == "sequenced";
    let queue = Arc::new(if fifo {
        Queue::fifo(VISIBILITY, MAX_RECEIVES)
    } else {
        Queue::new(VISIBILITY, MAX_RECEIVES)
    });
    let mut rng = Rng::new(settings.seed);
    let workload = if fifo {
        sequenced::send(&queue, settings, &mut rng)
    } else {
        workload::send(&queue, settings, &mut rng)
    };
    let stop = Arc::new(AtomicBool::new(false));
    let counters = Arc::new(Counters::default());
    let started = Instant::now();
    let slots: Vec<_> = (0..settings.containers)
        .map(|slot| {
            tokio::spawn(run_container(
                slot,
                queue.clone(),
                deployment.clone(),
                mode,
                settings.clone(),
                stop.clone(),
                counters.clone(),
            ))
        })
        .collect();
    while !queue.is_drained() && started.elapsed() < settings.time_limit {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for slot in slots {
        slot.await.expect("container slot");
    }
    let elapsed = started.elapsed();
    let stats = queue.stats();
    assert!(
        queue.is_drained(),
        "{mode}: queue not drained within {:?}: {stats:?}",
        settings.time_limit
    );

    // The history against the model.
    let dead: BTreeSet<String> = queue.dead_letters().into_iter().collect();
    let acked: BTreeSet<String> = queue.acked().into_iter().collect();
    for id in &workload.valid {
        assert!(
            acked.contains(id),
            "{mode}: valid message {id} not acknowledged"
        );
        assert!(
            !dead.contains(id),
            "{mode}: valid message {id} dead-lettered"
        );
    }
    for id in &workload.poison {
        assert!(
            dead.contains(id),
            "{mode}: poison message {id} not dead-lettered"
        );
    }
    for (account, [(a_id, a), (b_id, b)]) in &workload.tampered {
        let applied = deployment.balance(account).await;
        let (winner, loser, amount) = if acked.contains(a_id) {
            (a_id, b_id, *a)
        } else {
            (b_id, a_id, *b)
        };
        assert!(
            acked.contains(winner),
            "{mode}: neither of {account}'s pair acknowledged"
        );
        assert!(
            dead.contains(loser),
            "{mode}: {account}'s losing twin not dead-lettered"
        );
        assert_eq!(
            applied, amount,
            "{mode}: {account} must apply exactly one amount"
        );
    }
    for (account, expected) in &workload.expected {
        let actual = deployment.balance(account).await;
        assert_eq!(actual, *expected, "{mode}: balance of {account}");
    }
    for (account, expected) in &workload.sequences {
        let actual = deployment.sequence(account).await;
        assert_eq!(actual, *expected, "{mode}: sequence of {account}");
    }
    if fifo {
        eprintln!(
            "chaos {} {mode} seed={} containers={}: {} messages ({} valid with {} tampered twins, {} poison) in {} groups \
             on a FIFO queue drained in {:.1}s; {} deliveries, {} lost acknowledgments, {} invocations, {} SIGKILLs, \
             {} freezes, {} cut off at the deadline, {} restarts; {} acknowledged ({} received more than once), \
             {} dead-lettered; every balance and sequence matches the model",
            deployment.name(),
            settings.seed,
            settings.containers,
            stats.sent,
            workload.valid.len(),
            workload.twins,
            workload.poison.len(),
            workload.groups,
            elapsed.as_secs_f64(),
            stats.deliveries,
            counters.lost_acks.load(Ordering::SeqCst),
            counters.invocations.load(Ordering::SeqCst),
            counters.kills.load(Ordering::SeqCst),
            counters.freezes.load(Ordering::SeqCst),
            counters.cut_off.load(Ordering::SeqCst),
            counters.restarts.load(Ordering::SeqCst),
            stats.acked,
            stats.redelivered,
            stats.dead,
        );
        return;
    }
    eprintln!(
        "chaos {} {mode} seed={} containers={}: {} messages ({} valid, {} poison, {} tampered pairs) drained in {:.1}s; \
         {} deliveries ({} in-flight duplicates), {} invocations, {} SIGKILLs, {} freezes, {} cut off at the deadline, {} restarts; \
         {} acknowledged, {} dead-lettered; every balance matches the model",
        deployment.name(),
        settings.seed,
        settings.containers,
        stats.sent,
        workload.valid.len(),
        workload.poison.len(),
        workload.tampered.len(),
        elapsed.as_secs_f64(),
        stats.deliveries,
        stats.in_flight_duplicates,
        counters.invocations.load(Ordering::SeqCst),
        counters.kills.load(Ordering::SeqCst),
        counters.freezes.load(Ordering::SeqCst),
        counters.cut_off.load(Ordering::SeqCst),
        counters.restarts.load(Ordering::SeqCst),
        stats.acked,
        stats.dead,
    );
}
