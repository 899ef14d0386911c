//! [`CliError`]: every way a command can fail, and the exit status each one gives.

use lambda_idempotency::key::KeyError;
use lambda_idempotency::store::StoreError;

/// Exit status of a record that is not there, or an operation refused.
pub const EXIT_REFUSED: u8 = 1;
/// Exit status of a usage error (clap uses it too).
pub const EXIT_USAGE: u8 = 2;
/// Exit status of any other failure (DynamoDB unreachable, a malformed record, output).
pub const EXIT_FAILURE: u8 = 3;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// Neither `--table` nor `IDEMPOTENCY_TABLE` names the table.
    #[error("no table: pass --table TABLE or set IDEMPOTENCY_TABLE")]
    NoTable,
    /// An argument is not usable (outside what clap checks).
    #[error("{0}")]
    Usage(String),
    /// The library could not derive a key from the given input.
    #[error("the library derives no key from this input: {0}")]
    Key(#[source] KeyError),
    /// No record is stored under the id.
    #[error("no record {id:?} in table {table:?}")]
    NotFound {
        /// The stored id looked up.
        id: String,
        /// The table.
        table: String,
    },
    /// The record is not in a state this operation applies to; nothing was changed.
    #[error("refused: {0}")]
    Refused(String),
    /// The record changed between the read and the conditional write; nothing was changed.
    #[error("the record changed since it was read; nothing was changed: {0}")]
    Changed(String),
    /// A store call failed (outage, throttling, bad table, malformed record).
    #[error("store error: {0}")]
    Store(#[source] StoreError),
    /// A DynamoDB request sent by the CLI itself failed.
    #[error("DynamoDB {operation} failed: {message}")]
    Aws {
        /// The operation (`DeleteItem`, `Scan`, `Query`).
        operation: &'static str,
        /// The SDK's error with its causes.
        message: String,
    },
    /// A stored item is not a record this CLI can read.
    #[error("malformed record {id:?}: {reason}")]
    Malformed {
        /// The item's id.
        id: String,
        /// What is wrong with it.
        reason: String,
    },
    /// Writing the output failed.
    #[error("cannot write the output: {0}")]
    Io(#[from] std::io::Error),
}

impl CliError {
    /// The process exit status for this error: 1 not found or refused, 2 usage, 3 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::NotFound { .. } | CliError::Refused(_) | CliError::Changed(_) => EXIT_REFUSED,
            CliError::NoTable | CliError::Usage(_) | CliError::Key(_) => EXIT_USAGE,
            _ => EXIT_FAILURE,
        }
    }

    /// A short machine-readable name of the error, for `--json` output.
    pub fn kind(&self) -> &'static str {
        match self {
            CliError::NoTable => "no_table",
            CliError::Usage(_) => "usage",
            CliError::Key(_) => "key",
            CliError::NotFound { .. } => "not_found",
            CliError::Refused(_) => "refused",
            CliError::Changed(_) => "changed",
            CliError::Store(_) => "store",
            CliError::Aws { .. } => "aws",
            CliError::Malformed { .. } => "malformed",
            CliError::Io(_) => "io",
        }
    }

    /// The message with every cause, `: `-separated.
    pub fn full_message(&self) -> String {
        let mut message = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            let text = cause.to_string();
            if !message.contains(&text) {
                message.push_str(": ");
                message.push_str(&text);
            }
            source = cause.source();
        }
        message
    }

    /// A DynamoDB request error, with the SDK's causes.
    pub fn aws<E: std::error::Error>(operation: &'static str, err: E) -> Self {
        CliError::Aws {
            operation,
            message: aws_sdk_dynamodb::error::DisplayErrorContext(err).to_string(),
        }
    }
}

impl From<StoreError> for CliError {
    /// An item that is not a record is [`CliError::Malformed`] (named by its key); any other
    /// store error is [`CliError::Store`].
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::Malformed { key, reason } => CliError::Malformed { id: key, reason },
            err => CliError::Store(err),
        }
    }
}
