//! An in-memory SQS queue with at-least-once delivery: visibility timeouts, receive counts,
//! a dead-letter queue after a maximum receive count, and (on request) a message delivered
//! again while it is still in flight.
//!
//! [`Queue::fifo`] makes it a FIFO queue instead, as SQS FIFO delivers:
//! - Each message belongs to a message group (`MessageGroupId`). A receive scans the queue in
//!   send order for groups it may serve and returns as many messages of one group as it can,
//!   in order, before the next group's; a group with a message in flight (received, neither
//!   deleted nor dead-lettered, still invisible) is not served at all, so the messages of a
//!   group are never in two consumers' hands at once.
//! - Every message a receive returns counts as received (`ApproximateReceiveCount`), even one a
//!   consumer then skips because an earlier record of its batch failed: that is how SQS counts,
//!   so the messages received behind a message that always fails reach the maximum count with
//!   it. A message past the maximum goes to the dead-letter queue when a receive reaches it,
//!   which unblocks its group (the next message of the group can come in the same receive).
//! - No message is handed out while it is in flight: the `duplicate` request of
//!   [`Queue::receive`] is ignored. Duplicates still reach the consumer, as they do on SQS
//!   FIFO: a message comes back after its visibility timeout when its deletion was lost (a
//!   consumer killed, frozen or cut off after its effect, or a lost acknowledgment: the caller
//!   simply does not [`Queue::ack`]), and a producer's retry is a new message. SQS FIFO drops a
//!   resend with the same `MessageDeduplicationId` within 5 minutes; this queue has no such
//!   window: each send is a new message with its own deduplication id, as from a producer that
//!   draws a new id per send or resends after the window.
//! - Records carry what SQS FIFO gives Lambda: `MessageGroupId`, `SequenceNumber` (growing with
//!   each send), `MessageDeduplicationId`, `ApproximateReceiveCount`, and an `eventSourceARN`
//!   ending in `.fifo`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// A small deterministic generator (SplitMix64), so a seed replays a run's choices.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        ((self.next_u64() >> 11) as f64 / ((1u64 << 53) as f64)) < p
    }
}

#[derive(Debug, Clone)]
struct Message {
    body: String,
    idempotency_key: Option<String>,
    /// The message group, on a FIFO queue.
    group: Option<String>,
    /// The send's number (the FIFO `SequenceNumber` and deduplication id are made from it).
    number: u64,
    receive_count: u32,
    invisible_until: Option<Instant>,
    acked: bool,
    dead: bool,
}

#[derive(Debug, Default)]
struct State {
    messages: BTreeMap<String, Message>,
    sent: u64,
    deliveries: u64,
    in_flight_duplicates: u64,
}

/// The queue.
#[derive(Debug)]
pub struct Queue {
    state: Mutex<State>,
    visibility: Duration,
    max_receives: u32,
    fifo: bool,
}

/// Counts, for the run's report.
#[derive(Debug, Clone, Copy)]
pub struct QueueStats {
    /// Messages sent.
    pub sent: u64,
    /// Receives that returned messages.
    pub deliveries: u64,
    /// Messages delivered again while in flight.
    pub in_flight_duplicates: u64,
    /// Messages acknowledged.
    pub acked: usize,
    /// Messages dead-lettered.
    pub dead: usize,
    /// Acknowledged messages that were received more than once.
    pub redelivered: usize,
}

impl Queue {
    /// A queue with a `visibility` timeout that dead-letters a message received more than
    /// `max_receives` times.
    pub fn new(visibility: Duration, max_receives: u32) -> Self {
        Self {
            state: Mutex::default(),
            visibility,
            max_receives,
            fifo: false,
        }
    }

    /// A FIFO queue (see the module documentation), with a `visibility` timeout, that
    /// dead-letters a message received more than `max_receives` times.
    pub fn fifo(visibility: Duration, max_receives: u32) -> Self {
        Self {
            fifo: true,
            ..Self::new(visibility, max_receives)
        }
    }

    /// Whether this is a FIFO queue.
    pub fn is_fifo(&self) -> bool {
        self.fifo
    }

    /// Sends a message; returns its new message id. On a FIFO queue, use
    /// [`Queue::send_to_group`].
    pub fn send(&self, body: &str, idempotency_key: Option<&str>) -> String {
        assert!(!self.fifo, "a FIFO queue needs a message group");
        self.insert(body, idempotency_key, None)
    }

    /// Sends a message to the FIFO message group `group`, behind the group's earlier
    /// messages; returns its new message id.
    pub fn send_to_group(&self, body: &str, idempotency_key: Option<&str>, group: &str) -> String {
        assert!(self.fifo, "message groups are for FIFO queues");
        self.insert(body, idempotency_key, Some(group))
    }

    fn insert(&self, body: &str, idempotency_key: Option<&str>, group: Option<&str>) -> String {
        let mut state = self.state.lock().unwrap();
        state.sent += 1;
        let id = format!("a1b2c3d4-0000-4000-8000-{:012}", state.sent);
        let number = state.sent;
        state.messages.insert(
            id.clone(),
            Message {
                body: body.to_string(),
                idempotency_key: idempotency_key.map(str::to_string),
                group: group.map(str::to_string),
                number,
                receive_count: 0,
                invisible_until: None,
                acked: false,
                dead: false,
            },
        );
        id
    }

    /// Receives up to `max` visible messages as an SQS event. A message received more than
    /// the maximum count goes to the dead-letter queue instead. With `duplicate`, one
    /// message still in flight elsewhere is delivered again as well (never on a FIFO queue).
    pub fn receive(&self, max: usize, duplicate: bool) -> Option<Value> {
        if self.fifo {
            return self.receive_fifo(max);
        }
        let now = Instant::now();
        let mut state = self.state.lock().unwrap();
        let mut records = Vec::new();
        let mut in_flight = None;
        let max_receives = self.max_receives;
        let visibility = self.visibility;
        for (id, message) in state.messages.iter_mut() {
            if message.acked || message.dead {
                continue;
            }
            if message.invisible_until.is_some_and(|t| t > now) {
                in_flight.get_or_insert_with(|| (id.clone(), message.clone()));
                continue;
            }
            if records.len() >= max {
                continue;
            }
            if message.receive_count >= max_receives {
                message.dead = true;
                continue;
            }
            message.receive_count += 1;
            message.invisible_until = Some(now + visibility);
            records.push(record(id, message, false));
        }
        if duplicate && !records.is_empty() {
            if let Some((id, message)) = in_flight {
                records.push(record(&id, &message, false));
                state.in_flight_duplicates += 1;
            }
        }
        if records.is_empty() {
            return None;
        }
        state.deliveries += 1;
        Some(json!({ "Records": records }))
    }

    /// The FIFO receive: groups in the order of their oldest pending message, none with a
    /// message in flight, each group's messages in order and as many as fit.
    fn receive_fifo(&self, max: usize) -> Option<Value> {
        let now = Instant::now();
        let mut state = self.state.lock().unwrap();
        let pending = |m: &Message| !m.acked && !m.dead;
        let blocked: BTreeSet<String> = state
            .messages
            .values()
            .filter(|m| pending(m) && m.invisible_until.is_some_and(|t| t > now))
            .filter_map(|m| m.group.clone())
            .collect();
        // The ids are in send order: each group's messages in order, and the groups in the
        // order of their oldest pending message.
        let mut groups: Vec<(String, Vec<String>)> = Vec::new();
        for (id, message) in &state.messages {
            let group = message.group.clone().expect("FIFO messages have a group");
            if !pending(message) || blocked.contains(&group) {
                continue;
            }
            match groups.iter_mut().find(|(g, _)| *g == group) {
                Some((_, ids)) => ids.push(id.clone()),
                None => groups.push((group, vec![id.clone()])),
            }
        }
        let mut records = Vec::new();
        'groups: for (_, ids) in groups {
            for id in ids {
                if records.len() >= max {
                    break 'groups;
                }
                let message = state.messages.get_mut(&id).expect("listed above");
                if message.receive_count >= self.max_receives {
                    // Dead-lettered: the group goes on with its next message.
                    message.dead = true;
                    continue;
                }
                message.receive_count += 1;
                message.invisible_until = Some(now + self.visibility);
                records.push(record(&id, message, true));
            }
        }
        if records.is_empty() {
            return None;
        }
        state.deliveries += 1;
        Some(json!({ "Records": records }))
    }

    /// Deletes acknowledged messages.
    pub fn ack<'a>(&self, ids: impl IntoIterator<Item = &'a str>) {
        let mut state = self.state.lock().unwrap();
        for id in ids {
            if let Some(message) = state.messages.get_mut(id) {
                if !message.dead {
                    message.acked = true;
                }
            }
        }
    }

    /// Every message is acknowledged or dead-lettered.
    pub fn is_drained(&self) -> bool {
        let state = self.state.lock().unwrap();
        state.messages.values().all(|m| m.acked || m.dead)
    }

    /// Dead-lettered message ids.
    pub fn dead_letters(&self) -> Vec<String> {
        let state = self.state.lock().unwrap();
        state
            .messages
            .iter()
            .filter(|(_, m)| m.dead)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Acknowledged message ids.
    pub fn acked(&self) -> Vec<String> {
        let state = self.state.lock().unwrap();
        state
            .messages
            .iter()
            .filter(|(_, m)| m.acked)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The counts so far.
    pub fn stats(&self) -> QueueStats {
        let state = self.state.lock().unwrap();
        QueueStats {
            sent: state.sent,
            deliveries: state.deliveries,
            in_flight_duplicates: state.in_flight_duplicates,
            acked: state.messages.values().filter(|m| m.acked).count(),
            dead: state.messages.values().filter(|m| m.dead).count(),
            redelivered: state
                .messages
                .values()
                .filter(|m| m.acked && m.receive_count > 1)
                .count(),
        }
    }
}

fn record(id: &str, message: &Message, fifo: bool) -> Value {
    let mut attributes = serde_json::Map::new();
    if let Some(key) = &message.idempotency_key {
        attributes.insert(
            "Idempotency-Key".into(),
            json!({"stringValue": key, "stringListValues": [], "binaryListValues": [], "dataType": "String"}),
        );
    }
    let mut record = json!({
        "messageId": id,
        "receiptHandle": format!("AQEB{id}/{}", message.receive_count),
        "body": message.body,
        "attributes": {
            "ApproximateReceiveCount": message.receive_count.max(1).to_string(),
            "SentTimestamp": "1763740800000",
            "SenderId": "AROAIWPX5BD2BHG722MW4:chaos",
            "ApproximateFirstReceiveTimestamp": "1763740800037"
        },
        "messageAttributes": attributes,
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:orders",
        "awsRegion": "us-east-1"
    });
    if fifo {
        let group = message
            .group
            .as_deref()
            .expect("FIFO messages have a group");
        let attributes = &mut record["attributes"];
        attributes["MessageGroupId"] = json!(group);
        // Large, growing with each send, not consecutive: as SQS assigns them.
        let sequence_number = 18_849_496_460_467_696_128u128 + u128::from(message.number) * 65_536;
        attributes["SequenceNumber"] = json!(sequence_number.to_string());
        attributes["MessageDeduplicationId"] = json!(format!("dedup-{}", message.number));
        record["eventSourceARN"] = json!("arn:aws:sqs:us-east-1:123456789012:orders.fifo");
    }
    record
}

#[cfg(test)]
mod tests;
