//! `lambda-idempotency`, the operator CLI of the `lambda-idempotency` library: derive the
//! stored id of a message ([`key`]), show, evict and release one record ([`records`]), and
//! list records ([`list`]). Records are read through the library's [`DynamoDbStore`] and
//! changed only by conditional writes. The repository README
//! ("Operate it") has the operator's guide and runbook.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cli;
pub mod error;
pub mod key;
pub mod list;
pub mod records;
pub mod view;

use std::io::Write;
use std::time::SystemTime;

use aws_config::BehaviorVersion;
use lambda_idempotency::store::DynamoDbStore;
use serde_json::json;

pub use cli::{Cli, Command};
pub use error::CliError;

/// A DynamoDB client from the standard AWS settings (environment, profile, region,
/// `AWS_ENDPOINT_URL_DYNAMODB`).
pub async fn client() -> aws_sdk_dynamodb::Client {
    let config = aws_config::defaults(BehaviorVersion::latest()).load().await;
    aws_sdk_dynamodb::Client::new(&config)
}

/// Runs `cli`, writing results on `out` and progress on `err`.
pub async fn run(cli: Cli, out: &mut dyn Write, err: &mut dyn Write) -> Result<(), CliError> {
    let json = cli.json;
    if let Command::Key(args) = &cli.command {
        let id = key::derive(&args.prefix, &args.source()?)?;
        if json {
            writeln!(out, "{}", json!({ "id": id.as_str() }))?;
        } else {
            writeln!(out, "{id}")?;
        }
        return Ok(());
    }
    let table = cli
        .table
        .filter(|t| !t.is_empty())
        .ok_or(CliError::NoTable)?;
    let names = cli.names.names()?;
    let store = DynamoDbStore::new(client().await, table).with_attribute_names(names);
    let now = SystemTime::now();
    match cli.command {
        Command::Key(_) => unreachable!("handled above"),
        Command::Get { id } => {
            let record = records::get(&store, &id).await?;
            if json {
                writeln!(out, "{}", view::record_json(&record, now))?;
            } else {
                write!(out, "{}", view::record_text(&record, now))?;
            }
        }
        Command::Evict { id } => {
            let record = records::evict(&store, &id).await?;
            if json {
                let record = view::record_json(&record, now);
                writeln!(
                    out,
                    "{}",
                    json!({ "evicted": true, "id": id, "record": record })
                )?;
            } else {
                writeln!(
                    out,
                    "evicted {id} (was {}): the next delivery of its message runs the handler again",
                    record.status
                )?;
            }
        }
        Command::Release { id, force } => {
            let record = records::release(&store, &id, force, now).await?;
            if json {
                let record = view::record_json(&record, now);
                writeln!(
                    out,
                    "{}",
                    json!({ "released": true, "id": id, "record": record })
                )?;
            } else {
                writeln!(
                    out,
                    "released {id} (owner {}): the next delivery takes a fresh lease",
                    record.owner.as_ref().map_or("(none)", |o| o.as_str())
                )?;
            }
        }
        Command::List(args) => {
            let options = list::ListOptions {
                status: args.status.map(Into::into),
                older_than: args.older_than,
                page_size: args.page_size,
                progress_every: args.progress_every,
                json,
            };
            list::list(&store, &options, now, out, err).await?;
        }
    }
    Ok(())
}
