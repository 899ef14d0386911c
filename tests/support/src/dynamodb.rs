//! DynamoDB Local access for the integration tests.
//!
//! The endpoint comes from `AWS_ENDPOINT_URL_DYNAMODB` (scripts/test.sh starts DynamoDB
//! Local and sets it). When it is unset, the tests are skipped with a notice, unless
//! `LAMBDA_IDEMPOTENCY_REQUIRE_DYNAMODB=1` or `CI` is set: then they fail. An endpoint that
//! is set but unreachable always fails.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_config::BehaviorVersion;
use aws_sdk_dynamodb::config::interceptors::BeforeSerializationInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept};
use aws_sdk_dynamodb::Client;
use lambda_idempotency::store::DynamoDbStore;

fn required() -> bool {
    std::env::var("LAMBDA_IDEMPOTENCY_REQUIRE_DYNAMODB").is_ok_and(|v| v == "1")
        || std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false")
}

/// Counts the DynamoDB operations a client sends (an SDK interceptor: counted, not
/// estimated).
#[derive(Debug, Clone, Default)]
pub struct CallCounter {
    calls: Arc<Mutex<BTreeMap<&'static str, usize>>>,
    capacity_units: Arc<Mutex<f64>>,
    read_units: Arc<Mutex<f64>>,
    refused_write_units: Arc<Mutex<f64>>,
}

impl CallCounter {
    /// How many calls of `operation` (e.g. "PutItem") were sent.
    pub fn count(&self, operation: &str) -> usize {
        self.calls
            .lock()
            .unwrap()
            .get(operation)
            .copied()
            .unwrap_or(0)
    }

    /// Every count, by operation.
    pub fn all(&self) -> BTreeMap<&'static str, usize> {
        self.calls.lock().unwrap().clone()
    }

    /// Forgets every count.
    pub fn reset(&self) {
        self.calls.lock().unwrap().clear();
        *self.capacity_units.lock().unwrap() = 0.0;
        *self.read_units.lock().unwrap() = 0.0;
        *self.refused_write_units.lock().unwrap() = 0.0;
    }

    /// Every call sent.
    pub fn total(&self) -> usize {
        self.calls.lock().unwrap().values().sum()
    }

    /// Capacity units DynamoDB reported as consumed (`ReturnConsumedCapacity=TOTAL` is set on
    /// every write); a write refused by its condition reports none.
    pub fn capacity_units(&self) -> f64 {
        *self.capacity_units.lock().unwrap()
    }

    /// Read capacity units DynamoDB reported for `GetItem` and `BatchGetItem` (strongly
    /// consistent: 1 per item up to 4 KB).
    pub fn read_units(&self) -> f64 {
        *self.read_units.lock().unwrap()
    }

    /// Write units DynamoDB charges for writes refused by their condition, which DynamoDB
    /// Local does not report: counted here as 1 per refused single-item write and 2 per item
    /// of a refused transaction (the rates for items up to 1 KB; an estimate, not a report).
    pub fn refused_write_units(&self) -> f64 {
        *self.refused_write_units.lock().unwrap()
    }
}

impl Intercept for CallCounter {
    fn name(&self) -> &'static str {
        "CallCounter"
    }

    fn read_before_execution(
        &self,
        context: &BeforeSerializationInterceptorContextRef<'_>,
        _cfg: &mut ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        use aws_sdk_dynamodb::operation::{
            delete_item::DeleteItemInput, get_item::GetItemInput, put_item::PutItemInput,
            update_item::UpdateItemInput,
        };
        let input = context.input();
        use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsInput;
        let operation = if input.downcast_ref::<TransactWriteItemsInput>().is_some() {
            "TransactWriteItems"
        } else if input.downcast_ref::<PutItemInput>().is_some() {
            "PutItem"
        } else if input.downcast_ref::<GetItemInput>().is_some() {
            "GetItem"
        } else if input.downcast_ref::<UpdateItemInput>().is_some() {
            "UpdateItem"
        } else if input.downcast_ref::<DeleteItemInput>().is_some() {
            "DeleteItem"
        } else if input
            .downcast_ref::<aws_sdk_dynamodb::operation::batch_get_item::BatchGetItemInput>()
            .is_some()
        {
            "BatchGetItem"
        } else {
            "Other"
        };
        *self.calls.lock().unwrap().entry(operation).or_default() += 1;
        Ok(())
    }

    fn modify_before_serialization(
        &self,
        context: &mut aws_sdk_dynamodb::config::interceptors::BeforeSerializationInterceptorContextMut<'_>,
        _components: &aws_sdk_dynamodb::config::RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        use aws_sdk_dynamodb::operation::{
            batch_get_item::BatchGetItemInput, delete_item::DeleteItemInput,
            get_item::GetItemInput, put_item::PutItemInput,
            transact_write_items::TransactWriteItemsInput, update_item::UpdateItemInput,
        };
        use aws_sdk_dynamodb::types::ReturnConsumedCapacity::Total;
        let input = context.input_mut();
        if let Some(i) = input.downcast_mut::<PutItemInput>() {
            i.return_consumed_capacity = Some(Total);
        } else if let Some(i) = input.downcast_mut::<UpdateItemInput>() {
            i.return_consumed_capacity = Some(Total);
        } else if let Some(i) = input.downcast_mut::<DeleteItemInput>() {
            i.return_consumed_capacity = Some(Total);
        } else if let Some(i) = input.downcast_mut::<TransactWriteItemsInput>() {
            i.return_consumed_capacity = Some(Total);
        } else if let Some(i) = input.downcast_mut::<GetItemInput>() {
            i.return_consumed_capacity = Some(Total);
        } else if let Some(i) = input.downcast_mut::<BatchGetItemInput>() {
            i.return_consumed_capacity = Some(Total);
        }
        Ok(())
    }

    fn read_after_deserialization(
        &self,
        context: &aws_sdk_dynamodb::config::interceptors::AfterDeserializationInterceptorContextRef<
            '_,
        >,
        _components: &aws_sdk_dynamodb::config::RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
        use aws_sdk_dynamodb::operation::{
            batch_get_item::BatchGetItemOutput, get_item::GetItemOutput,
        };
        use aws_sdk_dynamodb::operation::{
            delete_item::DeleteItemOutput, put_item::PutItemOutput,
            transact_write_items::TransactWriteItemsOutput, update_item::UpdateItemOutput,
        };
        let output = match context.output_or_error() {
            Ok(output) => output,
            Err(error) => {
                use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError as T;
                use aws_sdk_dynamodb::operation::{
                    delete_item::DeleteItemError as D, put_item::PutItemError as P,
                    update_item::UpdateItemError as U,
                };
                let Some(e) = error.as_operation_error() else {
                    return Ok(());
                };
                // See `refused_write_units`: 1 per refused item write, 2 per item of a
                // refused transaction (one cancellation reason per item).
                let units = if e
                    .downcast_ref::<P>()
                    .is_some_and(P::is_conditional_check_failed_exception)
                    || e.downcast_ref::<U>()
                        .is_some_and(U::is_conditional_check_failed_exception)
                    || e.downcast_ref::<D>()
                        .is_some_and(D::is_conditional_check_failed_exception)
                {
                    1.0
                } else if let Some(T::TransactionCanceledException(c)) = e.downcast_ref::<T>() {
                    2.0 * c.cancellation_reasons().len() as f64
                } else {
                    0.0
                };
                *self.refused_write_units.lock().unwrap() += units;
                return Ok(());
            }
        };
        let read: f64 = if let Some(o) = output.downcast_ref::<GetItemOutput>() {
            o.consumed_capacity()
                .and_then(|c| c.capacity_units())
                .unwrap_or(0.0)
        } else if let Some(o) = output.downcast_ref::<BatchGetItemOutput>() {
            o.consumed_capacity()
                .iter()
                .filter_map(|c| c.capacity_units())
                .sum()
        } else {
            0.0
        };
        *self.read_units.lock().unwrap() += read;
        let units: f64 = if let Some(o) = output.downcast_ref::<PutItemOutput>() {
            o.consumed_capacity()
                .and_then(|c| c.capacity_units())
                .unwrap_or(0.0)
        } else if let Some(o) = output.downcast_ref::<UpdateItemOutput>() {
            o.consumed_capacity()
                .and_then(|c| c.capacity_units())
                .unwrap_or(0.0)
        } else if let Some(o) = output.downcast_ref::<DeleteItemOutput>() {
            o.consumed_capacity()
                .and_then(|c| c.capacity_units())
                .unwrap_or(0.0)
        } else if let Some(o) = output.downcast_ref::<TransactWriteItemsOutput>() {
            o.consumed_capacity()
                .iter()
                .filter_map(|c| c.capacity_units())
                .sum()
        } else {
            0.0
        };
        *self.capacity_units.lock().unwrap() += units;
        Ok(())
    }
}

/// A client for DynamoDB Local, or `None` (test skipped) when no endpoint is configured and
/// DynamoDB Local is not required.
pub async fn client() -> Option<Client> {
    client_with(None).await
}

/// A client that counts its calls with `counter`.
pub async fn counted_client(counter: &CallCounter) -> Option<Client> {
    client_with(Some(counter.clone())).await
}

/// A client for `endpoint` (a fault proxy, say) with short timeouts and the standard
/// retries, as a function would configure it.
pub async fn client_for(endpoint: &str, attempt_timeout: Duration) -> Client {
    client_for_attempts(endpoint, attempt_timeout, 3).await
}

/// A client for `endpoint` whose SDK sends each request at most `max_attempts` times.
pub async fn client_for_attempts(
    endpoint: &str,
    attempt_timeout: Duration,
    max_attempts: u32,
) -> Client {
    let config = aws_config::defaults(BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "local", "local", None, None, "tests",
        ))
        .endpoint_url(endpoint)
        .timeout_config(
            aws_config::timeout::TimeoutConfig::builder()
                .connect_timeout(Duration::from_millis(500))
                .operation_attempt_timeout(attempt_timeout)
                .operation_timeout(attempt_timeout * 4)
                .build(),
        )
        .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(max_attempts))
        .load()
        .await;
    Client::new(&config)
}

/// A client for `endpoint` (a proxy in front of DynamoDB Local, say) that counts its calls
/// with `counter`, configured as [`counted_client`]'s.
pub async fn counted_client_at(endpoint: &str, counter: &CallCounter) -> Client {
    connect(endpoint, Some(counter.clone())).await
}

async fn client_with(counter: Option<CallCounter>) -> Option<Client> {
    let endpoint = match std::env::var("AWS_ENDPOINT_URL_DYNAMODB") {
        Ok(endpoint) if !endpoint.is_empty() => endpoint,
        _ if required() => panic!(
            "AWS_ENDPOINT_URL_DYNAMODB is not set but DynamoDB Local is required: run scripts/test.sh"
        ),
        _ => {
            eprintln!("SKIPPED: AWS_ENDPOINT_URL_DYNAMODB is not set (scripts/test.sh starts DynamoDB Local)");
            return None;
        }
    };
    Some(connect(&endpoint, counter).await)
}

async fn connect(endpoint: &str, counter: Option<CallCounter>) -> Client {
    let config = aws_config::defaults(BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "local", "local", None, None, "tests",
        ))
        .endpoint_url(endpoint)
        .timeout_config(
            aws_config::timeout::TimeoutConfig::builder()
                .operation_attempt_timeout(Duration::from_secs(5))
                .build(),
        )
        .load()
        .await;
    let mut builder = aws_sdk_dynamodb::config::Builder::from(&config);
    if let Some(counter) = counter {
        builder = builder.interceptor(counter);
    }
    let client = Client::from_conf(builder.build());
    client
        .list_tables()
        .limit(1)
        .send()
        .await
        .unwrap_or_else(|e| panic!("DynamoDB Local at {endpoint} is unreachable: {e:?}"));
    client
}

/// Creates a fresh table with the idempotency schema (partition key `id` (S), on-demand).
pub async fn create_table(client: &Client) -> String {
    create_table_keyed(client, "idempotency", "id").await
}

/// Creates a fresh on-demand table with a string partition key `key` (the testing kit's).
pub async fn create_table_keyed(client: &Client, prefix: &str, key: &str) -> String {
    lambda_idempotency::testing::dynamodb::create_table(client, prefix, key).await
}

/// A store on a fresh table in DynamoDB Local, or `None` when skipped.
pub async fn fresh_store() -> Option<DynamoDbStore> {
    let client = client().await?;
    let table = create_table(&client).await;
    Some(DynamoDbStore::new(client, table))
}

/// The static partition key value of [`fresh_single_table_store`]'s records.
pub const SINGLE_TABLE_STATIC: &str = "idempotency#orders";

/// A store on a fresh table with a single-table layout (partition key `pk` with the static
/// value [`SINGLE_TABLE_STATIC`], sort key `sk`), or `None` when skipped.
pub async fn fresh_single_table_store() -> Option<DynamoDbStore> {
    let names = lambda_idempotency::store::AttributeNames::default()
        .with_key("pk")
        .with_sort_key("sk", SINGLE_TABLE_STATIC);
    fresh_single_table_store_named(names).await
}

/// A store with `names` (which name the partition key `pk` and the sort key `sk`) on a fresh
/// table keyed by `pk` and `sk`, or `None` when skipped.
pub async fn fresh_single_table_store_named(
    names: lambda_idempotency::store::AttributeNames,
) -> Option<DynamoDbStore> {
    let client = client().await?;
    let table = lambda_idempotency::testing::dynamodb::create_table_with_keys(
        &client,
        "shared",
        "pk",
        Some("sk"),
    )
    .await;
    Some(DynamoDbStore::new(client, table).with_attribute_names(names))
}

/// The `balance` of `account` in a ledger table (0 when the item does not exist).
pub async fn balance(client: &Client, table: &str, account: &str) -> i64 {
    lambda_idempotency::testing::dynamodb::balance(client, table, account).await
}

/// The sequence number `account`'s ledger item keeps in `attribute` (a sequence-guarded
/// deployment's), read strongly consistent: 0 when the item or the attribute does not exist.
pub async fn sequence(client: &Client, table: &str, account: &str, attribute: &str) -> u64 {
    let item = client
        .get_item()
        .table_name(table)
        .key(
            "account",
            aws_sdk_dynamodb::types::AttributeValue::S(account.into()),
        )
        .consistent_read(true)
        .send()
        .await
        .unwrap_or_else(|err| panic!("read {table}: {err:?}"))
        .item;
    item.and_then(|i| i.get(attribute).cloned())
        .map_or(0, |value| {
            value
                .as_n()
                .unwrap_or_else(|_| panic!("{account}'s {attribute} is not a number: {value:?}"))
                .parse()
                .unwrap_or_else(|_| panic!("{account}'s {attribute} is not a whole number"))
        })
}
