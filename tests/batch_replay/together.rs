//! The main cases: a redelivered batch replays together without a call per record, and the
//! records it cannot replay, those beyond the concurrency limit, and a FIFO batch's end as
//! they do without batch replay.

use super::*;

#[tokio::test]
async fn a_redelivered_batch_replays_together_without_a_call_per_record() {
    let rig = Rig::new();
    let first = ["m-1", "m-2", "m-3"].map(|id| message(id, "{\"a\":1}", 1, false));
    let report = rig.deliver(true, first.to_vec()).await;
    assert_eq!(outcomes(&report), [Outcome::Executed; 3]);
    assert_eq!(
        (rig.runs(), rig.calls()),
        (3, (0, 3)),
        "first deliveries are not looked up"
    );
    let stored = ["m-1", "m-2", "m-3"].map(|id| rig.stored(id));
    let again = ["m-1", "m-2", "m-3"].map(|id| message(id, "{\"a\":1}", 2, false));
    let report = rig.deliver(true, again.to_vec()).await;
    assert_eq!(outcomes(&report), [Outcome::Replayed; 3]);
    assert!(report
        .records
        .iter()
        .all(|r| r.replayed && r.error.is_none()));
    assert_eq!(values(&report), [Some(7); 3]);
    assert!(reported(&report).is_empty());
    assert_eq!(rig.runs(), 3, "no handler ran again");
    assert_eq!(rig.calls(), (1, 3), "one lookup, no write");
    assert_eq!(*rig.hooked.lock().unwrap(), [ReplaySource::Store; 3]);
    for id in ["m-1", "m-2", "m-3"] {
        // Its own call the first time, the batch's replay the second.
        assert_eq!(rig.logs.processed(id), [true, false], "{id}");
    }
    for (id, before) in ["m-1", "m-2", "m-3"].into_iter().zip(stored) {
        assert_eq!(before.status, Status::Completed);
        assert_eq!(rig.stored(id), before, "{id}: left as it was");
    }
}

/// A batch with one record of each kind the batch cannot replay, on a store where m-1 is
/// completed, m-4 is held by another invocation's live lease, and m-5 completed for another
/// payload.
async fn mixed(rig: &Rig, together: bool, mode: Scheduling) -> BatchReport<usize> {
    rig.deliver(
        together,
        vec![
            message("m-1", "{}", 1, false),
            message("m-5", "{\"b\":2}", 1, false),
        ],
    )
    .await;
    rig.held_elsewhere("m-4");
    let processor = rig.processor(together, 0, mode);
    rig.run(
        &processor,
        batch(vec![
            message("m-1", "{}", 2, false),
            message("m-2", "{\"c\":3}", 2, false),
            message("m-3", "{\"d\":4}", 1, false),
            message("m-4", "{}", 2, false),
            message("m-5", "{\"b\":3}", 2, false),
            message("m-6", "fail", 2, false),
        ]),
    )
    .await
}

#[tokio::test]
async fn records_the_batch_cannot_replay_end_as_they_do_without_it() {
    let (alone, together) = (Rig::new(), Rig::new());
    let without = mixed(&alone, false, Scheduling::default()).await;
    let with = mixed(&together, true, Scheduling::default()).await;
    let expected = [
        Outcome::Replayed,
        Outcome::Executed,
        Outcome::Executed,
        Outcome::Locked,
        Outcome::Rejected,
        Outcome::Failed,
    ];
    assert_eq!(outcomes(&without), expected);
    assert_eq!(outcomes(&with), expected);
    assert_eq!(values(&with), values(&without));
    assert_eq!(reported(&with), reported(&without));
    assert_eq!(reported(&with), ["m-4", "m-5", "m-6"]);
    // m-1 and m-5 on the first delivery; m-2, m-3 and m-6 on the second.
    assert_eq!((together.runs(), alone.runs()), (5, 5));
    assert_eq!(together.calls(), alone.calls());
    assert_eq!(
        together.calls(),
        (1, 5),
        "one lookup; an acquire for m-2, m-3, m-6"
    );
    // Only m-1 was replayed together; every other record had its own call.
    assert_eq!(together.logs.processed("m-1"), [true, false]);
    for id in ["m-2", "m-3", "m-4", "m-6"] {
        assert_eq!(together.logs.processed(id), [true], "{id}");
    }
    let held = together.stored("m-4");
    assert_eq!(
        held.owner,
        Some(OwnerToken::new("another-invocation")),
        "the lease stays its holder's"
    );
}

#[tokio::test]
async fn records_beyond_the_concurrency_limit_end_as_they_do_without_it() {
    let (alone, together) = (Rig::new(), Rig::new());
    let mode = Scheduling::Concurrent { limit: 2 };
    let without = mixed(&alone, false, mode).await;
    let with = mixed(&together, true, mode).await;
    assert_eq!(outcomes(&with), outcomes(&without));
    assert_eq!(values(&with), values(&without));
    assert_eq!(reported(&with), reported(&without));
    assert_eq!(
        (together.runs(), together.calls()),
        (alone.runs(), alone.calls())
    );
    assert_eq!(together.logs.processed("m-1"), [true, false]);
}

#[tokio::test]
async fn a_fifo_batch_runs_each_record_at_its_turn_through_its_own_call() {
    for together in [false, true] {
        let rig = Rig::new();
        let (first, report) = rig.fifo_failure_between_duplicates(together).await;
        assert_eq!(outcomes(&first), [Outcome::Executed; 2]);
        // m-2 replays; m-3 fails; m-4 would replay, but comes after the failure.
        assert_eq!(
            outcomes(&report),
            [Outcome::Replayed, Outcome::Failed, Outcome::FifoSkipped],
            "together: {together}"
        );
        assert_eq!(reported(&report), ["m-3", "m-4"]);
        assert_eq!(
            (rig.runs(), rig.calls()),
            (3, (1, 3)),
            "together: {together}"
        );
        // In order, each record at its turn: no replay worked out at the batch's start.
        assert_eq!(rig.logs.processed("m-2"), [true, true]);
        assert_eq!(*rig.hooked.lock().unwrap(), [ReplaySource::Store]);
    }
}
