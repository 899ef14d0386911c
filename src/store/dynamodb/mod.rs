//! [`DynamoDbStore`]: records in a DynamoDB table, with conditional writes.

/// Trait methods that answer the future of an inherent method, boxed: the SDK's request
/// futures are several kilobytes, and held inline they would make every record's future
/// (built and moved for each record, duplicates answered without any call included) as large
/// as the largest of them. `fn name(&self, arg: Type, ..) -> Output => inner;` gives `name`,
/// returning `Box::pin(self.inner(arg, ..))`.
macro_rules! boxed_calls {
    ($(fn $name:ident(&self $(, $arg:ident: $ty:ty)*) -> $output:ty => $inner:ident;)+) => {$(
        fn $name(&self $(, $arg: $ty)*) -> impl ::std::future::Future<Output = $output> + Send {
            Box::pin(self.$inner($($arg),*))
        }
    )+};
}

/// `$builder` (a `PutItem` request or a transaction's `Put`) writing a whole record under
/// [`TAKEOVER_CONDITION`] at `$now`, with `$store`'s attribute names; a refusal answers the
/// item that refused it. The two builders share these setters but no trait.
macro_rules! under_takeover_condition {
    ($store:expr, $builder:expr, $now:expr) => {
        $builder
            .condition_expression($crate::store::dynamodb::TAKEOVER_CONDITION)
            .set_expression_attribute_names(Some($store.takeover_names()))
            .set_expression_attribute_values(Some($crate::store::dynamodb::takeover_values($now)))
            .return_values_on_condition_check_failure(
                ::aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure::AllOld,
            )
    };
}

/// `$builder` (an `UpdateItem` request or a transaction's `Update`) moving the record that
/// `$request` (a completion or a commit) holds to its final state: [`FINAL_STATE_UPDATE`]
/// under [`OWNER_CONDITION`], with `$store`'s attribute names; a refusal answers the item
/// that refused it. The two builders share these setters but no trait.
macro_rules! to_final_state {
    ($store:expr, $builder:expr, $request:expr) => {{
        let request = $request;
        let (names, values) = $store.final_state(
            &request.owner,
            request.status,
            &request.data,
            request.expiration_secs,
        );
        $builder
            .update_expression($crate::store::dynamodb::FINAL_STATE_UPDATE)
            .condition_expression($crate::store::dynamodb::OWNER_CONDITION)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .return_values_on_condition_check_failure(
                ::aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure::AllOld,
            )
    }};
}

mod batch_get;
pub(super) mod commit;
mod guarded;
mod item;
#[cfg(all(test, feature = "metrics"))]
mod refusal_tests;
mod request_token;

use std::collections::HashMap;
use std::time::SystemTime;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::Client;

use crate::clock::{epoch_ms, epoch_secs};
use crate::key::IdempotencyKey;
use crate::record::{OwnerToken, Record, Status};
use crate::store::attribute_names::invalid_names;
use crate::store::item_size::{check_item_size, completed_size_bytes, record_size_bytes};
use crate::store::AttributeNames;
use crate::store::{
    is_our_completion, Acquire, AcquireRequest, CompleteRequest, ExtendRequest, Fenced,
    Misconfiguration, Store, StoreError,
};

/// A store on a DynamoDB table.
///
/// The table has a string partition key (`id` by default), or a string partition and sort
/// key with one static partition key value ([`AttributeNames::with_sort_key`], a
/// single-table layout).
///
/// - acquire: one `PutItem` conditioned on "no item, or expired, or in progress with an
///   elapsed lease", with `ReturnValuesOnConditionCheckFailure=ALL_OLD`; a strongly
///   consistent `GetItem` only when the failed condition returned no item. A refusal by our
///   own in-progress record (the SDK resent a put whose answer was lost) is an acquire;
/// - complete: `UpdateItem` conditioned on `INPROGRESS` and the caller's owner token, with
///   `ALL_OLD` on failure so that a resent completion recognises its own earlier success;
/// - release: `DeleteItem` with the same condition.
///
/// A `ValidationException` (an item over 400 KB, a bad expression) is the request's fault,
/// never retried: [`StoreError::ItemTooLarge`] or [`StoreError::InvalidRequest`]. A table
/// that does not exist (in this region), denied access, wrong or expired credentials, or a
/// table whose key is not the store's are [`StoreError::Misconfigured`], naming the table.
///
/// The client is injected: configure its timeouts and retries there.
#[derive(Debug, Clone)]
pub struct DynamoDbStore {
    pub(crate) client: Client,
    pub(crate) table: String,
    pub(crate) names: AttributeNames,
    /// What makes `names` unusable ([`AttributeNames::fault`]): then every request for a
    /// record is refused.
    names_fault: Option<String>,
}

impl DynamoDbStore {
    /// A store on `table`, using `client`.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
            names: AttributeNames::default(),
            names_fault: None,
        }
    }

    /// Uses other attribute names. They must be non-empty and distinct (the sort key's
    /// included), and a single-table layout's static partition key value non-empty: with
    /// names that are not, the store refuses every request for a record with
    /// [`StoreError::Misconfigured`] and writes nothing.
    pub fn with_attribute_names(mut self, names: AttributeNames) -> Self {
        self.names_fault = names.fault();
        self.names = names;
        self
    }

    /// The client the store sends its requests with.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The attribute names.
    pub fn attribute_names(&self) -> &AttributeNames {
        &self.names
    }

    /// The key attributes of `key`'s record. Every request for a record names it through
    /// here, so a store whose attribute names are unusable refuses each one before it is
    /// sent; called before the request is counted, so a refused one is not.
    pub(crate) fn key_item(
        &self,
        key: &IdempotencyKey,
    ) -> Result<HashMap<String, AttributeValue>, StoreError> {
        if let Some(reason) = &self.names_fault {
            return Err(invalid_names(self.table.clone(), reason.clone()));
        }
        Ok(self
            .names
            .item_key(key.as_str())
            .into_iter()
            .map(|(name, value)| (name.to_string(), s(value)))
            .collect())
    }

    /// The item key of `key` for a call on one item, counted as one DynamoDB call: the call
    /// is sent right after (a key that cannot be made sends nothing, and is not counted).
    fn called_with(
        &self,
        key: &IdempotencyKey,
    ) -> Result<HashMap<String, AttributeValue>, StoreError> {
        let item = self.key_item(key)?;
        crate::metrics::dynamodb_call();
        Ok(item)
    }

    /// The item of a record written whole under [`TAKEOVER_CONDITION`] (by an acquire, by an
    /// optimistic commit): its key's attributes, `status`, `expiration_secs`, `owner` and the
    /// `validation` hash when there is one; the caller adds its lease end or its data.
    pub(crate) fn record_item(
        &self,
        key: &IdempotencyKey,
        status: Status,
        expiration_secs: u64,
        owner: &OwnerToken,
        validation: Option<&str>,
    ) -> Result<HashMap<String, AttributeValue>, StoreError> {
        let n = &self.names;
        let mut item = self.key_item(key)?;
        item.insert(n.status.clone(), s(status.as_str()));
        item.insert(n.expiration.clone(), num(expiration_secs));
        item.insert(n.owner.clone(), s(owner.as_str()));
        if let Some(validation) = validation {
            item.insert(n.validation.clone(), s(validation));
        }
        Ok(item)
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
        let mut item = self.record_item(
            &request.key,
            Status::InProgress,
            request.expiration_secs,
            &request.owner,
            request.validation.as_deref(),
        )?;
        let size_bytes = record_size_bytes(n, &request.shape());
        check_item_size(size_bytes)?;
        item.insert(
            n.in_progress_expiration.clone(),
            num(request.lease_expiration_ms),
        );
        crate::metrics::dynamodb_call();
        let put = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item));
        let result = under_takeover_condition!(self, put, request.now)
            .send()
            .await;
        let err = match result {
            Ok(_) => return Ok(Acquire::Acquired),
            Err(err) => err,
        };
        let existing = match err.as_service_error() {
            Some(PutItemError::ConditionalCheckFailedException(ccf)) => match ccf.item() {
                Some(item) => Some(self.record_from_item(item)?),
                None => self.get_inner(&request.key).await?,
            },
            _ => return Err(refused(err, size_bytes, &self.table, Requester::Store)),
        };
        Ok(match existing {
            // The item that refused the put is another key's: the table's key is not the
            // store's (a single-table layout on a table without the sort key: every record
            // lands on the one item of the static partition key).
            Some(record) if record.key != request.key => {
                return Err(StoreError::Misconfigured(Misconfiguration::new(
                    "DynamoDB",
                    self.table.clone(),
                    "KeySchemaMismatch",
                    "the item that refused the record's write holds another key: the table's key \
                     attributes are not the store's (AttributeNames)",
                )))
            }
            // Our own record: an earlier send of this put was applied.
            Some(record) if record.is_held_by(&request.owner) => Acquire::Acquired,
            Some(record) => Acquire::Existing(record),
            None => Acquire::Contended,
        })
    }

    async fn complete_inner(&self, request: &CompleteRequest) -> Result<Fenced, StoreError> {
        let key_item = self.key_item(&request.key)?;
        let size_bytes = completed_size_bytes(&self.names, request);
        check_item_size(size_bytes)?;
        crate::metrics::dynamodb_call();
        let update = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(key_item));
        let result = to_final_state!(self, update, request).send().await;
        let err = match result {
            Ok(_) => return Ok(Fenced::Applied),
            Err(err) => err,
        };
        let existing = match err.as_service_error() {
            Some(UpdateItemError::ConditionalCheckFailedException(ccf)) => ccf
                .item()
                .map(|item| self.record_from_item(item))
                .transpose()?,
            _ => return Err(refused(err, size_bytes, &self.table, Requester::Store)),
        };
        Ok(match existing {
            // Our own completion: an earlier send was applied and its answer lost.
            Some(record) if is_our_completion(&record, request) => Fenced::Applied,
            _ => Fenced::LeaseLost,
        })
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
            .set_key(Some(self.called_with(&request.key)?))
            .update_expression("SET #ipe = :lease, #exp = :exp")
            .condition_expression(OWNER_CONDITION)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .send()
            .await;
        fenced(result, &self.table)
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
            .set_key(Some(self.called_with(key)?))
            .condition_expression(OWNER_CONDITION)
            .set_expression_attribute_names(Some(self.owner_condition_names()))
            .set_expression_attribute_values(Some(self.owner_condition_values(owner)))
            .send()
            .await;
        fenced(result, &self.table)
    }

    pub(crate) async fn get_inner(
        &self,
        key: &IdempotencyKey,
    ) -> Result<Option<Record>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(self.called_with(key)?))
            .consistent_read(true)
            .send()
            .await
            .map_err(|err| unread(err, &self.table))?;
        output
            .item()
            .map(|item| self.record_from_item(item))
            .transpose()
    }
}

/// A write to a held record: only while it is in progress under the caller's owner token.
pub(crate) const OWNER_CONDITION: &str = "#status = :inprogress AND #owner = :owner";

/// The record's final state: completed (or failed) with its data and expiry, lease removed.
pub(crate) const FINAL_STATE_UPDATE: &str =
    "SET #status = :final, #data = :data, #exp = :exp REMOVE #ipe";

/// An owner-fenced write's answer on `table`: a failed condition means the lease is no
/// longer held.
fn fenced<O, E, R>(result: Result<O, SdkError<E, R>>, table: &str) -> Result<Fenced, StoreError>
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
        Err(err) => Err(refused(err, 0, table, Requester::Store)),
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

/// What a refusal by DynamoDB (other than a failed condition) says about the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The credentials or the signature: every request is refused alike.
    Credentials,
    /// The table: it does not exist (in this region), or access to it is denied.
    Table,
    /// The key does not match the table's key schema (`ValidationException`).
    KeySchema,
    /// The item is over DynamoDB's size limit (`ValidationException`).
    TooLarge,
    /// Another `ValidationException`: the request is malformed.
    Invalid,
    /// Anything else: an outage, throttling.
    Other,
}

/// DynamoDB's codes for credentials or a signature it refuses.
const CREDENTIAL_CODES: [&str; 9] = [
    "UnrecognizedClientException",
    "InvalidSignatureException",
    "IncompleteSignatureException",
    "MissingAuthenticationToken",
    "MissingAuthenticationTokenException",
    "InvalidClientTokenId",
    "ExpiredToken",
    "ExpiredTokenException",
    "SignatureDoesNotMatch",
];

/// DynamoDB's messages (with `ValidationException`) for a key that does not match the table's
/// key schema (its attribute names, their types, a sort key or none), as DynamoDB and
/// DynamoDB Local word them.
const KEY_SCHEMA_MESSAGES: [&str; 5] = [
    "The provided key element does not match the schema",
    "One of the required keys was not given a value",
    "Missing the key",
    "Type mismatch for key",
    "The number of conditions on the keys is invalid",
];

/// What DynamoDB's refusal `service` says about the request.
pub(crate) fn refusal<E: ProvideErrorMetadata>(service: &E) -> Refusal {
    let Some(code) = service.code() else {
        return Refusal::Other;
    };
    if CREDENTIAL_CODES.contains(&code) {
        return Refusal::Credentials;
    }
    if matches!(code, "ResourceNotFoundException" | "AccessDeniedException") {
        return Refusal::Table;
    }
    if code != "ValidationException" {
        return Refusal::Other;
    }
    let message = service.message().unwrap_or_default();
    if KEY_SCHEMA_MESSAGES.iter().any(|m| message.contains(m)) {
        return Refusal::KeySchema;
    }
    let lower = message.to_ascii_lowercase();
    if lower.contains("size") && lower.contains("exceed") {
        return Refusal::TooLarge;
    }
    Refusal::Invalid
}

/// The misconfiguration DynamoDB's refusal `service` shows on `table`, with its code and
/// message.
pub(crate) fn misconfigured<E: ProvideErrorMetadata>(service: &E, table: &str) -> Misconfiguration {
    let code = service.code().unwrap_or("Unknown");
    let message = service.message().unwrap_or_default();
    Misconfiguration::new("DynamoDB", table, code, message)
}

/// The store error for a read of the store's own `table` that DynamoDB did not answer: the
/// store's setup ([`StoreError::Misconfigured`]: the credentials, the table, a key that does
/// not match its schema, any other refusal of the store's own fixed-shape request), or an
/// outage.
pub(crate) fn unread<E, R>(err: SdkError<E, R>, table: &str) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    match err.as_service_error() {
        Some(service) if refusal(service) != Refusal::Other => {
            StoreError::Misconfigured(misconfigured(service, table))
        }
        _ => unavailable(err),
    }
}

/// Whose request DynamoDB refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Requester {
    /// The store's own: its requests have a fixed shape, so any refusal but an item over the
    /// size limit is the store's setup (the credentials, no such table, no permission, a key
    /// that does not match the table's), never a record's fault.
    Store,
    /// One of the handler's (a sequence-guarded write, or its read): a missing table, denied
    /// access or a key that does not match is the setup of the handler's table
    /// ([`Misconfiguration::for_handler_write`]), another invalid request the request's fault;
    /// refused credentials are still the store's setup.
    Handler,
}

/// The store error for a request on `table`, made by `by`, that DynamoDB did not apply
/// (other than a failed condition): an item over the size limit
/// ([`StoreError::ItemTooLarge`], with `size_bytes` as estimated), a misconfiguration or an
/// invalid request as [`Requester`] says, and anything else an outage.
pub(crate) fn refused<E, R>(
    err: SdkError<E, R>,
    size_bytes: usize,
    table: &str,
    by: Requester,
) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let Some(service) = err.as_service_error() else {
        return unavailable(err);
    };
    match (refusal(service), by) {
        (Refusal::TooLarge, _) => too_large(size_bytes),
        (Refusal::Other, _) => unavailable(err),
        (Refusal::Table | Refusal::KeySchema, Requester::Handler) => {
            StoreError::Misconfigured(misconfigured(service, table).for_handler_write())
        }
        (Refusal::Invalid, Requester::Handler) => StoreError::InvalidRequest {
            write_index: None,
            reason: Box::new(err),
        },
        _ => StoreError::Misconfigured(misconfigured(service, table)),
    }
}

/// The refusal of an item over the size limit, whose size was estimated at `size_bytes`.
pub(crate) fn too_large(size_bytes: usize) -> StoreError {
    StoreError::ItemTooLarge {
        size_bytes: size_bytes.max(crate::store::MAX_ITEM_BYTES + 1),
        limit_bytes: crate::store::MAX_ITEM_BYTES,
    }
}

impl Store for DynamoDbStore {
    boxed_calls! {
        fn acquire(&self, request: &AcquireRequest) -> Result<Acquire, StoreError>
            => acquire_inner;
        fn complete(&self, request: &CompleteRequest) -> Result<Fenced, StoreError>
            => complete_inner;
        fn extend(&self, request: &ExtendRequest) -> Result<Fenced, StoreError>
            => extend_inner;
        fn release(&self, key: &IdempotencyKey, owner: &OwnerToken) -> Result<Fenced, StoreError>
            => release_inner;
        fn get(&self, key: &IdempotencyKey) -> Result<Option<Record>, StoreError>
            => get_inner;
        fn get_many(&self, keys: &[IdempotencyKey]) -> Result<Vec<Record>, StoreError>
            => get_many_inner;
    }
}
