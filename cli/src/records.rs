//! The `get`, `evict` and `release` commands: one record, read through the library's store,
//! changed only by conditional writes.

use std::collections::HashMap;
use std::time::SystemTime;

use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::types::AttributeValue;
use lambda_idempotency::key::IdempotencyKey;
use lambda_idempotency::record::{Record, Status};
use lambda_idempotency::store::{DynamoDbStore, Fenced, Store, StoreError};

use crate::view::{self, lease_live};
use crate::CliError;

fn not_found(store: &DynamoDbStore, id: &str) -> CliError {
    CliError::NotFound {
        id: id.to_string(),
        table: store.table().to_string(),
    }
}

/// The record stored under `id` (a strongly consistent read by the library's
/// [`Store::get`]), or [`CliError::NotFound`]; an item there that is not a record (in a
/// table shared with other items) is [`CliError::Malformed`], as `list` names one.
pub async fn get(store: &DynamoDbStore, id: &str) -> Result<Record, CliError> {
    store
        .get(&IdempotencyKey::from_stored(id))
        .await?
        .ok_or_else(|| not_found(store, id))
}

/// Deletes the `COMPLETED` or `FAILED` record under `id`, so that the next delivery of its
/// message runs the handler again. Returns the record deleted.
///
/// Reads the record first (the library's [`Store::get`]) and deletes it only as read
/// ([`delete_as_read`]), so only an item the library reads as a record is ever deleted:
/// - an absent one is [`CliError::NotFound`];
/// - an item that is not a record (in a table shared with other items, one that happens to
///   have a `status`) is refused ([`CliError::Refused`]), and so is an `INPROGRESS` record
///   (use `release`);
/// - a record changed since it was read (taken over after it expired, evicted by someone
///   else) is left alone ([`CliError::Changed`]).
pub async fn evict(store: &DynamoDbStore, id: &str) -> Result<Record, CliError> {
    let record = record_to_delete(store, id, "evict").await?;
    if record.status == Status::InProgress {
        return Err(CliError::Refused(format!(
            "record {id:?} is {}, not COMPLETED or FAILED: evict only deletes finished \
             records; for a stuck INPROGRESS record use `release`",
            record.status
        )));
    }
    match delete_as_read(store, &record).await? {
        Fenced::Applied => Ok(record),
        Fenced::LeaseLost => Err(CliError::Changed(format!(
            "record {id:?} is no longer {} with the owner, lease end and expiry read; run \
             evict again to see it as it is now",
            record.status
        ))),
    }
}

/// The record under `id` that `command` is to delete, as the library reads it: an absent one
/// is [`CliError::NotFound`], and an item that is not a record is refused
/// ([`CliError::Refused`]), so that only records are ever deleted.
async fn record_to_delete(
    store: &DynamoDbStore,
    id: &str,
    command: &str,
) -> Result<Record, CliError> {
    match store.get(&IdempotencyKey::from_stored(id)).await {
        Ok(Some(record)) => Ok(record),
        Ok(None) => Err(not_found(store, id)),
        Err(StoreError::Malformed { reason, .. }) => Err(CliError::Refused(format!(
            "item {id:?} is not a record ({reason}): {command} deletes only records; delete \
             another item with DynamoDB's own tools if it must go"
        ))),
        Err(err) => Err(err.into()),
    }
}

/// The key attributes of the record stored under `id`, in the store's layout (a
/// single-table layout's static partition key value and sort key, or the partition key).
fn key_of(store: &DynamoDbStore, id: &str) -> HashMap<String, AttributeValue> {
    store
        .attribute_names()
        .item_key(id)
        .into_iter()
        .map(|(name, value)| (name.to_string(), s(value)))
        .collect()
}

fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_string())
}

/// Releases the `INPROGRESS` record under `id` as the library's own release does: the
/// record is deleted, so the next delivery takes a fresh lease and runs the handler.
///
/// Reads the record first. Refused ([`CliError::Refused`]) when the item is not a record,
/// when it is not `INPROGRESS`, or when its lease is live at `now` ([`view::lease_live`])
/// and `force` is false. The delete is then [`release_held`]: conditioned on the status, the
/// owner and (without `force`) the lease end and expiry that were read.
pub async fn release(
    store: &DynamoDbStore,
    id: &str,
    force: bool,
    now: SystemTime,
) -> Result<Record, CliError> {
    let record = record_to_delete(store, id, "release").await?;
    if record.status != Status::InProgress {
        return Err(CliError::Refused(format!(
            "record {id:?} is {}, not INPROGRESS: release only frees leases; to make a \
             finished record run again use `evict`",
            record.status
        )));
    }
    if lease_live(&record, now) && !force {
        let until = record.lease_expiration_ms.map_or_else(
            || "it has no lease end, so it never elapses".to_string(),
            |ms| {
                format!(
                    "it ends {} ({})",
                    view::rfc3339_ms(ms),
                    view::relative(view::from_epoch_ms(ms), now)
                )
            },
        );
        return Err(CliError::Refused(format!(
            "the lease of {id:?} is live ({until}); its holder may still be running: wait for \
             it to elapse, or pass --force only if the holder is surely dead"
        )));
    }
    release_held(store, &record, force).await?;
    Ok(record)
}

/// Deletes `record` only if it is still `INPROGRESS` under the owner it was read with and,
/// without `force`, with the lease end and expiry it was read with ([`delete_as_read`]): a
/// holder whose heartbeat extended an elapsed lease after the read keeps it. With `force`
/// the delete is the library's [`Store::release`] (`#status = :inprogress AND #owner =
/// :owner`). A record taken over by another owner, extended (without `force`), completed or
/// deleted since it was read is left alone and reported as [`CliError::Changed`].
///
/// A record without an owner (written by another tool) is deleted, even with `force`, only
/// while it is `INPROGRESS` with no owner and the lease end and expiry read.
pub async fn release_held(
    store: &DynamoDbStore,
    record: &Record,
    force: bool,
) -> Result<(), CliError> {
    let fenced = match &record.owner {
        Some(owner) if force => store.release(&record.key, owner).await?,
        _ => delete_as_read(store, record).await?,
    };
    match fenced {
        Fenced::Applied => Ok(()),
        Fenced::LeaseLost => {
            let now = match store.get(&record.key).await {
                Ok(Some(current)) => format!(
                    "it is now {} under owner {}, lease end {}",
                    current.status,
                    current.owner.as_ref().map_or("(none)", |o| o.as_str()),
                    current
                        .lease_expiration_ms
                        .map_or("(none)".to_string(), view::rfc3339_ms),
                ),
                Ok(None) => "it is gone".to_string(),
                Err(err) => format!("re-reading it failed: {err}"),
            };
            Err(CliError::Changed(format!(
                "record {:?} is no longer INPROGRESS under owner {} with the lease end and \
                 expiry read ({now})",
                record.key.as_str(),
                record.owner.as_ref().map_or("(none)", |o| o.as_str()),
            )))
        }
    }
}

/// Deletes `record` if it is still exactly as read: the same status, owner (or none), lease
/// end (or none) and expiry.
pub async fn delete_as_read(store: &DynamoDbStore, record: &Record) -> Result<Fenced, CliError> {
    let names = store.attribute_names();
    let mut condition = "#status = :status AND #exp = :exp".to_string();
    let mut request = store
        .client()
        .delete_item()
        .table_name(store.table())
        .set_key(Some(key_of(store, record.key.as_str())))
        .expression_attribute_names("#status", &names.status)
        .expression_attribute_names("#exp", &names.expiration)
        .expression_attribute_names("#owner", &names.owner)
        .expression_attribute_names("#ipe", &names.in_progress_expiration)
        .expression_attribute_values(":status", s(record.status.as_str()))
        .expression_attribute_values(
            ":exp",
            AttributeValue::N(record.expiration_secs.to_string()),
        );
    match &record.owner {
        Some(owner) => {
            condition.push_str(" AND #owner = :owner");
            request = request.expression_attribute_values(":owner", s(owner.as_str()));
        }
        // Read as no owner: absent, or not a string (the library reads only a string).
        None => {
            condition.push_str(
                " AND (attribute_not_exists(#owner) OR NOT attribute_type(#owner, :text))",
            );
            request = request.expression_attribute_values(":text", s("S"));
        }
    }
    match record.lease_expiration_ms {
        Some(ms) => {
            condition.push_str(" AND #ipe = :ipe");
            request =
                request.expression_attribute_values(":ipe", AttributeValue::N(ms.to_string()));
        }
        None => condition.push_str(" AND attribute_not_exists(#ipe)"),
    }
    match request.condition_expression(condition).send().await {
        Ok(_) => Ok(Fenced::Applied),
        Err(err) => match err.as_service_error() {
            Some(DeleteItemError::ConditionalCheckFailedException(_)) => Ok(Fenced::LeaseLost),
            _ => Err(CliError::aws("DeleteItem", err)),
        },
    }
}
