//! The limits every store enforces (DynamoDB's, so that what works on the embedded store
//! works on DynamoDB) and the one way sizes are counted against them: a record's item, and a
//! transaction of a record with a handler's writes.

use crate::store::request::RecordShape;
#[cfg(any(test, feature = "testing", feature = "dynamodb"))]
use crate::store::write::MAX_NESTING;
#[cfg(any(test, feature = "testing", feature = "dynamodb"))]
use crate::store::{Attr, CommitRequest, Item, Write};
use crate::store::{AttributeNames, CompleteRequest, StoreError};

/// The largest item, in bytes (DynamoDB's limit): every store refuses records and items
/// above it.
pub const MAX_ITEM_BYTES: usize = 400 * 1024;

/// The most a DynamoDB number attribute takes (38 significant digits).
const NUMBER_BYTES: usize = 21;

/// The longest stored payload hash (`v2:` or `v3:`, and 64 hex digits). A completion is sized as if
/// the record had one, since the stores do not read the record before updating it.
const PAYLOAD_HASH_MAX_BYTES: usize = 67;

/// The size of a record of this `shape` as an item with these attribute names, as DynamoDB
/// counts it (attribute names and values in UTF-8 bytes; numbers at their largest).
pub(crate) fn record_size_bytes(names: &AttributeNames, shape: &RecordShape<'_>) -> usize {
    let text = |name: &str, value: Option<&str>| value.map_or(0, |v| name.len() + v.len());
    let number = |name: &str, present: bool| {
        if present {
            name.len() + NUMBER_BYTES
        } else {
            0
        }
    };
    names
        .item_key(shape.key)
        .into_iter()
        .map(|(name, value)| text(name, Some(value)))
        .sum::<usize>()
        + text(&names.status, Some(shape.status.as_str()))
        + number(&names.expiration, true)
        + number(&names.in_progress_expiration, shape.leased)
        + text(&names.owner, shape.owner)
        + text(&names.data, shape.data)
        + text(&names.validation, shape.validation)
}

/// The size of a record completed (or failed) in place with `data`: the record's payload
/// hash is counted at its largest, since the update does not read it.
pub(crate) fn completed_size_bytes(names: &AttributeNames, request: &CompleteRequest) -> usize {
    let shape = RecordShape {
        key: request.key.as_str(),
        status: request.status,
        leased: false,
        owner: Some(request.owner.as_str()),
        data: Some(&request.data),
        validation: None,
    };
    record_size_bytes(names, &shape) + names.validation.len() + PAYLOAD_HASH_MAX_BYTES
}

/// Refuses a record over [`MAX_ITEM_BYTES`].
pub(crate) fn check_item_size(size_bytes: usize) -> Result<(), StoreError> {
    if size_bytes > MAX_ITEM_BYTES {
        return Err(StoreError::ItemTooLarge {
            size_bytes,
            limit_bytes: MAX_ITEM_BYTES,
        });
    }
    Ok(())
}

/// The most items one transaction writes, the record included (DynamoDB's limit).
pub const MAX_TRANSACTION_ITEMS: usize = 100;
/// The largest transaction, in bytes (DynamoDB's limit).
pub const MAX_TRANSACTION_BYTES: usize = 4 * 1024 * 1024;

/// Checks a commit against DynamoDB's limits: values nested at most 32 deep, the record at
/// most 400 KB, the transaction at most 100 items (the record included) and 4 MB. Answers
/// the record's size.
#[cfg(any(test, feature = "testing", feature = "dynamodb"))]
pub(crate) fn check_commit_size(
    names: &AttributeNames,
    request: &CommitRequest,
) -> Result<usize, StoreError> {
    if let Some(index) = request.writes.iter().position(|w| w.too_deeply_nested()) {
        return Err(StoreError::InvalidRequest {
            write_index: Some(index),
            reason: format!(
                "Nesting Levels have exceeded supported limits ({} levels)",
                MAX_NESTING
            )
            .into(),
        });
    }
    let record_bytes = record_size_bytes(names, &request.shape());
    check_item_size(record_bytes)?;
    let items = request.writes.len() + 1;
    let bytes = record_bytes + request.writes.iter().map(write_size_bytes).sum::<usize>();
    if items > MAX_TRANSACTION_ITEMS || bytes > MAX_TRANSACTION_BYTES {
        return Err(StoreError::TransactionTooLarge {
            items,
            item_limit: MAX_TRANSACTION_ITEMS,
            size_bytes: bytes,
            limit_bytes: MAX_TRANSACTION_BYTES,
        });
    }
    Ok(record_bytes)
}

/// The size of an item (or key) as DynamoDB counts it, approximately: names and values in
/// UTF-8 bytes, numbers by their text.
#[cfg(any(test, feature = "testing", feature = "dynamodb"))]
pub(crate) fn item_size_bytes(item: &Item) -> usize {
    item.iter().map(|(k, v)| k.len() + attr_size_bytes(v)).sum()
}

/// The size of one attribute value, as [`item_size_bytes`] counts it.
#[cfg(any(test, feature = "testing", feature = "dynamodb"))]
pub(crate) fn attr_size_bytes(value: &Attr) -> usize {
    match value {
        Attr::S(s) | Attr::N(s) => s.len(),
        Attr::B(b) => b.len(),
        Attr::Bool(_) | Attr::Null => 1,
        Attr::L(items) => 3 + items.iter().map(|v| 1 + attr_size_bytes(v)).sum::<usize>(),
        Attr::M(map) => item_size_bytes(map) + 3 + map.len(),
        Attr::Ss(items) | Attr::Ns(items) => items.iter().map(String::len).sum(),
    }
}

/// An approximation of a write's size in a transaction request, in bytes.
#[cfg(any(test, feature = "testing", feature = "dynamodb"))]
pub(crate) fn write_size_bytes(write: &Write) -> usize {
    write.table.len()
        + item_size_bytes(&write.item)
        + write.update_expression.as_ref().map_or(0, String::len)
        + write.condition_expression.as_ref().map_or(0, String::len)
        + write
            .names
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>()
        + item_size_bytes(&write.values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_counts_its_table_key_and_expression() {
        let w = Write::update("ledger", [("account", Attr::s("a"))], "ADD #b :v")
            .name("#b", "balance")
            .value(":v", Attr::n(-5));
        assert!(write_size_bytes(&w) > "ledgeraccountaADD #b :v".len());
    }
}
