//! Sequence-guarded handlers on the embedded store: the rules (in turn, or any newer
//! event), a handler's own condition, writes the guard refuses, and puts. Each delivery is
//! checked: outcomes, `batchItemFailures`, the handler's runs and the entity.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::batch::{BatchProcessor, BatchReport};
use lambda_idempotency::idempotent::{Position, Sequence};
use lambda_idempotency::key::KeyError;
use lambda_idempotency::store::{Attr, Guarded, GuardedWrite, InMemoryStore, Item, Write};
use lambda_idempotency::{Completion, Outcome, Permanent, SequencedLayer};
use lambda_idempotency_test_support::{invocation, outcomes, reported};

const REMAINING: Duration = Duration::from_secs(30);

/// Events for entity `id` with these sequence numbers; `body` says what the handler writes.
fn events(items: &[(u64, &str)]) -> SqsEvent {
    let mut event = SqsEvent::default();
    for (n, what) in items {
        let mut m = SqsMessage::default();
        m.message_id = Some(format!("m-{n}-{what}"));
        m.body = Some(format!(r#"{{"sequence":{n},"write":"{what}"}}"#));
        event.records.push(m);
    }
    event
}

fn key() -> Item {
    [("id".to_string(), Attr::s("order-1"))].into()
}

fn position(m: &SqsMessage) -> Result<Position, KeyError> {
    let body: serde_json::Value =
        serde_json::from_str(m.body.as_deref().unwrap()).map_err(|_| KeyError::MissingBody)?;
    Ok(Position {
        table: "orders".into(),
        key: key(),
        sequence: body["sequence"].as_u64().ok_or(KeyError::MissingBody)?,
    })
}

struct Rig {
    store: InMemoryStore,
    runs: Arc<AtomicUsize>,
}

impl Rig {
    fn new() -> Self {
        let store = InMemoryStore::new();
        store.define_table("orders", &["id"]);
        store.define_table("other", &["id"]);
        Self {
            store,
            runs: Arc::default(),
        }
    }

    async fn deliver(&self, newer: bool, event: SqsEvent) -> BatchReport<u64> {
        let sequence = if newer {
            Sequence::newer("version", position)
        } else {
            Sequence::next("version", position)
        };
        let layer = SequencedLayer::new(self.store.clone(), sequence);
        let runs = self.runs.clone();
        let processor = BatchProcessor::new(layer.handler(move |m: SqsMessage| {
            let runs = runs.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                let body: serde_json::Value = serde_json::from_str(m.body.as_deref().unwrap())?;
                let n = body["sequence"].as_u64().unwrap();
                let state = |id: &str| [("id", Attr::s(id)), ("state", Attr::n(n))];
                let completion = Completion::new(n);
                Ok::<_, lambda_idempotency::BoxError>(match body["write"].as_str().unwrap() {
                    "update" => completion.with_write(
                        Write::update("orders", [("id", Attr::s("order-1"))], "SET #s = :s")
                            .name("#s", "state")
                            .value(":s", Attr::n(n)),
                    ),
                    "put" => completion.with_write(Write::put("orders", state("order-1"))),
                    // DynamoDB takes a placeholder right after the keyword.
                    "nospace" => completion.with_write(
                        Write::update("orders", [("id", Attr::s("order-1"))], "SET#s = :s")
                            .name("#s", "state")
                            .value(":s", Attr::n(n)),
                    ),
                    // Arithmetic on the current state: it cannot apply once the state is gone.
                    "increment" => completion.with_write(
                        Write::update("orders", [("id", Attr::s("order-1"))], "SET #s = #s + :s")
                            .name("#s", "state")
                            .value(":s", Attr::n(n)),
                    ),
                    // DynamoDB takes `SET` right after a list index.
                    "bracket" => completion.with_write(
                        Write::update(
                            "orders",
                            [("id", Attr::s("order-1"))],
                            "REMOVE #l[0]SET #s = :s",
                        )
                        .name("#l", "lines")
                        .name("#s", "state")
                        .value(":s", Attr::n(n)),
                    ),
                    "remove" => completion.with_write(
                        Write::update("orders", [("id", Attr::s("order-1"))], "REMOVE #s")
                            .name("#s", "state"),
                    ),
                    "closed" => completion.with_write(
                        Write::update("orders", [("id", Attr::s("order-1"))], "SET #s = :s")
                            .name("#s", "state")
                            .value(":s", Attr::n(n))
                            .condition("attribute_not_exists(closed)"),
                    ),
                    "elsewhere" => completion.with_write(Write::put("other", state("order-1"))),
                    "two" => completion
                        .with_write(Write::put("orders", state("order-1")))
                        .with_write(Write::put("orders", state("order-2"))),
                    "permanent" => return Err(Permanent::new("declined").into()),
                    other => panic!("unknown write {other}"),
                })
            }
        }));
        processor
            .process(invocation(event, SystemTime::now(), REMAINING))
            .await
    }

    fn entity(&self) -> Option<Item> {
        self.store.item("orders", &key())
    }

    fn version(&self) -> Option<Attr> {
        self.entity().and_then(|item| item.get("version").cloned())
    }
}

#[tokio::test]
async fn in_turn_events_apply_once_and_late_ones_are_replayed() {
    let rig = Rig::new();
    let first = rig
        .deliver(false, events(&[(1, "update"), (2, "put")]))
        .await;
    assert_eq!(outcomes(&first), [Outcome::Executed; 2]);
    assert_eq!(rig.version(), Some(Attr::n(2)));
    let late = rig
        .deliver(false, events(&[(1, "update"), (2, "update")]))
        .await;
    assert_eq!(outcomes(&late), [Outcome::Replayed; 2]);
    assert!(reported(&late).is_empty());
    assert_eq!(
        rig.entity().unwrap()["state"],
        Attr::n(2),
        "nothing rewritten"
    );
    assert_eq!(
        rig.runs.load(Ordering::SeqCst),
        4,
        "run, then refused by the guard"
    );
}

#[tokio::test]
async fn the_newer_rule_skips_gaps_and_treats_older_events_as_stale() {
    let rig = Rig::new();
    let report = rig
        .deliver(true, events(&[(5, "update"), (3, "update"), (9, "put")]))
        .await;
    assert_eq!(
        outcomes(&report),
        [Outcome::Executed, Outcome::Replayed, Outcome::Executed]
    );
    assert_eq!(rig.version(), Some(Attr::n(9)));
    assert_eq!(rig.entity().unwrap()["state"], Attr::n(9));
}

#[tokio::test]
async fn the_handlers_own_condition_is_kept_and_a_failure_is_rejected() {
    let rig = Rig::new();
    rig.deliver(false, events(&[(1, "update")])).await;
    let mut closed = rig.entity().unwrap();
    closed.insert("closed".into(), Attr::Bool(true));
    let put = Write::put("orders", closed);
    assert_eq!(
        rig.store.write_guarded(&put).await.unwrap(),
        Guarded::Applied
    );
    let report = rig.deliver(false, events(&[(2, "closed")])).await;
    assert_eq!(outcomes(&report), [Outcome::Rejected]);
    assert_eq!(rig.version(), Some(Attr::n(1)), "nothing written");
}

#[tokio::test]
async fn writes_the_guard_cannot_own_are_rejected_and_write_nothing() {
    let rig = Rig::new();
    let report = rig
        .deliver(false, events(&[(1, "elsewhere"), (1, "two")]))
        .await;
    assert_eq!(outcomes(&report), [Outcome::Rejected; 2]);
    assert_eq!(rig.entity(), None);
    assert!(rig.store.item("other", &key()).is_none());
    // Sequence numbers start at 1 in turn.
    let report = rig.deliver(false, events(&[(0, "update")])).await;
    assert_eq!(outcomes(&report), [Outcome::Rejected]);
}

/// Under the newer rule an event may be skipped, so a permanent failure is acknowledged (and
/// a later event applies over the gap).
#[tokio::test]
async fn a_permanent_failure_under_the_newer_rule_is_acknowledged_and_writes_nothing() {
    let rig = Rig::new();
    let report = rig
        .deliver(true, events(&[(1, "permanent"), (2, "update")]))
        .await;
    assert_eq!(
        outcomes(&report),
        [Outcome::FailedPermanently, Outcome::Executed]
    );
    assert!(reported(&report).is_empty());
    assert_eq!(rig.version(), Some(Attr::n(2)));
}

/// In turn, the entity cannot move past an event that never applied: acknowledging its
/// permanent failure would drop the event and leave every later event of the entity out of
/// order for good. It is reported instead (its retries end in the dead-letter queue), and
/// nothing is written. (Found in review; acknowledged on the code before the fix.)
#[tokio::test]
async fn a_permanent_failure_in_turn_is_reported_and_writes_nothing() {
    let rig = Rig::new();
    let report = rig
        .deliver(false, events(&[(1, "permanent"), (2, "update")]))
        .await;
    assert_eq!(
        outcomes(&report),
        [Outcome::Failed, Outcome::OutOfOrder],
        "the failure is kept in the queue; the next event waits for it"
    );
    assert_eq!(reported(&report), ["m-1-permanent", "m-2-update"]);
    assert_eq!(rig.entity(), None);
    assert_eq!(
        rig.runs.load(Ordering::SeqCst),
        2,
        "event 2 ran and the guard refused its write"
    );
}

/// `SET#s = :s` is an update DynamoDB takes; the guard joins its `SET` clause instead of
/// adding a second one, which DynamoDB and the embedded store refuse. (Found in review;
/// rejected on the code before the fix.)
#[tokio::test]
async fn a_set_keyword_followed_by_a_placeholder_is_joined_by_the_guard() {
    let rig = Rig::new();
    let report = rig.deliver(false, events(&[(1, "nospace")])).await;
    assert_eq!(outcomes(&report), [Outcome::Executed]);
    assert_eq!(rig.version(), Some(Attr::n(1)));
    assert_eq!(rig.entity().unwrap()["state"], Attr::n(1));
}

/// A late duplicate whose update could no longer apply to the entity as it is now (its
/// arithmetic reads an attribute a later event removed) is refused by the guard, as on
/// DynamoDB, where a single write's condition is checked before its update is evaluated:
/// replayed and acknowledged, not rejected. (Found in review; rejected on the embedded
/// store before the fix.)
#[tokio::test]
async fn a_late_duplicate_whose_update_no_longer_fits_the_entity_is_replayed() {
    let rig = Rig::new();
    let first = rig
        .deliver(
            false,
            events(&[(1, "update"), (2, "increment"), (3, "remove")]),
        )
        .await;
    assert_eq!(outcomes(&first), [Outcome::Executed; 3]);
    assert_eq!(rig.version(), Some(Attr::n(3)));
    let duplicate = rig.deliver(false, events(&[(2, "increment")])).await;
    assert_eq!(outcomes(&duplicate), [Outcome::Replayed]);
    assert!(reported(&duplicate).is_empty());
    assert_eq!(rig.version(), Some(Attr::n(3)), "nothing written");
    assert_eq!(rig.entity().unwrap().get("state"), None);
}

/// An event numbered 0 under the in-turn rule is invalid ("sequence numbers start at 1"):
/// rejected on its first delivery, and on a redelivery too, where the entity read used to
/// answer it as replayed although it never applied. (Found in review; fails on the code
/// before the fix.)
#[tokio::test]
async fn an_event_numbered_zero_is_rejected_even_when_redelivered() {
    let rig = Rig::new();
    let first = rig.deliver(false, events(&[(1, "update")])).await;
    assert_eq!(outcomes(&first), [Outcome::Executed]);
    let zero = rig.deliver(false, events(&[(0, "update")])).await;
    assert_eq!(
        outcomes(&zero),
        [Outcome::Rejected],
        "first delivery: rejected"
    );
    let mut again = events(&[(0, "update")]);
    again.records[0]
        .attributes
        .insert("ApproximateReceiveCount".into(), "2".into());
    let redelivered = rig.deliver(false, again).await;
    assert_eq!(
        outcomes(&redelivered),
        [Outcome::Rejected],
        "redelivered: still rejected, never acknowledged"
    );
}

/// A late duplicate of an event that applied, whose handler now fails with `Permanent` (a
/// handler that checks the entity: "already done"), is replayed in turn, not reported: the
/// entity is read and found past it. Every stream record and every unmarked SQS duplicate
/// comes this way. (Found in review; reported `failed` on the code before the fix.)
#[tokio::test]
async fn a_late_duplicate_failing_permanently_in_turn_is_replayed() {
    let rig = Rig::new();
    let first = rig
        .deliver(false, events(&[(1, "update"), (2, "update")]))
        .await;
    assert_eq!(outcomes(&first), [Outcome::Executed; 2]);
    let late = rig.deliver(false, events(&[(1, "permanent")])).await;
    assert_eq!(outcomes(&late), [Outcome::Replayed]);
    assert!(reported(&late).is_empty());
    assert_eq!(rig.version(), Some(Attr::n(2)), "nothing written");
}

/// `REMOVE #l[0]SET #s = :s` is an update DynamoDB takes (`SET` right after `]`): the guard
/// joins that clause. (Found in review; rejected on the code before the fix.)
#[tokio::test]
async fn a_set_keyword_right_after_a_list_index_is_joined_by_the_guard() {
    let rig = Rig::new();
    let lines = Write::put(
        "orders",
        [
            ("id", Attr::s("order-1")),
            ("lines", Attr::L(vec![Attr::n(7)])),
        ],
    );
    assert_eq!(
        rig.store.write_guarded(&lines).await.unwrap(),
        Guarded::Applied
    );
    let report = rig.deliver(false, events(&[(1, "bracket")])).await;
    assert_eq!(outcomes(&report), [Outcome::Executed]);
    assert_eq!(rig.version(), Some(Attr::n(1)));
    assert_eq!(rig.entity().unwrap()["lines"], Attr::L(vec![]));
}

/// A permanent failure in turn on an entity whose sequence attribute is not a number keeps
/// the handler's error (`failed`), as without the read. (Found in review: the read's
/// malformed-entity error replaced it, `store_unavailable`, before the fix.)
#[tokio::test]
async fn a_permanent_failure_on_a_malformed_entity_keeps_the_handlers_error() {
    let rig = Rig::new();
    let malformed = Write::put(
        "orders",
        [("id", Attr::s("order-1")), ("version", Attr::s("three"))],
    );
    assert_eq!(
        rig.store.write_guarded(&malformed).await.unwrap(),
        Guarded::Applied
    );
    let report = rig.deliver(false, events(&[(1, "permanent")])).await;
    assert_eq!(outcomes(&report), [Outcome::Failed]);
    assert_eq!(reported(&report), ["m-1-permanent"]);
}

/// A whole invocation can be sequence-guarded too (as before `SequencedLayer`; from review):
/// the sequence places the event as received and the write is guarded. A duplicate changes
/// nothing: it runs the handler (an invocation does not say it was delivered before, so no
/// read comes first), its write is refused by the guard, and it answers as a replay without
/// a result.
#[tokio::test]
async fn a_whole_invocation_is_sequence_guarded() {
    use lambda_idempotency::input::Serialized;
    use lambda_idempotency::invocation::{InvocationError, Received};
    use lambda_runtime::{service_fn, LambdaEvent};
    use tower::ServiceExt;
    let position = |e: &Serialized<serde_json::Value>| -> Result<Position, KeyError> {
        let account = e["account"].as_str().ok_or(KeyError::MissingBody)?;
        Ok(Position {
            table: "ledger".into(),
            key: [("account".to_string(), Attr::s(account))].into(),
            sequence: e["seq"].as_u64().ok_or(KeyError::MissingBody)?,
        })
    };
    let store = InMemoryStore::new();
    store.define_table("ledger", &["account"]);
    let runs = Arc::new(AtomicUsize::new(0));
    let layer = SequencedLayer::new(store.clone(), Sequence::next("sequence", position));
    let r = runs.clone();
    let function = layer.invocation(service_fn(move |e: LambdaEvent<serde_json::Value>| {
        r.fetch_add(1, Ordering::SeqCst);
        let account = e.payload["account"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let key: Item = [("account".to_string(), Attr::s(account))].into();
        let write = Write::update("ledger", key, "ADD #n :one")
            .name("#n", "credits")
            .value(":one", Attr::n(1));
        async move { Ok::<_, lambda_idempotency::BoxError>(Completion::new(1u8).with_write(write)) }
    }));
    let event = || {
        let received = Received::from_json(r#"{"account": "a", "seq": 1}"#).unwrap();
        let context =
            lambda_idempotency_test_support::context_at(SystemTime::now(), Duration::from_secs(30));
        LambdaEvent::new(received, context)
    };
    assert_eq!(function.clone().oneshot(event()).await.unwrap(), 1);
    let items = store.items("ledger");
    assert_eq!(
        items[0].get("sequence"),
        Some(&Attr::n(1)),
        "the guard set it"
    );
    assert_eq!(items[0].get("credits"), Some(&Attr::n(1)));

    let again = function.oneshot(event()).await;
    assert!(
        matches!(again, Err(InvocationError::ResultUnavailable)),
        "{again:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(
        store.items("ledger")[0].get("credits"),
        Some(&Attr::n(1)),
        "applied once"
    );
}
