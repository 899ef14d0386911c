//! Many records in few calls: `BatchGetItem`, strongly consistent, 100 keys per call, its
//! unprocessed keys asked again a bounded number of times, after a backoff.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::config::AsyncSleep;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};

use super::{unavailable, unread, DynamoDbStore};
use crate::key::IdempotencyKey;
use crate::record::Record;
use crate::store::{read_together, readable, StoreError};

/// The most keys DynamoDB takes in one `BatchGetItem`.
pub(crate) const MAX_KEYS_PER_CALL: usize = 100;

/// How many times keys DynamoDB left unprocessed (throttling, the 16 MB answer limit) are
/// asked again before they are given up (absent from the answer: the caller asks for them
/// with a conditional write instead).
const UNPROCESSED_ROUNDS: u32 = 2;

/// The wait before unprocessed keys are asked again the first time; it doubles each round
/// (AWS advises a backoff: keys asked again at once on a throttled table are usually
/// throttled again).
const UNPROCESSED_BACKOFF: Duration = Duration::from_millis(50);

type Key = HashMap<String, AttributeValue>;

impl DynamoDbStore {
    pub(crate) async fn get_many_inner(
        &self,
        keys: &[IdempotencyKey],
    ) -> Result<Vec<Record>, StoreError> {
        let mut unique: Vec<&IdempotencyKey> = keys.iter().collect();
        unique.sort();
        unique.dedup();
        let chunks = unique
            .chunks(MAX_KEYS_PER_CALL)
            .map(|chunk| chunk.iter().map(|k| self.key_item(k)).collect())
            .collect::<Result<Vec<Vec<Key>>, StoreError>>()?;
        let reads = chunks.into_iter().map(|keys| self.get_chunk(keys));
        read_together(futures_util::future::join_all(reads).await)
    }

    /// One chunk of at most 100 keys, with its unprocessed keys asked again.
    async fn get_chunk(&self, mut keys: Vec<Key>) -> Result<Vec<Record>, StoreError> {
        let mut records = Vec::with_capacity(keys.len());
        for round in 0..=UNPROCESSED_ROUNDS {
            if keys.is_empty() {
                break;
            }
            if round > 0 {
                // Through the client's own sleep (the one its retries use); a client built
                // without one asks again at once.
                if let Some(sleep) = self.client.config().sleep_impl() {
                    sleep.sleep(UNPROCESSED_BACKOFF * (1 << (round - 1))).await;
                }
            }
            crate::metrics::dynamodb_call();
            let request = KeysAndAttributes::builder()
                .set_keys(Some(std::mem::take(&mut keys)))
                .consistent_read(true)
                .build()
                .map_err(unavailable)?;
            let mut output = self
                .client
                .batch_get_item()
                .request_items(&self.table, request)
                .send()
                .await
                .map_err(|err| unread(err, &self.table))?;
            // The answers are read once: their strings move into the records.
            let items = output
                .responses
                .take()
                .and_then(|mut tables| tables.remove(&self.table))
                .unwrap_or_default();
            for item in items {
                records.extend(readable(self.record_from_owned_item(item).map(Some)));
            }
            if let Some(left) = output
                .unprocessed_keys
                .take()
                .and_then(|mut tables| tables.remove(&self.table))
            {
                keys = left.keys;
            }
        }
        if !keys.is_empty() {
            tracing::debug!(
                unprocessed = keys.len(),
                "BatchGetItem left keys unprocessed; they are asked with conditional writes"
            );
        }
        Ok(records)
    }
}
