//! Property tests: the pure decision logic, and `InMemoryStore` against a naive model under
//! random operation sequences and clock moves.

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lambda_idempotency::clock::{epoch_ms, epoch_secs, Clock, ManualClock};
use lambda_idempotency::key::IdempotencyKey;
use lambda_idempotency::key::PayloadHash;
use lambda_idempotency::record::{decide, Decision, OwnerToken, Record, Status};
use lambda_idempotency::store::{
    Acquire, AcquireRequest, CompleteRequest, Fenced, InMemoryStore, Store,
};
use proptest::prelude::*;

const BASE_MS: u64 = 1_700_000_000_000;

fn at_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

fn status() -> impl Strategy<Value = Status> {
    prop_oneof![
        Just(Status::InProgress),
        Just(Status::Completed),
        Just(Status::Failed)
    ]
}

prop_compose! {
    fn record()(
        status in status(),
        expiration_offset_secs in -100i64..100,
        lease_offset_ms in proptest::option::of(-100_000i64..100_000),
        validation in proptest::option::of(prop_oneof![Just("v2:a".to_string()), Just("v2:b".to_string())]),
    ) -> Record {
        let base_secs = (BASE_MS / 1000) as i64;
        Record {
            key: IdempotencyKey::from_stored("p#k"),
            status,
            expiration_secs: (base_secs + expiration_offset_secs) as u64,
            lease_expiration_ms: lease_offset_ms.map(|o| (BASE_MS as i64 + o) as u64),
            owner: Some(OwnerToken::new("o")),
            data: (status != Status::InProgress).then(|| "1".to_string()),
            validation,
        }
    }
}

proptest! {
    /// A completed record that still counts is never run again: it replays or is rejected.
    #[test]
    fn live_completed_records_never_run_again(
        mut r in record(), now_off in 0u64..50_000, remaining_secs in 0u64..100,
        ours in proptest::option::of(prop_oneof![Just("v2:a".to_string()), Just("v2:b".to_string())]),
    ) {
        let now = at_ms(BASE_MS + now_off);
        r.status = Status::Completed;
        r.expiration_secs = epoch_secs(now) + remaining_secs;
        let ours = ours.map(PayloadHash::new);
        let decision = decide(&r, now, ours.as_ref());
        let allowed = matches!(decision, Decision::Replay { .. } | Decision::PayloadMismatch);
        prop_assert!(allowed, "decision {:?}", decision);
    }

    /// An expired record never blocks: the acquire is retried (it should have won).
    #[test]
    fn expired_records_never_block(mut r in record(), now_off in 0u64..200_000, ago_secs in 1u64..100) {
        let now = at_ms(BASE_MS + now_off);
        r.expiration_secs = epoch_secs(now) - ago_secs;
        prop_assert!(r.is_expired(now));
        prop_assert_eq!(decide(&r, now, None), Decision::Retry);
    }

    /// An in-progress record whose lease elapsed never blocks.
    #[test]
    fn elapsed_leases_never_block(mut r in record(), now_off in 0u64..200_000, ago_ms in 1u64..100_000) {
        let now = at_ms(BASE_MS + now_off);
        r.status = Status::InProgress;
        r.lease_expiration_ms = Some(epoch_ms(now) - ago_ms);
        prop_assert!(r.lease_elapsed(now));
        prop_assert_eq!(decide(&r, now, Some(&PayloadHash::new("v2:a"))), Decision::Retry);
    }

    /// `InProgress` only for a live lease; `Replay` only for completed records.
    #[test]
    fn decisions_match_the_record_state(r in record(), now_off in 0u64..200_000) {
        let now = at_ms(BASE_MS + now_off);
        let ours = r.validation.clone().map(PayloadHash::new);
        match decide(&r, now, ours.as_ref()) {
            Decision::InProgress => {
                prop_assert_eq!(r.status, Status::InProgress);
                prop_assert!(!r.can_be_taken_over(now));
            }
            Decision::Replay { data } => {
                prop_assert_eq!(r.status, Status::Completed);
                prop_assert_eq!(data, r.data.clone());
            }
            Decision::ReplayFailure { data } => {
                prop_assert_eq!(r.status, Status::Failed);
                prop_assert_eq!(data, r.data.clone());
            }
            Decision::Retry => prop_assert!(r.can_be_taken_over(now)),
            Decision::PayloadMismatch => prop_assert!(false, "same validation cannot mismatch"),
        }
    }
}

/// A naive model of one key's record.
#[derive(Debug, Clone, PartialEq)]
struct ModelRecord {
    completed: bool,
    expiration_secs: u64,
    lease_ms: Option<u64>,
    owner: usize,
    data: Option<String>,
}

#[derive(Debug, Clone)]
enum Op {
    Acquire {
        owner: usize,
        lease_ms: u64,
        window_secs: u64,
    },
    Complete {
        owner: usize,
        window_secs: u64,
    },
    Release {
        owner: usize,
    },
    Advance {
        ms: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0usize..3, 0u64..5_000, 0u64..10).prop_map(|(owner, lease_ms, window_secs)| Op::Acquire {
            owner,
            lease_ms,
            window_secs
        }),
        (0usize..3, 0u64..10).prop_map(|(owner, window_secs)| Op::Complete { owner, window_secs }),
        (0usize..3).prop_map(|owner| Op::Release { owner }),
        (0u64..6_000).prop_map(|ms| Op::Advance { ms }),
    ]
}

fn ready<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
    {
        std::task::Poll::Ready(output) => output,
        std::task::Poll::Pending => panic!("InMemoryStore futures are ready at once"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// `InMemoryStore` behaves like the model for any sequence of operations and clock moves.
    #[test]
    fn in_memory_store_follows_the_model(ops in proptest::collection::vec(op(), 1..40)) {
        let store = InMemoryStore::new();
        let clock = ManualClock::at_epoch_ms(BASE_MS);
        let key = IdempotencyKey::derive("model", b"k");
        let owners: Vec<OwnerToken> = (0..3).map(|_| OwnerToken::generate()).collect();
        let mut model: Option<ModelRecord> = None;
        for (step, op) in ops.into_iter().enumerate() {
            let now = clock.now();
            let (now_ms, now_secs) = (epoch_ms(now), epoch_secs(now));
            match op {
                Op::Acquire { owner, lease_ms, window_secs } => {
                    let takeable = match &model {
                        None => true,
                        Some(m) => m.expiration_secs < now_secs
                            || (!m.completed && m.lease_ms.is_some_and(|l| l < now_ms)),
                    };
                    let lease = now_ms + lease_ms;
                    let expiration_secs = (now_secs + window_secs).max(lease.div_ceil(1000));
                    let got = ready(store.acquire(&AcquireRequest {
                        key: key.clone(),
                        owner: owners[owner].clone(),
                        now,
                        lease_expiration_ms: lease,
                        expiration_secs,
                        validation: None,
                    })).unwrap();
                    // Our own live lease (a resent acquire whose answer was lost) is ours.
                    let ours = model.as_ref().is_some_and(|m| !m.completed && m.owner == owner);
                    if !takeable && ours {
                        prop_assert_eq!(got, Acquire::Acquired, "step {}", step);
                    } else if takeable {
                        prop_assert_eq!(got, Acquire::Acquired, "step {}", step);
                        model = Some(ModelRecord {
                            completed: false,
                            expiration_secs,
                            lease_ms: Some(lease),
                            owner,
                            data: None,
                        });
                    } else {
                        prop_assert!(matches!(got, Acquire::Existing(_)), "step {}", step);
                    }
                }
                Op::Complete { owner, window_secs } => {
                    let data = format!("result-{step}");
                    let got = ready(store.complete(&CompleteRequest {
                        key: key.clone(),
                        owner: owners[owner].clone(),
                        status: Status::Completed,
                        data: data.clone(),
                        expiration_secs: now_secs + window_secs,
                        now,
                    })).unwrap();
                    let held = model.as_ref().is_some_and(|m| !m.completed && m.owner == owner);
                    // Completed by this owner already (a resent completion): applied, as it was.
                    let done = model.as_ref().is_some_and(|m| {
                        m.completed && m.owner == owner && m.data.as_deref() == Some(data.as_str())
                    });
                    if done {
                        prop_assert_eq!(got, Fenced::Applied, "step {}", step);
                    } else if held {
                        prop_assert_eq!(got, Fenced::Applied, "step {}", step);
                        let m = model.as_mut().unwrap();
                        m.completed = true;
                        m.data = Some(data);
                        m.expiration_secs = now_secs + window_secs;
                        m.lease_ms = None;
                    } else {
                        prop_assert_eq!(got, Fenced::LeaseLost, "step {}", step);
                    }
                }
                Op::Release { owner } => {
                    let got = ready(store.release(&key, &owners[owner])).unwrap();
                    let held = model.as_ref().is_some_and(|m| !m.completed && m.owner == owner);
                    if held {
                        prop_assert_eq!(got, Fenced::Applied, "step {}", step);
                        model = None;
                    } else {
                        prop_assert_eq!(got, Fenced::LeaseLost, "step {}", step);
                    }
                }
                Op::Advance { ms } => clock.advance(Duration::from_millis(ms)),
            }
            let stored = ready(store.get(&key)).unwrap();
            match (&model, stored) {
                (None, None) => {}
                (Some(m), Some(r)) => {
                    prop_assert_eq!(r.status == Status::Completed, m.completed);
                    prop_assert_eq!(r.expiration_secs, m.expiration_secs);
                    prop_assert_eq!(r.lease_expiration_ms, m.lease_ms);
                    prop_assert_eq!(r.owner.as_ref(), Some(&owners[m.owner]));
                    prop_assert_eq!(r.data.clone(), m.data.clone());
                }
                (m, r) => prop_assert!(false, "model {:?} but store {:?}", m, r),
            }
        }
    }
}
