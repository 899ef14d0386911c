//! A stored item read back as a [`Record`], or a typed error naming its key.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

use super::DynamoDbStore;
use crate::key::IdempotencyKey;
use crate::record::{OwnerToken, Record, Status};
use crate::store::StoreError;

impl DynamoDbStore {
    /// The record `item` holds, read as the store reads its own (a `GetItem`, a
    /// `BatchGetItem` answer, the old item of a refused write) under its attribute names.
    /// A status it knows and an expiration are required. [`StoreError::Malformed`], naming
    /// the item's key and what is wrong, when `item` is not such a record (another item of
    /// a shared table, say). For tools that read the table themselves, as the CLI's `list`
    /// does with a `Scan`.
    pub fn record_from_item(
        &self,
        item: &HashMap<String, AttributeValue>,
    ) -> Result<Record, StoreError> {
        let n = &self.names;
        let text = |name: &str| item.get(name).and_then(|v| v.as_s().ok()).cloned();
        let key = text(n.stored_key_attribute()).unwrap_or_default();
        let (expiration, lease) = (&n.expiration, &n.in_progress_expiration);
        let checked = Checked::read(
            &key,
            item.get(&n.status),
            (expiration, item.get(expiration)),
            (lease, item.get(lease)),
        )?;
        Ok(checked.record(key, text(&n.owner), text(&n.data), text(&n.validation)))
    }

    /// [`record_from_item`](Self::record_from_item) of an item the caller owns, given the
    /// store's attribute names are distinct (a store whose names are not sends no request,
    /// so has no answer to read), in one pass over its attributes: its strings move into the
    /// record instead of being copied, and no name is hashed to be looked up (a
    /// `BatchGetItem`'s answers, read once).
    pub(crate) fn record_from_owned_item(
        &self,
        item: HashMap<String, AttributeValue>,
    ) -> Result<Record, StoreError> {
        debug_assert!(self.names_fault.is_none(), "read with unusable names");
        let n = &self.names;
        let wanted = [
            n.stored_key_attribute(),
            &n.owner,
            &n.data,
            &n.validation,
            &n.status,
            &n.expiration,
            &n.in_progress_expiration,
        ];
        // The names are distinct (`AttributeNames::check`; a store with names that are not
        // refuses every request), so each attribute fills one slot at most.
        let mut found: [Option<AttributeValue>; 7] = Default::default();
        for (name, value) in item {
            if let Some(at) = wanted.iter().position(|w| *w == name) {
                found[at] = Some(value);
            }
        }
        let [key, owner, data, validation, status, expiration, lease] = found;
        let text = |value: Option<AttributeValue>| match value? {
            AttributeValue::S(text) => Some(text),
            _ => None,
        };
        let key = text(key).unwrap_or_default();
        let checked = Checked::read(
            &key,
            status.as_ref(),
            (&n.expiration, expiration.as_ref()),
            (&n.in_progress_expiration, lease.as_ref()),
        )?;
        Ok(checked.record(key, text(owner), text(data), text(validation)))
    }
}

/// A stored item's status, expiration and lease end, checked.
struct Checked {
    status: Status,
    expiration_secs: u64,
    lease_expiration_ms: Option<u64>,
}

impl Checked {
    /// The status, expiration and lease end of the record with `key`, from their attributes
    /// (the two numbers with their names, for the errors).
    fn read(
        key: &str,
        status: Option<&AttributeValue>,
        (expiration_name, expiration): (&str, Option<&AttributeValue>),
        (lease_name, lease): (&str, Option<&AttributeValue>),
    ) -> Result<Self, StoreError> {
        let malformed = |reason: String| StoreError::Malformed {
            key: key.to_string(),
            reason,
        };
        let number =
            |name: &str, value: Option<&AttributeValue>| -> Result<Option<u64>, StoreError> {
                let Some(value) = value else {
                    return Ok(None);
                };
                let raw = value
                    .as_n()
                    .map_err(|_| malformed(format!("{name} is not a number")))?;
                raw.parse::<u64>()
                    .map(Some)
                    .map_err(|_| malformed(format!("{name} is not an integer: {raw}")))
            };
        let status_text = status
            .and_then(|v| v.as_s().ok())
            .ok_or_else(|| malformed("no status".into()))?;
        let status = Status::parse(status_text)
            .ok_or_else(|| malformed(format!("unknown status {status_text:?}")))?;
        let expiration_secs = number(expiration_name, expiration)?
            .ok_or_else(|| malformed("no expiration".into()))?;
        let lease_expiration_ms = number(lease_name, lease)?;
        Ok(Self {
            status,
            expiration_secs,
            lease_expiration_ms,
        })
    }

    fn record(
        self,
        key: String,
        owner: Option<String>,
        data: Option<String>,
        validation: Option<String>,
    ) -> Record {
        Record {
            key: IdempotencyKey::from_stored(key),
            status: self.status,
            expiration_secs: self.expiration_secs,
            lease_expiration_ms: self.lease_expiration_ms,
            owner: owner.map(OwnerToken::new),
            data,
            validation,
        }
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
        store_with(AttributeNames::default())
    }

    fn store_with(names: AttributeNames) -> DynamoDbStore {
        let config = Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled())
            .build();
        // Every attribute under a name of its own, so a field read under its default name
        // shows.
        let names = names
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
        // Read by reference and as an owned item (a `BatchGetItem`'s answers): the same.
        let read = |item: &Key| {
            let owned = store.record_from_owned_item(item.clone());
            let borrowed = store.record_from_item(item);
            assert_eq!(format!("{owned:?}"), format!("{borrowed:?}"));
            borrowed
        };
        let record = read(&item(&[
            ("pk", s("fn#k")),
            ("st", s("COMPLETED")),
            ("ttl", n("100")),
            ("lease_ms", n("5000")),
            ("holder", s("o")),
            ("result", s("7")),
            ("hash", s("v2:h")),
            // Another attribute of the item is not read.
            ("other", s("x")),
        ]))
        .unwrap();
        assert_eq!(record.key.as_str(), "fn#k");
        assert_eq!(record.status, Status::Completed);
        assert_eq!(record.expiration_secs, 100);
        assert_eq!(record.lease_expiration_ms, Some(5000));
        assert_eq!(record.owner.as_ref().map(|o| o.as_str()), Some("o"));
        assert_eq!(record.data.as_deref(), Some("7"));
        assert_eq!(record.validation.as_deref(), Some("v2:h"));
        // A text field of another type reads as absent, as an absent one does.
        let record = read(&item(&[
            ("pk", s("fn#k")),
            ("st", s("INPROGRESS")),
            ("ttl", n("100")),
            ("holder", n("1")),
        ]))
        .unwrap();
        assert_eq!(record.status, Status::InProgress);
        assert_eq!(
            (record.owner, record.data, record.lease_expiration_ms),
            (None, None, None)
        );
        // A key that is missing or of another type reads as empty, and names a malformed
        // record so.
        for key in [None, Some(n("1"))] {
            let mut bad = item(&[("st", s("DONE")), ("ttl", n("1"))]);
            bad.extend(key.map(|key| ("pk".to_string(), key)));
            match read(&bad) {
                Err(StoreError::Malformed { key, .. }) => assert_eq!(key, ""),
                other => panic!("{other:?}"),
            }
        }
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
            match read(&bad) {
                Err(StoreError::Malformed { key, reason: got }) => {
                    assert_eq!((key.as_str(), got.as_str()), ("fn#k", reason));
                }
                other => panic!("{reason}: {other:?}"),
            }
        }
    }

    #[test]
    fn in_the_single_table_layout_the_sort_key_is_the_records_key_read_both_ways() {
        let s = |v: &str| AttributeValue::S(v.into());
        let store = store_with(AttributeNames::default().with_sort_key("sk", "idempotency"));
        let stored = item(&[
            ("pk", s("idempotency")),
            ("sk", s("fn#k")),
            ("st", s("COMPLETED")),
            ("ttl", AttributeValue::N("100".into())),
            ("result", s("7")),
        ]);
        let owned = store.record_from_owned_item(stored.clone()).unwrap();
        let borrowed = store.record_from_item(&stored).unwrap();
        assert_eq!(owned, borrowed);
        assert_eq!(owned.key.as_str(), "fn#k");
        assert_eq!(owned.data.as_deref(), Some("7"));
    }
}
