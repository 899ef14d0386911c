//! Transactional commits on [`DynamoDbStore`]: the handler's writes and the record's final
//! state in one `TransactWriteItems`.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::{BuildError, ProvideErrorMetadata};
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, Delete, Put, TransactWriteItem, Update,
};

use super::request_token::client_request_token;
use super::{misconfigured, refusal, s, unavailable, DynamoDbStore, Refusal};
use crate::store::item_size::check_commit_size;
use crate::store::{
    Attr, Commit, CommitRequest, Item, Misconfiguration, StoreError, TransactionalStore, Write,
    WriteKind,
};

pub(super) fn sdk_value(value: &Attr) -> AttributeValue {
    match value {
        Attr::S(v) => AttributeValue::S(v.clone()),
        Attr::N(v) => AttributeValue::N(v.clone()),
        Attr::B(v) => AttributeValue::B(v.clone().into()),
        Attr::Bool(v) => AttributeValue::Bool(*v),
        Attr::Null => AttributeValue::Null(true),
        Attr::L(items) => AttributeValue::L(items.iter().map(sdk_value).collect()),
        Attr::M(map) => AttributeValue::M(sdk_item(map)),
        Attr::Ss(v) => AttributeValue::Ss(v.clone()),
        Attr::Ns(v) => AttributeValue::Ns(v.clone()),
    }
}

pub(super) fn sdk_item(item: &Item) -> HashMap<String, AttributeValue> {
    item.iter()
        .map(|(k, v)| (k.clone(), sdk_value(v)))
        .collect()
}

fn invalid(index: usize, err: impl std::fmt::Display) -> StoreError {
    StoreError::InvalidWrite {
        write_index: index,
        reason: err.to_string(),
    }
}

/// `$builder` (one of the SDK's builders of a write: a transaction's `Put`, `Update`, `Delete`
/// or `ConditionCheck`, a `PutItem` or `UpdateItem` request) with `$write`'s table, condition
/// and expression attribute names and values. The builders share these setters but no trait.
macro_rules! conditioned {
    ($builder:expr, $write:expr) => {{
        let write: &Write = $write;
        $builder
            .table_name(&write.table)
            .set_condition_expression(write.condition_expression.clone())
            .set_expression_attribute_names(
                (!write.names.is_empty()).then(|| write.names.clone().into_iter().collect()),
            )
            .set_expression_attribute_values(
                (!write.values.is_empty()).then(|| sdk_item(&write.values)),
            )
    }};
}
pub(super) use conditioned;

fn sdk_write(index: usize, write: &Write) -> Result<TransactWriteItem, StoreError> {
    // The write's item: the whole item to put, or the key of the item to touch.
    let attributes = Some(sdk_item(&write.item));
    let invalid = |e: BuildError| invalid(index, e);
    let item = TransactWriteItem::builder();
    let item = match write.kind {
        WriteKind::Put => {
            let put = conditioned!(Put::builder().set_item(attributes), write);
            item.put(put.build().map_err(invalid)?)
        }
        WriteKind::Update => {
            let update = Update::builder()
                .set_key(attributes)
                .set_update_expression(write.update_expression.clone());
            item.update(conditioned!(update, write).build().map_err(invalid)?)
        }
        WriteKind::Delete => {
            let delete = conditioned!(Delete::builder().set_key(attributes), write);
            item.delete(delete.build().map_err(invalid)?)
        }
        WriteKind::ConditionCheck => {
            let check = conditioned!(ConditionCheck::builder().set_key(attributes), write);
            item.condition_check(check.build().map_err(invalid)?)
        }
    };
    Ok(item.build())
}

impl DynamoDbStore {
    /// Lease mode: the record goes from in progress (held by us) to its final state.
    fn lease_marker(&self, request: &CommitRequest) -> Result<TransactWriteItem, StoreError> {
        let update = Update::builder()
            .table_name(&self.table)
            .set_key(Some(self.key_item(&request.key)?));
        let update = to_final_state!(self, update, request)
            .build()
            .map_err(|e| invalid(0, e))?;
        Ok(TransactWriteItem::builder().update(update).build())
    }

    /// Optimistic mode: the final record is written if no live record exists.
    fn fresh_marker(&self, request: &CommitRequest) -> Result<TransactWriteItem, StoreError> {
        let mut item = self.record_item(
            &request.key,
            request.status,
            request.expiration_secs,
            &request.owner,
            request.validation.as_deref(),
        )?;
        item.insert(self.names.data.clone(), s(&request.data));
        let put = Put::builder().table_name(&self.table).set_item(Some(item));
        let put = under_takeover_condition!(self, put, request.now)
            .build()
            .map_err(|e| invalid(0, e))?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    async fn transact(
        &self,
        request: &CommitRequest,
        marker: TransactWriteItem,
        fresh: bool,
    ) -> Result<Commit, StoreError> {
        let mut items = Vec::with_capacity(request.writes.len() + 1);
        items.push(marker);
        for (index, write) in request.writes.iter().enumerate() {
            items.push(sdk_write(index, write)?);
        }
        crate::metrics::dynamodb_call();
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .client_request_token(client_request_token(&self.table, fresh, request))
            .send()
            .await;
        let err = match result {
            Ok(_) => return Ok(Commit::Applied),
            Err(err) => err,
        };
        let cancelled = match err.as_service_error() {
            Some(TransactWriteItemsError::TransactionCanceledException(cancelled)) => cancelled,
            // Another transaction on the same items, or this very token still in flight:
            // worth sending again.
            Some(service)
                if matches!(
                    service.code(),
                    Some("TransactionConflictException" | "TransactionInProgressException")
                ) =>
            {
                return Ok(Commit::Conflict)
            }
            Some(service) => {
                return Err(match refusal(service) {
                    Refusal::Credentials => {
                        StoreError::Misconfigured(misconfigured(service, &self.table))
                    }
                    // DynamoDB does not say which table: it is found out.
                    Refusal::Table | Refusal::KeySchema => {
                        self.refused_table(request, misconfigured(service, ""))
                            .await
                    }
                    // The record's own size was checked (as an upper bound) before sending,
                    // so a refusal here is about the handler's writes: invalid, never
                    // "result too large".
                    Refusal::TooLarge | Refusal::Invalid => StoreError::InvalidRequest {
                        write_index: None,
                        reason: Box::new(err),
                    },
                    Refusal::Other => unavailable(err),
                });
            }
            None => return Err(unavailable(err)),
        };
        let reasons = cancelled.cancellation_reasons();
        let code = |i: usize| reasons.get(i).and_then(|r| r.code()).unwrap_or("None");
        // An invalid write fails the whole request before any condition counts.
        if let Some(index) = (0..reasons.len()).find(|&i| code(i) == "ValidationError") {
            let reason = reasons[index].message().unwrap_or("invalid").to_string();
            return Err(StoreError::InvalidRequest {
                write_index: index.checked_sub(1),
                reason: reason.into(),
            });
        }
        if code(0) == "ConditionalCheckFailed" {
            let record = match reasons[0].item() {
                Some(item) => Some(self.record_from_item(item)?),
                None => self.get_inner(&request.key).await?,
            };
            return Ok(Commit::RecordRefused(record));
        }
        if let Some(index) = (1..reasons.len()).find(|&i| code(i) == "ConditionalCheckFailed") {
            return Ok(Commit::ConditionFailed {
                write_index: index - 1,
            });
        }
        if (0..reasons.len()).any(|i| code(i) == "TransactionConflict") {
            return Ok(Commit::Conflict);
        }
        Err(unavailable(err))
    }

    /// The tables `request` writes: the store's own, then the handler's writes' (each
    /// once), `, `-separated.
    /// The misconfiguration `fault` (a missing table, denied access, a key that does not
    /// match a table's schema) of a transaction, on the table it is about. DynamoDB does not
    /// say which table of the transaction it refused, so the store's own table is read (a
    /// `GetItem` of the record's key, as the store reads records): refused too, the fault is
    /// the store's own (with that read's code and message); read, it is about the handler's
    /// writes' tables ([`Misconfiguration::for_handler_write`], named when there is one);
    /// when the read cannot tell, every table of the transaction is named, as the handler's.
    async fn refused_table(&self, request: &CommitRequest, fault: Misconfiguration) -> StoreError {
        let mut theirs: Vec<&str> = Vec::new();
        for write in &request.writes {
            if write.table != self.table && !theirs.contains(&write.table.as_str()) {
                theirs.push(&write.table);
            }
        }
        let table = match self.get_inner(&request.key).await {
            Err(StoreError::Misconfigured(own)) => return StoreError::Misconfigured(own),
            Ok(_) if theirs.is_empty() => {
                let table = self.table.clone();
                return StoreError::Misconfigured(Misconfiguration { table, ..fault });
            }
            Ok(_) => theirs.join(", "),
            Err(_) => std::iter::once(self.table.as_str())
                .chain(theirs)
                .collect::<Vec<_>>()
                .join(", "),
        };
        StoreError::Misconfigured(Misconfiguration { table, ..fault }.for_handler_write())
    }

    async fn commit_inner(&self, request: &CommitRequest) -> Result<Commit, StoreError> {
        // The record's key is named first: a store that cannot name it refuses everything.
        let marker = self.lease_marker(request)?;
        check_commit_size(&self.names, request)?;
        self.transact(request, marker, false).await
    }

    async fn commit_fresh_inner(&self, request: &CommitRequest) -> Result<Commit, StoreError> {
        // The record's key is named first: a store that cannot name it refuses everything.
        let marker = self.fresh_marker(request)?;
        check_commit_size(&self.names, request)?;
        self.transact(request, marker, true).await
    }
}

impl TransactionalStore for DynamoDbStore {
    boxed_calls! {
        fn commit(&self, request: &CommitRequest) -> Result<Commit, StoreError>
            => commit_inner;
        fn commit_fresh(&self, request: &CommitRequest) -> Result<Commit, StoreError>
            => commit_fresh_inner;
    }
}
