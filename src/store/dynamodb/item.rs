//! A stored item read back as a [`Record`], or a typed error naming its key.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use super::DynamoDbStore;
use crate::key::IdempotencyKey;
use crate::record::{OwnerToken, Record, Status};
use crate::store::StoreError;

impl DynamoDbStore {
    /// The record `item` holds, read as the store reads its own (a `GetItem`, a
    /// `BatchGetItem` answer, the old item of a refused write) under its attribute names:
    /// a status it knows and an expiration are required. [`StoreError::Malformed`], naming
    /// the item's key and what is wrong, when `item` is not such a record (another item of
    /// a shared table, say). For tools that read the table themselves, as the CLI's `list`
    /// does with a `Scan`.
    pub fn record_from_item(
        &self,
        item: &HashMap<String, AttributeValue>,
    ) -> Result<Record, StoreError> {
        let n = &self.names;
        let key = item
            .get(n.stored_key_attribute())
            .and_then(|v| v.as_s().ok())
            .cloned()
            .unwrap_or_default();
        let malformed = |reason: String| StoreError::Malformed {
            key: key.clone(),
            reason,
        };
        let text = |name: &str| item.get(name).and_then(|v| v.as_s().ok()).cloned();
        let number = |name: &str| -> Result<Option<u64>, StoreError> {
            match item.get(name) {
                None => Ok(None),
                Some(value) => {
                    let raw = value
                        .as_n()
                        .map_err(|_| malformed(format!("{name} is not a number")))?;
                    raw.parse::<u64>()
                        .map(Some)
                        .map_err(|_| malformed(format!("{name} is not an integer: {raw}")))
                }
            }
        };
        let status_text = item
            .get(&n.status)
            .and_then(|v| v.as_s().ok())
            .ok_or_else(|| malformed("no status".into()))?;
        let status = Status::parse(status_text)
            .ok_or_else(|| malformed(format!("unknown status {status_text:?}")))?;
        let expiration_secs =
            number(&n.expiration)?.ok_or_else(|| malformed("no expiration".into()))?;
        let lease_expiration_ms = number(&n.in_progress_expiration)?;
        Ok(Record {
            key: IdempotencyKey::from_stored(key),
            status,
            expiration_secs,
            lease_expiration_ms,
            owner: text(&n.owner).map(OwnerToken::new),
            data: text(&n.data),
            validation: text(&n.validation),
        })
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::config::{BehaviorVersion, Config, Region};
    use aws_sdk_dynamodb::Client;

    use super::*;
    use crate::store::AttributeNames;

    type Key = HashMap<String, AttributeValue>;

    fn store() -> DynamoDbStore {
        let config = Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled())
            .build();
        // Every attribute under a name of its own, so a field read under its default name
        // shows.
        let names = AttributeNames::default()
            .with_key("pk")
            .with_status("st")
            .with_expiration("ttl")
            .with_in_progress_expiration("lease_ms")
            .with_owner("holder")
            .with_data("result")
            .with_validation("hash");
        DynamoDbStore::new(Client::from_conf(config), "t").with_attribute_names(names)
    }

    fn item(pairs: &[(&str, AttributeValue)]) -> Key {
        pairs
            .iter()
            .map(|(name, value)| (name.to_string(), value.clone()))
            .collect()
    }

    #[test]
    fn an_item_read_back_is_the_record_it_stored_and_a_malformed_one_names_its_key() {
        let s = |v: &str| AttributeValue::S(v.into());
        let n = |v: &str| AttributeValue::N(v.into());
        let store = store();
        let record = store
            .record_from_item(&item(&[
                ("pk", s("fn#k")),
                ("st", s("COMPLETED")),
                ("ttl", n("100")),
                ("lease_ms", n("5000")),
                ("holder", s("o")),
                ("result", s("7")),
                ("hash", s("v2:h")),
            ]))
            .unwrap();
        assert_eq!(record.key.as_str(), "fn#k");
        assert_eq!(record.status, Status::Completed);
        assert_eq!(record.expiration_secs, 100);
        assert_eq!(record.lease_expiration_ms, Some(5000));
        assert_eq!(record.owner.as_ref().map(|o| o.as_str()), Some("o"));
        assert_eq!(record.data.as_deref(), Some("7"));
        assert_eq!(record.validation.as_deref(), Some("v2:h"));
        for (bad, reason) in [
            (item(&[("pk", s("fn#k")), ("ttl", n("1"))]), "no status"),
            (
                item(&[("pk", s("fn#k")), ("st", s("DONE")), ("ttl", n("1"))]),
                "unknown status \"DONE\"",
            ),
            (
                item(&[
                    ("pk", s("fn#k")),
                    ("st", s("COMPLETED")),
                    ("ttl", n("1")),
                    ("lease_ms", n("1.5")),
                ]),
                "lease_ms is not an integer: 1.5",
            ),
        ] {
            match store.record_from_item(&bad) {
                Err(StoreError::Malformed { key, reason: got }) => {
                    assert_eq!((key.as_str(), got.as_str()), ("fn#k", reason));
                }
                other => panic!("{reason}: {other:?}"),
            }
        }
    }
}
