//! An in-memory SQS queue with at-least-once delivery: visibility timeouts, receive counts,
//! a dead-letter queue after a maximum receive count, and (on request) a message delivered
//! again while it is still in flight.

use std::collections::BTreeMap;
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
}

impl Queue {
    /// A queue with a `visibility` timeout that dead-letters a message received more than
    /// `max_receives` times.
    pub fn new(visibility: Duration, max_receives: u32) -> Self {
        Self {
            state: Mutex::default(),
            visibility,
            max_receives,
        }
    }

    /// Sends a message; returns its new message id.
    pub fn send(&self, body: &str, idempotency_key: Option<&str>) -> String {
        let mut state = self.state.lock().unwrap();
        state.sent += 1;
        let id = format!("a1b2c3d4-0000-4000-8000-{:012}", state.sent);
        state.messages.insert(
            id.clone(),
            Message {
                body: body.to_string(),
                idempotency_key: idempotency_key.map(str::to_string),
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
    /// message still in flight elsewhere is delivered again as well.
    pub fn receive(&self, max: usize, duplicate: bool) -> Option<Value> {
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
            records.push(record(id, message));
        }
        if duplicate && !records.is_empty() {
            if let Some((id, message)) = in_flight {
                records.push(record(&id, &message));
                state.in_flight_duplicates += 1;
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
        }
    }
}

fn record(id: &str, message: &Message) -> Value {
    let mut attributes = serde_json::Map::new();
    if let Some(key) = &message.idempotency_key {
        attributes.insert(
            "Idempotency-Key".into(),
            json!({"stringValue": key, "stringListValues": [], "binaryListValues": [], "dataType": "String"}),
        );
    }
    json!({
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
    })
}
