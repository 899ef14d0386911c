//! [`GuardedWrite`] on [`DynamoDbStore`]: one `PutItem` or `UpdateItem` with the write's
//! condition and `ReturnValuesOnConditionCheckFailure=ALL_OLD`, so a refusal answers the item
//! as it was without a second read; a strongly consistent `GetItem`.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};

use super::commit::{conditioned, sdk_item};
use super::{refused, DynamoDbStore, Requester};
use crate::store::item_size::write_size_bytes;
use crate::store::{Attr, Guarded, GuardedWrite, Item, StoreError, Write, WriteKind};

/// Our attribute value of DynamoDB's (a type this crate does not model reads as `NULL`).
fn attr(value: &AttributeValue) -> Attr {
    match value {
        AttributeValue::S(v) => Attr::S(v.clone()),
        AttributeValue::N(v) => Attr::N(v.clone()),
        AttributeValue::B(v) => Attr::B(v.clone().into_inner()),
        AttributeValue::Bool(v) => Attr::Bool(*v),
        AttributeValue::L(items) => Attr::L(items.iter().map(attr).collect()),
        AttributeValue::M(map) => Attr::M(item(map)),
        AttributeValue::Ss(v) => Attr::Ss(v.clone()),
        AttributeValue::Ns(v) => Attr::Ns(v.clone()),
        _ => Attr::Null,
    }
}

fn item(map: &HashMap<String, AttributeValue>) -> Item {
    map.iter().map(|(k, v)| (k.clone(), attr(v))).collect()
}

/// The answer to a conditional put or update: applied, refused by its condition (with the
/// item as it was, which `refusal` finds in the operation's error), or a store error.
fn answer<O, E, R>(
    result: Result<O, SdkError<E, R>>,
    size: usize,
    table: &str,
    refusal: impl Fn(&E) -> Option<Option<&HashMap<String, AttributeValue>>>,
) -> Result<Guarded, StoreError>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    match result {
        Ok(_) => Ok(Guarded::Applied),
        Err(err) => match err.as_service_error().and_then(&refusal) {
            Some(old) => Ok(Guarded::Refused(old.map(item))),
            None => Err(refused(err, size, table, Requester::Handler)),
        },
    }
}

impl DynamoDbStore {
    async fn write_guarded_inner(&self, write: &Write) -> Result<Guarded, StoreError> {
        let size = write_size_bytes(write);
        let all_old = ReturnValuesOnConditionCheckFailure::AllOld;
        match write.kind {
            WriteKind::Put => {
                crate::metrics::dynamodb_call();
                let put = self.client.put_item().set_item(Some(sdk_item(&write.item)));
                let result = conditioned!(put, write)
                    .return_values_on_condition_check_failure(all_old)
                    .send()
                    .await;
                answer(result, size, &write.table, |e| match e {
                    PutItemError::ConditionalCheckFailedException(ccf) => Some(ccf.item()),
                    _ => None,
                })
            }
            WriteKind::Update => {
                crate::metrics::dynamodb_call();
                let update = self
                    .client
                    .update_item()
                    .set_key(Some(sdk_item(&write.item)))
                    .set_update_expression(write.update_expression.clone());
                let result = conditioned!(update, write)
                    .return_values_on_condition_check_failure(all_old)
                    .send()
                    .await;
                answer(result, size, &write.table, |e| match e {
                    UpdateItemError::ConditionalCheckFailedException(ccf) => Some(ccf.item()),
                    _ => None,
                })
            }
            _ => Err(StoreError::InvalidWrite {
                write_index: 0,
                reason: "a guarded write is a put or an update".into(),
            }),
        }
    }

    async fn read_item_inner(&self, table: &str, key: &Item) -> Result<Option<Item>, StoreError> {
        crate::metrics::dynamodb_call();
        let output = self
            .client
            .get_item()
            .table_name(table)
            .set_key(Some(sdk_item(key)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|err| refused(err, 0, table, Requester::Handler))?;
        Ok(output.item().map(item))
    }
}

impl GuardedWrite for DynamoDbStore {
    boxed_calls! {
        fn write_guarded(&self, write: &Write) -> Result<Guarded, StoreError>
            => write_guarded_inner;
        fn read_item(&self, table: &str, key: &Item) -> Result<Option<Item>, StoreError>
            => read_item_inner;
    }
}
