//! Batch behaviour on the embedded store, driven by the sample events in `events/`.

mod deadlines;
mod duplicates;
mod failures;
mod fifo;
mod hooks;
mod keys;
mod leases;
mod sample_events;
mod service;
mod store_down;

use lambda_idempotency_test_support as support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use lambda_idempotency::batch::{BatchProcessor, BatchReport, Scheduling};
use lambda_idempotency::clock::{Clock, ManualClock};
use lambda_idempotency::store::InMemoryStore;
use lambda_idempotency::{Config, Error, IdempotencyLayer, Processed};
use order_consumer::{order_key, Order};
use serde::{Deserialize, Serialize};
use support::invocation;
use tower::Service;

const REMAINING: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Receipt {
    event_id: String,
    applied: i64,
}

/// Counts how often the handler applied each event: the side effect under test.
#[derive(Debug, Clone, Default)]
struct Effects {
    applied: Arc<Mutex<HashMap<String, usize>>>,
}

impl Effects {
    fn count(&self, event_id: &str) -> usize {
        self.applied
            .lock()
            .unwrap()
            .get(event_id)
            .copied()
            .unwrap_or(0)
    }
    fn total(&self) -> usize {
        self.applied.lock().unwrap().values().sum()
    }
}

/// What the handler does besides applying the order.
type Hook = Arc<dyn Fn(&Order) + Send + Sync>;

struct Setup {
    store: InMemoryStore,
    clock: ManualClock,
    effects: Effects,
    config: Config,
    mode: Scheduling,
    hook: Hook,
}

impl Setup {
    fn new() -> Self {
        Self {
            store: InMemoryStore::new(),
            clock: ManualClock::starting_now(),
            effects: Effects::default(),
            config: Config::new().with_key_prefix("orders"),
            mode: Scheduling::default(),
            hook: Arc::new(|_| {}),
        }
    }

    fn processor(
        &self,
    ) -> BatchProcessor<
        impl Service<
                lambda_idempotency::batch::BatchRecord<SqsMessage>,
                Response = Processed<Receipt>,
                Error = Error,
            > + Clone
            + Send
            + Sync
            + 'static,
        ManualClock,
    > {
        let effects = self.effects.clone();
        let hook = self.hook.clone();
        let layer = IdempotencyLayer::new(self.store.clone())
            .with_key(order_key())
            .with_clock(self.clock.clone())
            .with_config(self.config.clone());
        let handler = layer.handler(move |message: SqsMessage| {
            let effects = effects.clone();
            let hook = hook.clone();
            async move {
                let order: Order = serde_json::from_str(message.body.as_deref().unwrap_or(""))?;
                hook(&order);
                *effects
                    .applied
                    .lock()
                    .unwrap()
                    .entry(order.event_id.clone())
                    .or_default() += 1;
                Ok::<_, serde_json::Error>(Receipt {
                    event_id: order.event_id,
                    applied: order.amount,
                })
            }
        });
        BatchProcessor::new(handler)
            .with_scheduling(self.mode)
            .with_clock(self.clock.clone())
    }

    async fn run(&self, event: SqsEvent) -> BatchReport<Receipt> {
        self.processor()
            .process(invocation(event, self.clock.now(), REMAINING))
            .await
    }
}

fn ids(event: &SqsEvent, indexes: &[usize]) -> Vec<String> {
    indexes
        .iter()
        .map(|&i| event.records[i].message_id.clone().unwrap())
        .collect()
}
