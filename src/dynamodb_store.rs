//! [`DynamoDbStore`]: records in a DynamoDB table, with conditional writes.

use std::collections::HashMap;
use std::future::Future;
use std::time::SystemTime;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use aws_sdk_dynamodb::Client;

use crate::clock::{epoch_ms, epoch_secs};
use crate::key::IdempotencyKey;
use crate::record::{OwnerToken, Record, Status};
use crate::store::{
    Acquire, AcquireRequest, CompleteRequest, ExtendRequest, Fenced, Store, StoreError,
};

/// DynamoDB's maximum item size, in bytes.
pub const DYNAMODB_ITEM_LIMIT_BYTES: usize = 400 * 1024;

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

/// A store on a DynamoDB table with a string partition key (`id` by default).
///
/// - acquire: one `PutItem` conditioned on "no item, or expired, or in progress with an
///   elapsed lease", with `ReturnValuesOnConditionCheckFailure=ALL_OLD`; a strongly
///   consistent `GetItem` only when the failed condition returned no item;
/// - complete: `UpdateItem` conditioned on `INPROGRESS` and the caller's owner token;
/// - release: `DeleteItem` with the same condition.
///
/// The client is injected: configure its timeouts and retries there.
#[derive(Debug, Clone)]
pub struct DynamoDbStore {
    pub(crate) client: Client,
    pub(crate) table: String,
    pub(crate) names: AttributeNames,
}

impl DynamoDbStore {
    /// A store on `table`, using `client`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
            names: AttributeNames::default(),
        }
    }

    /// Uses other attribute names.
    pub fn with_attribute_names(mut self, names: AttributeNames) -> Self {
        self.names = names;
        self
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The attribute names.
    pub fn attribute_names(&self) -> &AttributeNames {
        &self.names
    }

    pub(crate) fn key_item(&self, key: &IdempotencyKey) -> HashMap<String, AttributeValue> {
        HashMap::from([(self.names.key.clone(), s(key.as_str()))])
    }

    /// The attribute names [`TAKEOVER_CONDITION`] uses.
    pub(crate) fn takeover_names(&self) -> HashMap<String, String> {
        let n = &self.names;
        HashMap::from([
            ("#id".to_string(), n.key.clone()),
            ("#exp".to_string(), n.expiration.clone()),
            ("#status".to_string(), n.status.clone()),
            ("#ipe".to_string(), n.in_progress_expiration.clone()),
        ])
    }

    /// The names and values of [`FINAL_STATE_UPDATE`] under [`OWNER_CONDITION`].
    pub(crate) fn final_state(
        &self,
        owner: &OwnerToken,
        status: Status,
        data: &str,
        expiration_secs: u64,
    ) -> (HashMap<String, String>, HashMap<String, AttributeValue>) {
        let n = &self.names;
        let mut names = self.owner_condition_names();
        names.insert("#data".into(), n.data.clone());
        names.insert("#exp".into(), n.expiration.clone());
        names.insert("#ipe".into(), n.in_progress_expiration.clone());
        let mut values = self.owner_condition_values(owner);
        values.insert(":final".into(), s(status.as_str()));
        values.insert(":data".into(), s(data));
        values.insert(":exp".into(), num(expiration_secs));
        (names, values)
    }

    pub(crate) fn owner_condition_names(&self) -> HashMap<String, String> {
        HashMap::from([
            ("#status".to_string(), self.names.status.clone()),
            ("#owner".to_string(), self.names.owner.clone()),
        ])
    }

    pub(crate) fn owner_condition_values(
        &self,
        owner: &OwnerToken,
    ) -> HashMap<String, AttributeValue> {
        HashMap::from([
            (":inprogress".to_string(), s(Status::InProgress.as_str())),
            (":owner".to_string(), s(owner.as_str())),
        ])
    }

    async fn acquire_inner(&self, request: &AcquireRequest) -> Result<Acquire, StoreError> {
        let n = &self.names;
        let mut item = self.key_item(&request.key);
        item.insert(n.status.clone(), s(Status::InProgress.as_str()));
        item.insert(n.expiration.clone(), num(request.expiration_secs));
        item.insert(
            n.in_progress_expiration.clone(),
            num(request.lease_expiration_ms),
        );
        item.insert(n.owner.clone(), s(request.owner.as_str()));
        if let Some(validation) = &request.validation {
            item.insert(n.validation.clone(), s(validation));
        }
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression(TAKEOVER_CONDITION)
            .set_expression_attribute_names(Some(self.takeover_names()))
            .set_expression_attribute_values(Some(takeover_values(request.now)))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match result {
            Ok(_) => Ok(Acquire::Acquired),
            Err(err) => {
                let old = match err.as_service_error() {
                    Some(service) if service.is_conditional_check_failed_exception() => {
                        match service {
                            aws_sdk_dynamodb::operation::put_item::PutItemError::ConditionalCheckFailedException(ccf) => {
                                ccf.item().cloned()
                            }
                            _ => None,
                        }
                    }
                    _ => return Err(unavailable(err)),
                };
                let existing = match old {
                    Some(item) => Some(self.parse(&item)?),
                    None => self.get_inner(&request.key).await?,
                };
                Ok(existing.map_or(Acquire::Contended, Acquire::Existing))
            }
        }
    }

    async fn complete_inner(&self, request: &CompleteRequest) -> Result<Fenced, StoreError> {
        let n = &self.names;
        let size_bytes = n.key.len()
            + request.key.as_str().len()
            + n.status.len()
            + request.status.as_str().len()
            + n.data.len()
            + request.data.len()
            + n.expiration.len()
            + 21
            + n.owner.len()
            + request.owner.as_str().len()
            + n.validation.len()
            + 64;
        if size_bytes > DYNAMODB_ITEM_LIMIT_BYTES {
            return Err(StoreError::ItemTooLarge {
                size_bytes,
                limit_bytes: DYNAMODB_ITEM_LIMIT_BYTES,
            });
        }
        let (names, values) = self.final_state(
            &request.owner,
            request.status,
            &request.data,
            request.expiration_secs,
        );
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(self.key_item(&request.key)))
            .update_expression(FINAL_STATE_UPDATE)
            .condition_expression(OWNER_CONDITION)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .send()
            .await;
        fenced(result)
    }

    async fn extend_inner(&self, request: &ExtendRequest) -> Result<Fenced, StoreError> {
        let mut names = self.owner_condition_names();
        names.insert("#ipe".into(), self.names.in_progress_expiration.clone());
        names.insert("#exp".into(), self.names.expiration.clone());
        let mut values = self.owner_condition_values(&request.owner);
        values.insert(":lease".into(), num(request.lease_expiration_ms));
        values.insert(":exp".into(), num(request.expiration_secs));
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(self.key_item(&request.key)))
            .update_expression("SET #ipe = :lease, #exp = :exp")
            .condition_expression(OWNER_CONDITION)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .send()
            .await;
        fenced(result)
    }

    async fn release_inner(
        &self,
        key: &IdempotencyKey,
        owner: &OwnerToken,
    ) -> Result<Fenced, StoreError> {
        let result = self
            .client
            .delete_item()
            .table_name(&self.table)
            .set_key(Some(self.key_item(key)))
            .condition_expression(OWNER_CONDITION)
            .set_expression_attribute_names(Some(self.owner_condition_names()))
            .set_expression_attribute_values(Some(self.owner_condition_values(owner)))
            .send()
            .await;
        fenced(result)
    }

    pub(crate) async fn get_inner(
        &self,
        key: &IdempotencyKey,
    ) -> Result<Option<Record>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(self.key_item(key)))
            .consistent_read(true)
            .send()
            .await
            .map_err(unavailable)?;
        output.item().map(|item| self.parse(item)).transpose()
    }

    pub(crate) fn parse(
        &self,
        item: &HashMap<String, AttributeValue>,
    ) -> Result<Record, StoreError> {
        let n = &self.names;
        let key = item
            .get(&n.key)
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
        let status_text = text(&n.status).ok_or_else(|| malformed("no status".into()))?;
        let status = Status::parse(&status_text)
            .ok_or_else(|| malformed(format!("unknown status {status_text:?}")))?;
        let expiration_secs =
            number(&n.expiration)?.ok_or_else(|| malformed("no expiration".into()))?;
        Ok(Record {
            key: IdempotencyKey::from_stored(key.clone()),
            status,
            expiration_secs,
            lease_expiration_ms: number(&n.in_progress_expiration)?,
            owner: text(&n.owner).map(OwnerToken::new),
            data: text(&n.data),
            validation: text(&n.validation),
        })
    }
}

/// A write to a held record: only while it is in progress under the caller's owner token.
pub(crate) const OWNER_CONDITION: &str = "#status = :inprogress AND #owner = :owner";

/// The record's final state: completed (or failed) with its data and expiry, lease removed.
pub(crate) const FINAL_STATE_UPDATE: &str =
    "SET #status = :final, #data = :data, #exp = :exp REMOVE #ipe";

/// An owner-fenced write's answer: a failed condition means the lease is no longer held.
fn fenced<O, E, R>(result: Result<O, SdkError<E, R>>) -> Result<Fenced, StoreError>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    match result {
        Ok(_) => Ok(Fenced::Applied),
        Err(err)
            if err.as_service_error().and_then(ProvideErrorMetadata::code)
                == Some("ConditionalCheckFailedException") =>
        {
            Ok(Fenced::LeaseLost)
        }
        Err(err) => Err(unavailable(err)),
    }
}

/// When a write may replace what is stored under the key: nothing is, or the record has
/// expired, or it is in progress with an elapsed lease. The acquire and the optimistic
/// commit share it, so both check expiry the same way, never relying on TTL deletion.
pub(crate) const TAKEOVER_CONDITION: &str = "attribute_not_exists(#id) OR #exp < :now_secs \
     OR (#status = :inprogress AND #ipe < :now_ms)";

/// The values [`TAKEOVER_CONDITION`] compares with, at `now`.
pub(crate) fn takeover_values(now: SystemTime) -> HashMap<String, AttributeValue> {
    HashMap::from([
        (":now_secs".to_string(), num(epoch_secs(now))),
        (":now_ms".to_string(), num(epoch_ms(now))),
        (":inprogress".to_string(), s(Status::InProgress.as_str())),
    ])
}

pub(crate) fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_string())
}

pub(crate) fn num(value: u64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

pub(crate) fn unavailable<E>(err: E) -> StoreError
where
    E: std::error::Error + Send + Sync + 'static,
{
    StoreError::Unavailable(Box::new(err))
}

impl Store for DynamoDbStore {
    fn acquire(
        &self,
        request: &AcquireRequest,
    ) -> impl Future<Output = Result<Acquire, StoreError>> + Send {
        self.acquire_inner(request)
    }

    fn complete(
        &self,
        request: &CompleteRequest,
    ) -> impl Future<Output = Result<Fenced, StoreError>> + Send {
        self.complete_inner(request)
    }

    fn extend(
        &self,
        request: &ExtendRequest,
    ) -> impl Future<Output = Result<Fenced, StoreError>> + Send {
        self.extend_inner(request)
    }

    fn release(
        &self,
        key: &IdempotencyKey,
        owner: &OwnerToken,
    ) -> impl Future<Output = Result<Fenced, StoreError>> + Send {
        self.release_inner(key, owner)
    }

    fn get(
        &self,
        key: &IdempotencyKey,
    ) -> impl Future<Output = Result<Option<Record>, StoreError>> + Send {
        self.get_inner(key)
    }
}
