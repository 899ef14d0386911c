//! A table with attribute names of its own: a single-table layout (records under one static
//! partition key value, keyed by the sort key, beside the table's other items) is listed,
//! shown, evicted and released when the CLI is given its names; unusable names are a usage
//! error before anything is sent.

use std::time::{Duration, SystemTime};

use lambda_idempotency::record::Status;
use lambda_idempotency::store::Store;
use lambda_idempotency_test_support as support;

use crate::common::{acquire, cli, cli_with, completed, key_of, s};

/// The flags of `support::dynamodb::fresh_single_table_store`'s layout.
const LAYOUT: [&str; 6] = [
    "--key-attribute",
    "pk",
    "--sort-key-attribute",
    "sk",
    "--static-partition-key",
    support::dynamodb::SINGLE_TABLE_STATIC,
];

#[tokio::test]
async fn a_single_table_layout_is_operated_with_its_attribute_names() {
    let Some(store) = support::dynamodb::fresh_single_table_store().await else {
        return;
    };
    let table = store.table().to_string();
    // Another item of the shared table: never read, never changed.
    store
        .client()
        .put_item()
        .table_name(&table)
        .item("pk", s("customer#7"))
        .item("sk", s("profile"))
        .item("status", s("GOLD"))
        .send()
        .await
        .unwrap();
    let now = SystemTime::now();
    let (done, stuck) = (key_of("layout-done"), key_of("layout-stuck"));
    completed(&store, &done, now + Duration::from_secs(3600)).await;
    acquire(&store, &stuck, now - Duration::from_secs(3600)).await;
    let with_layout = |args: &[&str]| {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--table", &table, "--json"]);
        all.extend(LAYOUT);
        cli(&all)
    };

    let listed = with_layout(&["list"]).ok();
    let mut ids: Vec<String> = listed
        .json_lines()
        .iter()
        .map(|line| line["id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    let mut expected = vec![done.to_string(), stuck.to_string()];
    expected.sort();
    assert_eq!(ids, expected, "{listed:?}");
    // Read by a Query of the records' partition: the other item is not even scanned.
    let last = listed.stderr.lines().last().unwrap();
    assert!(
        last.starts_with("done: scanned 2 items in 1 pages"),
        "{listed:?}"
    );

    let shown = with_layout(&["get", done.as_str()]).ok().json();
    assert_eq!(shown["id"], done.as_str());
    assert_eq!(shown["status"], "COMPLETED");

    let evicted = with_layout(&["evict", done.as_str()]).ok().json();
    assert_eq!(evicted["evicted"], true, "{evicted}");
    assert_eq!(evicted["record"]["id"], done.as_str());
    assert_eq!(store.get(&done).await.unwrap(), None);

    let released = with_layout(&["release", stuck.as_str()]).ok().json();
    assert_eq!(released["released"], true, "{released}");
    assert_eq!(released["record"]["status"], Status::InProgress.as_str());
    assert_eq!(store.get(&stuck).await.unwrap(), None);

    let other = store
        .client()
        .get_item()
        .table_name(&table)
        .key("pk", s("customer#7"))
        .key("sk", s("profile"))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    assert_eq!(other.item().and_then(|i| i.get("status")), Some(&s("GOLD")));
}

#[tokio::test]
async fn unusable_attribute_names_are_a_usage_error_before_anything_is_sent() {
    // No table exists and no endpoint is needed: the names are refused first.
    let colliding = cli(&[
        "get",
        "cli-test#x",
        "--table",
        "no-such-table",
        "--owner-attribute",
        "id",
    ]);
    assert_eq!(colliding.code, 2, "{colliding:?}");
    assert!(
        colliding
            .stderr
            .contains(r#"the key and owner attributes are both named "id""#),
        "{colliding:?}"
    );
    // An empty name, from a flag or from its variable, names where it came from.
    for flag in [
        "key-attribute",
        "status-attribute",
        "expiration-attribute",
        "in-progress-expiration-attribute",
        "data-attribute",
        "validation-attribute",
        "owner-attribute",
        "sort-key-attribute",
        "static-partition-key",
    ] {
        let variable = format!("IDEMPOTENCY_{}", flag.to_uppercase().replace('-', "_"));
        let from_flag = cli(&[
            "get",
            "x",
            "--table",
            "no-such-table",
            &format!("--{flag}"),
            "",
        ]);
        let from_variable = cli_with(
            &["get", "x", "--table", "no-such-table"],
            &[(variable.as_str(), "")],
        );
        for run in [from_flag, from_variable] {
            assert_eq!(run.code, 2, "{flag}: {run:?}");
            assert!(
                run.stderr
                    .contains(&format!("--{flag} (or {variable}) is empty")),
                "{flag}: {run:?}"
            );
        }
    }
    // Half a layout, on every command that reads the table, before or after the command.
    let commands: [&[&str]; 4] = [&["list"], &["get", "x"], &["evict", "x"], &["release", "x"]];
    for command in commands {
        for half in [
            ["--sort-key-attribute", "sk"],
            ["--static-partition-key", "v"],
        ] {
            let after: Vec<&str> = [command, &["--table", "no-such-table"], &half].concat();
            let before: Vec<&str> = [&half, command, &["--table", "no-such-table"]].concat();
            for args in [after, before] {
                let run = cli(&args);
                assert_eq!(run.code, 2, "{args:?}: {run:?}");
                assert!(
                    run.stderr.contains(
                        "a single-table layout needs both --sort-key-attribute and \
                         --static-partition-key"
                    ),
                    "{args:?}: {run:?}"
                );
            }
        }
    }
}
