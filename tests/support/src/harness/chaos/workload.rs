//! The record modes' workload (`optimistic`, `lease`) on a standard queue: orders of six
//! accounts in a seeded random order, producer retries, poison bodies and tampered pairs.

use std::collections::BTreeMap;

use serde_json::json;

use super::super::sqs_sim::{Queue, Rng};
use super::Settings;

/// What was sent, for the final check.
#[derive(Debug, Default)]
pub(super) struct Workload {
    /// Valid messages (originals and producer retries): must all be acknowledged.
    pub(super) valid: Vec<String>,
    /// Poison messages: must all be dead-lettered.
    pub(super) poison: Vec<String>,
    /// Tampered pairs: (account, [(message id, amount); 2]).
    pub(super) tampered: Vec<(String, [(String, i64); 2])>,
    /// Expected balance of each ordinary account.
    pub(super) expected: BTreeMap<String, i64>,
    /// Sequenced mode: the expected ledger `sequence` of each account (its number of unique
    /// events; 0 for an account that must have none).
    pub(super) sequences: BTreeMap<String, u64>,
    /// Sequenced mode: tampered twins sent (among the valid messages).
    pub(super) twins: usize,
    /// Sequenced mode: the message groups used.
    pub(super) groups: usize,
}

pub(super) fn order(event_id: &str, account: &str, amount: i64) -> String {
    json!({"eventId": event_id, "account": account, "amount": amount}).to_string()
}

/// Builds and sends the workload, in a seeded random order.
pub(super) fn send(queue: &Queue, settings: &Settings, rng: &mut Rng) -> Workload {
    enum Item {
        Valid(String, Option<String>),
        Poison(String, Option<String>),
        Tampered(usize, usize, String, String),
    }
    let mut items = Vec::new();
    let mut workload = Workload::default();
    for i in 0..settings.events {
        let event_id = format!("evt-{}-{i}", settings.seed);
        let account = format!("acct-{}", rng.below(6));
        let amount = rng.below(150) as i64 - 49;
        *workload.expected.entry(account.clone()).or_default() += amount;
        let keyed = rng.chance(0.5).then(|| event_id.clone());
        let body = order(&event_id, &account, amount);
        if rng.chance(0.25) {
            // The producer retries: the same event again, as a new message.
            items.push(Item::Valid(body.clone(), keyed.clone()));
        }
        items.push(Item::Valid(body, keyed));
    }
    let poison_bodies = [
        r#"{"eventId":"evt-poison-a","account":"#.to_string(),
        "\u{0}\u{1}\u{2}\u{fffd}\u{7f} binary-looking".to_string(),
        r#"{"eventId":"evt-poison-b","account":"acct-0","amount":"12"}"#.to_string(),
        r#"{"eventId":"evt-poison-c","amount":3}"#.to_string(),
        "x".repeat(200_000),
    ];
    for (i, body) in poison_bodies
        .iter()
        .cycle()
        .take((settings.events / 10).max(poison_bodies.len()))
        .enumerate()
    {
        let keyed = (i % 2 == 1).then(|| format!("poison-key-{i}"));
        items.push(Item::Poison(body.clone(), keyed));
    }
    for j in 0..(settings.events / 20).max(2) {
        let account = format!("acct-t{j}");
        let event_id = format!("evt-{}-t{j}", settings.seed);
        let (a, b) = (10 + j as i64, 1000 + j as i64);
        workload
            .tampered
            .push((account.clone(), Default::default()));
        let index = workload.tampered.len() - 1;
        items.push(Item::Tampered(
            index,
            0,
            order(&event_id, &account, a),
            event_id.clone(),
        ));
        items.push(Item::Tampered(
            index,
            1,
            order(&event_id, &account, b),
            event_id,
        ));
    }
    // Shuffle (Fisher-Yates), then send.
    for i in (1..items.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        items.swap(i, j);
    }
    for item in items {
        match item {
            Item::Valid(body, key) => workload.valid.push(queue.send(&body, key.as_deref())),
            Item::Poison(body, key) => workload.poison.push(queue.send(&body, key.as_deref())),
            Item::Tampered(pair, side, body, key) => {
                let amount = serde_json::from_str::<serde_json::Value>(&body).unwrap()["amount"]
                    .as_i64()
                    .unwrap();
                let id = queue.send(&body, Some(&key));
                workload.tampered[pair].1[side] = (id, amount);
            }
        }
    }
    workload
}
