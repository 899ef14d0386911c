//! Many records in few calls: `BatchGetItem`, strongly consistent, 100 keys per call, its
//! unprocessed keys asked again a bounded number of times.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};

use super::{unavailable, DynamoDbStore};
use crate::key::IdempotencyKey;
use crate::record::Record;
use crate::store::StoreError;

/// The most keys DynamoDB takes in one `BatchGetItem`.
pub(crate) const MAX_KEYS_PER_CALL: usize = 100;

/// How many times keys DynamoDB left unprocessed (throttling, the 16 MB answer limit) are
/// asked again before they are given up (absent from the answer: the caller asks for them
/// with a conditional write instead).
const UNPROCESSED_ROUNDS: usize = 2;

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
            .map(|chunk| self.get_chunk(chunk.iter().map(|k| self.key_item(k)).collect()));
        let found = futures_util::future::try_join_all(chunks).await?;
        Ok(found.into_iter().flatten().collect())
    }

    /// One chunk of at most 100 keys, with its unprocessed keys asked again.
    async fn get_chunk(&self, mut keys: Vec<Key>) -> Result<Vec<Record>, StoreError> {
        let mut records = Vec::with_capacity(keys.len());
        for _ in 0..=UNPROCESSED_ROUNDS {
            if keys.is_empty() {
                break;
            }
            crate::metrics::dynamodb_call();
            let request = KeysAndAttributes::builder()
                .set_keys(Some(std::mem::take(&mut keys)))
                .consistent_read(true)
                .build()
                .map_err(unavailable)?;
            let output = self
                .client
                .batch_get_item()
                .request_items(&self.table, request)
                .send()
                .await
                .map_err(unavailable)?;
            for item in output
                .responses()
                .and_then(|tables| tables.get(&self.table))
                .into_iter()
                .flatten()
            {
                records.push(self.parse(item)?);
            }
            if let Some(left) = output
                .unprocessed_keys()
                .and_then(|tables| tables.get(&self.table))
            {
                keys = left.keys().to_vec();
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
