//! The `sequenced` mode's workload, on a FIFO queue: each account's orders carry their number
//! in the account's sequence (1, 2, ...) and go to the account's message group in that order,
//! the groups interleaved at random. Producer retries (the same event again, right behind
//! it), tampered twins (the same event and sequence, another amount, right behind it: the
//! first one applies, the twin is acknowledged as already applied) and poison messages: not
//! JSON, binary-looking, mistyped, without an account, 200 KB, without a sequence, at
//! sequence 0, and ahead of their turn with a gap that never closes.
//!
//! A poison message never succeeds, so it is received until it is dead-lettered, and on SQS
//! every receive counts for each message returned, also one the consumer skips (see
//! [`Queue::fifo`]). The order-consumer runs with the default batch mode, which stops only the
//! failed record's message group: the other groups' messages a receive returns behind a
//! poison message run and are acknowledged, and do not follow it to the dead-letter queue.
//! One poison message (not JSON) is sent first, before every valid message, in a group of its
//! own, to check just that: under a whole-batch stop it took valid messages of other accounts
//! to the dead-letter queue (`Scheduling::Fifo { skip_failed_group_only: false }`: 20 of 51 for
//! seed 1).
//!
//! The other poison messages are sent last, after every valid message, each in a group of its
//! own or at the tail of an account's group (behind all its valid orders). At an account's
//! tail because of FIFO itself: the orders behind a poison message in its own group are held
//! back with it on every receive, so they would follow it to the dead-letter queue (and every
//! later order of the account would then be out of turn, until dead-lettered too). This is a
//! real FIFO hazard the workload steers around, not one the model covers.

use std::collections::BTreeMap;

use serde_json::json;

use super::super::sqs_sim::{Queue, Rng};
use super::workload::Workload;
use super::Settings;

/// The accounts receiving orders (one message group each).
const ACCOUNTS: u64 = 6;

fn order(event_id: &str, account: &str, amount: i64, sequence: u64) -> String {
    json!({"eventId": event_id, "account": account, "amount": amount, "sequence": sequence})
        .to_string()
}

/// Where a poison message goes.
enum Place {
    /// A message group of its own.
    OwnGroup,
    /// The tail of a random account's group.
    AccountTail,
}

/// Builds and sends the sequenced workload to the FIFO `queue`.
pub(super) fn send(queue: &Queue, settings: &Settings, rng: &mut Rng) -> Workload {
    let seed = settings.seed;
    let mut workload = Workload::default();
    // A poison message first in the queue, in a group of its own: the valid messages returned
    // behind it must run, not follow it to the dead-letter queue.
    workload.groups += 1;
    workload.poison.push(queue.send_to_group(
        r#"{"eventId":"evt-poison-early","#,
        None,
        "poison-early",
    ));
    // Each account's group, in order.
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let twins: Vec<u64> = (0..(settings.events / 20).max(2))
        .map(|_| rng.below(settings.events as u64))
        .collect();
    for i in 0..settings.events {
        let event_id = format!("evt-{seed}-{i}");
        let account = format!("acct-{}", rng.below(ACCOUNTS));
        let amount = rng.below(150) as i64 - 49;
        *workload.expected.entry(account.clone()).or_default() += amount;
        let sequence = workload.sequences.entry(account.clone()).or_default();
        *sequence += 1;
        let body = order(&event_id, &account, amount, *sequence);
        let group = groups.entry(account.clone()).or_default();
        group.push(body.clone());
        if rng.chance(0.25) {
            // The producer resends: the same event, right behind it, as a new message.
            group.push(body);
        }
        if twins.contains(&(i as u64)) {
            group.push(order(&event_id, &account, amount + 1000, *sequence));
            workload.twins += 1;
        }
    }
    // The groups interleaved at random, each in its order: the next message comes from a
    // group drawn in proportion to what it has left.
    let mut cursors: Vec<(String, std::vec::IntoIter<String>, usize)> = groups
        .into_iter()
        .map(|(group, bodies)| {
            let left = bodies.len();
            (group, bodies.into_iter(), left)
        })
        .collect();
    workload.groups += cursors.len();
    let mut left: usize = cursors.iter().map(|(_, _, n)| n).sum();
    while left > 0 {
        let mut pick = rng.below(left as u64) as usize;
        let at = cursors
            .iter()
            .position(|(_, _, n)| {
                let here = pick < *n;
                pick = pick.saturating_sub(*n);
                here
            })
            .expect("a group with messages left");
        let (group, bodies, n) = &mut cursors[at];
        let body = bodies.next().expect("counted");
        *n -= 1;
        left -= 1;
        workload.valid.push(queue.send_to_group(&body, None, group));
    }
    send_poison(queue, settings, rng, &mut workload);
    workload
}

/// The poison messages sent after every valid one.
fn send_poison(queue: &Queue, settings: &Settings, rng: &mut Rng, workload: &mut Workload) {
    let seed = settings.seed;
    type Poison = fn(usize, &str, u64) -> String;
    let kinds: [(Place, Poison); 9] = [
        (Place::OwnGroup, |i, _, _| {
            format!(r#"{{"eventId":"evt-poison-{i}","account":"#)
        }),
        (Place::AccountTail, |_, _, _| {
            "\u{0}\u{1}\u{2}\u{fffd}\u{7f} binary-looking".to_string()
        }),
        (Place::AccountTail, |i, account, next| {
            json!({"eventId": format!("evt-poison-{i}"), "account": account, "amount": "12", "sequence": next})
                .to_string()
        }),
        (Place::OwnGroup, |i, _, _| {
            json!({"eventId": format!("evt-poison-{i}"), "amount": 3, "sequence": 1}).to_string()
        }),
        (Place::OwnGroup, |_, _, _| "x".repeat(200_000)),
        // An order without a sequence, in its account's group: it must fail alone.
        (Place::AccountTail, |i, account, _| {
            json!({"eventId": format!("evt-poison-{i}"), "account": account, "amount": 5})
                .to_string()
        }),
        // The same in an account of its own, which must stay empty.
        (Place::OwnGroup, |i, account, _| {
            json!({"eventId": format!("evt-poison-{i}"), "account": account, "amount": 5})
                .to_string()
        }),
        (Place::AccountTail, |i, account, _| {
            order(&format!("evt-poison-{i}"), account, 7, 0)
        }),
        // Ahead of its turn, and the order in between never comes.
        (Place::AccountTail, |i, account, next| {
            order(&format!("evt-poison-{i}"), account, 9, next + 1)
        }),
    ];
    let count = (settings.events / 10).max(kinds.len());
    // The accounts' tails in a random order, each used once before any is used again: a
    // poison message behind another in the same group is skipped with it, never run.
    let mut tails: Vec<u64> = (0..ACCOUNTS).collect();
    for i in (1..tails.len()).rev() {
        tails.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let mut tail = tails.iter().cycle();
    for (i, (place, poison)) in kinds.iter().cycle().take(count).enumerate() {
        let (account, group) = match place {
            Place::OwnGroup => {
                workload.groups += 1;
                let account = format!("acct-p{seed}-{i}");
                // Its account must stay untouched.
                workload.expected.insert(account.clone(), 0);
                workload.sequences.insert(account.clone(), 0);
                (account.clone(), account)
            }
            Place::AccountTail => {
                let account = format!("acct-{}", tail.next().expect("cycles"));
                // An account with no orders yet gets its group here.
                workload.expected.entry(account.clone()).or_default();
                workload.sequences.entry(account.clone()).or_default();
                (account.clone(), account)
            }
        };
        let next = workload.sequences[&account] + 1;
        let body = poison(i, &account, next);
        workload
            .poison
            .push(queue.send_to_group(&body, None, &group));
    }
}
