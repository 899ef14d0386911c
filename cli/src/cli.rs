//! The command line: global options and one subcommand per operation.

use std::time::Duration;

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};
use lambda_idempotency::record::Status;
use lambda_idempotency::store::AttributeNames;

use crate::key::KeySource;
use crate::CliError;

/// Inspect and repair lambda-idempotency's records in DynamoDB.
///
/// DynamoDB is reached through the standard AWS settings (region, credentials,
/// AWS_ENDPOINT_URL_DYNAMODB for a local endpoint).
#[derive(Debug, Parser)]
#[command(name = "lambda-idempotency", version)]
pub struct Cli {
    /// The idempotency table (default: the IDEMPOTENCY_TABLE environment variable).
    #[arg(long, global = true, env = "IDEMPOTENCY_TABLE")]
    pub table: Option<String>,
    /// Print JSON instead of text (list: one JSON object per line).
    #[arg(long, global = true)]
    pub json: bool,
    /// The table's attribute names, when not the library's defaults.
    #[command(flatten)]
    pub names: NamesArgs,
    /// The operation.
    #[command(subcommand)]
    pub command: Command,
}

/// The operations.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the stored id of a message, derived by the library's own key extractors.
    Key(KeyArgs),
    /// Show the record stored under ID (exit 1 if there is none).
    Get {
        /// The stored id (`<prefix>#<sha256 hex>`, as printed by `key`).
        id: String,
    },
    /// Delete a COMPLETED or FAILED record so that the next delivery runs the handler
    /// again. The record is read, then deleted only as read (one conditional DeleteItem); an
    /// INPROGRESS or absent record, an item that is not a record, and a record changed in
    /// between are refused (exit 1).
    Evict {
        /// The stored id.
        id: String,
    },
    /// Release (delete) an INPROGRESS record, as the library's own release does, so the
    /// next delivery takes a fresh lease. Refused while the lease is live unless --force;
    /// the delete requires the status, owner and (without --force) lease end and expiry that
    /// were read,
    /// so a record taken over, extended or completed in between is left alone (exit 1).
    Release {
        /// The stored id.
        id: String,
        /// Release even though the lease is live. Safe only when its holder is surely
        /// dead: a live holder keeps running its handler.
        #[arg(long)]
        force: bool,
    },
    /// List records (a Scan of the whole table; in a single-table layout, a Query of the
    /// records' partition key value), all pages, one per line.
    List(ListArgs),
}

/// Where `key` takes the key material from: exactly one of the four extractors.
#[derive(Debug, Args)]
#[command(group(
    ArgGroup::new("source")
        .required(true)
        .args(["message_id", "attribute", "field", "body_hash"])
))]
pub struct KeyArgs {
    /// The key prefix of the function (`Config::with_key_prefix`, else the Lambda function
    /// name).
    #[arg(long)]
    pub prefix: String,
    /// Key on the SQS messageId (`MessageId`, the default extractor).
    #[arg(long, value_name = "ID")]
    pub message_id: Option<String>,
    /// Key on a string message attribute with this value (`MessageAttribute`).
    #[arg(long, value_name = "VALUE")]
    pub attribute: Option<String>,
    /// Key on the body value this JSON pointer selects (`JsonPointer`), e.g. /eventId.
    #[arg(long, value_name = "POINTER", requires = "body")]
    pub field: Option<String>,
    /// Key on the whole body, byte for byte (`BodyHash`).
    #[arg(long, requires = "body")]
    pub body_hash: bool,
    /// The message body, for --field and --body-hash.
    #[arg(long, value_name = "JSON")]
    pub body: Option<String>,
}

impl KeyArgs {
    /// The chosen source.
    pub fn source(&self) -> Result<KeySource, CliError> {
        let body = || {
            self.body
                .clone()
                .ok_or_else(|| CliError::Usage("--body is required".into()))
        };
        if let Some(id) = &self.message_id {
            Ok(KeySource::MessageId(id.clone()))
        } else if let Some(value) = &self.attribute {
            Ok(KeySource::Attribute(value.clone()))
        } else if let Some(pointer) = &self.field {
            Ok(KeySource::Field {
                pointer: pointer.clone(),
                body: body()?,
            })
        } else if self.body_hash {
            Ok(KeySource::BodyHash { body: body()? })
        } else {
            Err(CliError::Usage(
                "one of --message-id, --attribute, --field, --body-hash is required".into(),
            ))
        }
    }
}

/// The table's attribute names, as given to the library's
/// `DynamoDbStore::with_attribute_names`; each one left out keeps the library's default.
#[derive(Debug, Default, Args)]
#[command(next_help_heading = "Attribute names (when not the defaults)")]
pub struct NamesArgs {
    /// The partition key (default `id`).
    #[arg(
        long,
        global = true,
        value_name = "NAME",
        env = "IDEMPOTENCY_KEY_ATTRIBUTE"
    )]
    pub key_attribute: Option<String>,
    /// The status (default `status`).
    #[arg(
        long,
        global = true,
        value_name = "NAME",
        env = "IDEMPOTENCY_STATUS_ATTRIBUTE"
    )]
    pub status_attribute: Option<String>,
    /// The record expiry, the TTL attribute (default `expiration`).
    #[arg(
        long,
        global = true,
        value_name = "NAME",
        env = "IDEMPOTENCY_EXPIRATION_ATTRIBUTE"
    )]
    pub expiration_attribute: Option<String>,
    /// The lease end (default `in_progress_expiration`).
    #[arg(
        long,
        global = true,
        value_name = "NAME",
        env = "IDEMPOTENCY_IN_PROGRESS_EXPIRATION_ATTRIBUTE"
    )]
    pub in_progress_expiration_attribute: Option<String>,
    /// The stored result (default `data`).
    #[arg(
        long,
        global = true,
        value_name = "NAME",
        env = "IDEMPOTENCY_DATA_ATTRIBUTE"
    )]
    pub data_attribute: Option<String>,
    /// The payload hash (default `validation`).
    #[arg(
        long,
        global = true,
        value_name = "NAME",
        env = "IDEMPOTENCY_VALIDATION_ATTRIBUTE"
    )]
    pub validation_attribute: Option<String>,
    /// The lease owner (default `lease_owner`).
    #[arg(
        long,
        global = true,
        value_name = "NAME",
        env = "IDEMPOTENCY_OWNER_ATTRIBUTE"
    )]
    pub owner_attribute: Option<String>,
    /// Single-table layout: the sort key, which holds the stored id (with
    /// --static-partition-key).
    #[arg(
        long,
        global = true,
        value_name = "NAME",
        env = "IDEMPOTENCY_SORT_KEY_ATTRIBUTE"
    )]
    pub sort_key_attribute: Option<String>,
    /// Single-table layout: the partition key value of every record (with
    /// --sort-key-attribute).
    #[arg(
        long,
        global = true,
        value_name = "VALUE",
        env = "IDEMPOTENCY_STATIC_PARTITION_KEY"
    )]
    pub static_partition_key: Option<String>,
}

/// One of `AttributeNames`' renaming builders.
type Rename = fn(AttributeNames, String) -> AttributeNames;

impl NamesArgs {
    /// The attribute names, checked as the library's store checks them
    /// ([`AttributeNames::check`]): names that are empty or collide are a usage error, found
    /// before anything is sent.
    pub fn names(&self) -> Result<AttributeNames, CliError> {
        // Each flag with its renaming builder (the single-table pair is set together below).
        let flags: [(&Option<String>, &str, Option<Rename>); 9] = [
            (
                &self.key_attribute,
                "key-attribute",
                Some(AttributeNames::with_key),
            ),
            (
                &self.status_attribute,
                "status-attribute",
                Some(AttributeNames::with_status),
            ),
            (
                &self.expiration_attribute,
                "expiration-attribute",
                Some(AttributeNames::with_expiration),
            ),
            (
                &self.in_progress_expiration_attribute,
                "in-progress-expiration-attribute",
                Some(AttributeNames::with_in_progress_expiration),
            ),
            (
                &self.data_attribute,
                "data-attribute",
                Some(AttributeNames::with_data),
            ),
            (
                &self.validation_attribute,
                "validation-attribute",
                Some(AttributeNames::with_validation),
            ),
            (
                &self.owner_attribute,
                "owner-attribute",
                Some(AttributeNames::with_owner),
            ),
            (&self.sort_key_attribute, "sort-key-attribute", None),
            (&self.static_partition_key, "static-partition-key", None),
        ];
        // An empty value is named by the flag and the variable it may have come from (clap
        // does not say which), not only by the attribute, as the library's check would.
        if let Some((_, flag, _)) = flags
            .iter()
            .find(|(value, ..)| value.as_deref() == Some(""))
        {
            let variable = format!("IDEMPOTENCY_{}", flag.to_uppercase().replace('-', "_"));
            return Err(CliError::Usage(format!(
                "--{flag} (or {variable}) is empty"
            )));
        }
        let mut names = AttributeNames::default();
        for (value, _, rename) in flags {
            if let (Some(value), Some(rename)) = (value, rename) {
                names = rename(names, value.clone());
            }
        }
        // Checked here, not by clap: its `requires` does not see a global flag given on the
        // other side of the subcommand.
        match (&self.sort_key_attribute, &self.static_partition_key) {
            (Some(sort_key), Some(value)) => names = names.with_sort_key(sort_key, value),
            (None, None) => {}
            _ => {
                return Err(CliError::Usage(
                    "a single-table layout needs both --sort-key-attribute and \
                     --static-partition-key (or IDEMPOTENCY_SORT_KEY_ATTRIBUTE and \
                     IDEMPOTENCY_STATIC_PARTITION_KEY)"
                        .into(),
                ))
            }
        }
        names
            .check()
            .map_err(|err| CliError::Usage(format!("attribute names: {err}")))?;
        Ok(names)
    }
}

/// A record status, as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatusArg {
    /// A lease is held (or was, and elapsed).
    #[value(name = "INPROGRESS", alias = "inprogress")]
    InProgress,
    /// The result is stored.
    #[value(name = "COMPLETED", alias = "completed")]
    Completed,
    /// A permanent failure is stored.
    #[value(name = "FAILED", alias = "failed")]
    Failed,
}

impl From<StatusArg> for Status {
    fn from(status: StatusArg) -> Self {
        match status {
            StatusArg::InProgress => Status::InProgress,
            StatusArg::Completed => Status::Completed,
            StatusArg::Failed => Status::Failed,
        }
    }
}

/// What `list` shows.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only records with this status.
    #[arg(long, value_enum)]
    pub status: Option<StatusArg>,
    /// Only records whose end time lies at least this long ago (15m, 2h, 30s, 7d). A
    /// record's creation time is not stored, so "older than D" means: INPROGRESS records
    /// whose lease end (in_progress_expiration) is at least D in the past (a lease elapsed
    /// for at least D; one without a lease end counts from its expiration); COMPLETED and
    /// FAILED records whose expiration is at least D in the past (expired, not yet deleted
    /// by TTL).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    pub older_than: Option<Duration>,
    /// Items evaluated per Scan or Query page (DynamoDB's Limit); default: up to 1 MB per
    /// page.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(i32).range(1..))]
    pub page_size: Option<i32>,
    /// Print a progress line on stderr after every N scanned items (0: only the final
    /// line).
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub progress_every: u64,
}
