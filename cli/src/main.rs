//! `lambda-idempotency`: the operator CLI. See the library part (`src/lib.rs`) and the
//! README's "Operate it" section.

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use lambda_idempotency_cli::{run, Cli, CliError, Command};
use serde_json::json;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = cli.json;
    let is_get = matches!(cli.command, Command::Get { .. });
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    let result = run(cli, &mut stdout.lock(), &mut stderr.lock()).await;
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            report(&err, json, is_get);
            ExitCode::from(err.exit_code())
        }
    }
}

/// The error on stderr; with `--json`, also as a JSON object on stdout (`get` of an absent
/// record: `{"found": false}`).
fn report(err: &CliError, json: bool, is_get: bool) {
    eprintln!("error: {}", err.full_message());
    if json {
        let value = match err {
            CliError::NotFound { .. } if is_get => json!({ "found": false }),
            _ => json!({ "error": err.kind(), "message": err.full_message() }),
        };
        let _ = writeln!(std::io::stdout(), "{value}");
    }
}
