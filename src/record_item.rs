//! The stored form of a record: its attribute names, and its size as DynamoDB counts it,
//! which every store checks against the same limit.

use crate::record::Record;

/// DynamoDB's maximum item size, in bytes; every store refuses records above it, so that
/// what works on the embedded store works on DynamoDB.
pub const DYNAMODB_ITEM_LIMIT_BYTES: usize = 400 * 1024;

/// The most a DynamoDB number attribute takes (38 significant digits).
const NUMBER_BYTES: usize = 21;

/// The longest stored payload hash (`v2:` and 64 hex digits). A completion is sized as if
/// the record had one, since the stores do not read the record before updating it.
const PAYLOAD_HASH_MAX_BYTES: usize = 67;

/// The table's attribute names. The defaults are Powertools for AWS Lambda's, so one table
/// layout serves both; `lease_owner` is this crate's addition (fencing).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AttributeNames {
    /// Partition key (S). Default `id`.
    pub key: String,
    /// `INPROGRESS` or `COMPLETED` (S). Default `status`.
    pub status: String,
    /// Record expiry in epoch seconds (N), the table's TTL attribute. Default `expiration`.
    pub expiration: String,
    /// Lease end in epoch milliseconds (N). Default `in_progress_expiration`.
    pub in_progress_expiration: String,
    /// Stored result as JSON (S). Default `data`.
    pub data: String,
    /// Payload hash (S). Default `validation`.
    pub validation: String,
    /// Lease owner token (S). Default `lease_owner`.
    pub owner: String,
}

impl Default for AttributeNames {
    fn default() -> Self {
        Self {
            key: "id".into(),
            status: "status".into(),
            expiration: "expiration".into(),
            in_progress_expiration: "in_progress_expiration".into(),
            data: "data".into(),
            validation: "validation".into(),
            owner: "lease_owner".into(),
        }
    }
}

impl AttributeNames {
    /// Sets the partition key attribute name.
    pub fn with_key(mut self, name: impl Into<String>) -> Self {
        self.key = name.into();
        self
    }

    /// Sets the status attribute name.
    pub fn with_status(mut self, name: impl Into<String>) -> Self {
        self.status = name.into();
        self
    }

    /// Sets the expiration (TTL) attribute name.
    pub fn with_expiration(mut self, name: impl Into<String>) -> Self {
        self.expiration = name.into();
        self
    }

    /// Sets the lease-end attribute name.
    pub fn with_in_progress_expiration(mut self, name: impl Into<String>) -> Self {
        self.in_progress_expiration = name.into();
        self
    }

    /// Sets the result attribute name.
    pub fn with_data(mut self, name: impl Into<String>) -> Self {
        self.data = name.into();
        self
    }

    /// Sets the payload hash attribute name.
    pub fn with_validation(mut self, name: impl Into<String>) -> Self {
        self.validation = name.into();
        self
    }

    /// Sets the lease owner attribute name.
    pub fn with_owner(mut self, name: impl Into<String>) -> Self {
        self.owner = name.into();
        self
    }
}

/// The size of `record` as an item with these attribute names, as DynamoDB counts it
/// (attribute names and values in UTF-8 bytes; numbers at their largest).
pub(crate) fn record_size_bytes(names: &AttributeNames, record: &Record) -> usize {
    let text = |name: &str, value: Option<&str>| value.map_or(0, |v| name.len() + v.len());
    let number = |name: &str, value: Option<u64>| value.map_or(0, |_| name.len() + NUMBER_BYTES);
    text(&names.key, Some(record.key.as_str()))
        + text(&names.status, Some(record.status.as_str()))
        + number(&names.expiration, Some(record.expiration_secs))
        + number(&names.in_progress_expiration, record.lease_expiration_ms)
        + text(&names.owner, record.owner.as_ref().map(|o| o.as_str()))
        + text(&names.data, record.data.as_deref())
        + text(&names.validation, record.validation.as_deref())
}

/// The size of a record completed (or failed) in place with `data`: the record's payload
/// hash is counted at its largest, since the update does not read it.
pub(crate) fn completed_size_bytes(
    names: &AttributeNames,
    request: &crate::store::CompleteRequest,
) -> usize {
    let record = Record {
        key: request.key.clone(),
        status: request.status,
        expiration_secs: request.expiration_secs,
        lease_expiration_ms: None,
        owner: Some(request.owner.clone()),
        data: Some(request.data.clone()),
        validation: None,
    };
    record_size_bytes(names, &record) + names.validation.len() + PAYLOAD_HASH_MAX_BYTES
}

/// Refuses a record over [`DYNAMODB_ITEM_LIMIT_BYTES`].
pub(crate) fn check_item_size(size_bytes: usize) -> Result<(), crate::store::StoreError> {
    if size_bytes > DYNAMODB_ITEM_LIMIT_BYTES {
        return Err(crate::store::StoreError::ItemTooLarge {
            size_bytes,
            limit_bytes: DYNAMODB_ITEM_LIMIT_BYTES,
        });
    }
    Ok(())
}

/// DynamoDB's limit on the items of one transaction, the record included.
pub const DYNAMODB_TRANSACTION_ITEM_LIMIT: usize = 100;
/// DynamoDB's limit on the size of one transaction, in bytes.
pub const DYNAMODB_TRANSACTION_LIMIT_BYTES: usize = 4 * 1024 * 1024;

/// Checks a commit against DynamoDB's limits: values nested at most 32 deep, the record at
/// most 400 KB, the transaction at most 100 items (the record included) and 4 MB. Answers
/// the record's size.
pub(crate) fn check_commit_size(
    names: &AttributeNames,
    request: &crate::store::CommitRequest,
) -> Result<usize, crate::store::StoreError> {
    if let Some(index) = request.writes.iter().position(|w| w.too_deeply_nested()) {
        return Err(crate::store::StoreError::InvalidRequest {
            write_index: Some(index),
            reason: format!(
                "Nesting Levels have exceeded supported limits ({} levels)",
                crate::write::DYNAMODB_MAX_NESTING
            )
            .into(),
        });
    }
    let record_bytes = record_size_bytes(names, &request.record(request.validation.clone()));
    check_item_size(record_bytes)?;
    let items = request.writes.len() + 1;
    let bytes = record_bytes
        + request
            .writes
            .iter()
            .map(crate::write::Write::size_bytes)
            .sum::<usize>();
    if items > DYNAMODB_TRANSACTION_ITEM_LIMIT || bytes > DYNAMODB_TRANSACTION_LIMIT_BYTES {
        return Err(crate::store::StoreError::TransactionTooLarge {
            items,
            item_limit: DYNAMODB_TRANSACTION_ITEM_LIMIT,
            size_bytes: bytes,
            limit_bytes: DYNAMODB_TRANSACTION_LIMIT_BYTES,
        });
    }
    Ok(record_bytes)
}
