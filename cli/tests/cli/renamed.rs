//! Attribute names of a table's own, every one renamed, in a single-table layout beside
//! other items (found in review, helper-51): what `list` filters and pages, the fencing of
//! `release`, `evict`, `release` and `get` of an item that is not a record, the layout flags on
//! either side of the subcommand, and the names from environment variables.

use std::time::{Duration, SystemTime};

use aws_sdk_dynamodb::types::AttributeValue;
use lambda_idempotency::record::Status;
use lambda_idempotency::store::{AttributeNames, DynamoDbStore, ExtendRequest, Fenced, Store};
use lambda_idempotency_cli::records;
use lambda_idempotency_cli::CliError;
use lambda_idempotency_test_support as support;

use crate::common::{acquire, cli, cli_with, completed, epoch_ms, item_exists, key_of, s};

const STATIC: &str = support::dynamodb::SINGLE_TABLE_STATIC;

/// A single-table store with every attribute renamed.
async fn renamed_single_table() -> Option<DynamoDbStore> {
    let names = AttributeNames::default()
        .with_key("pk")
        .with_status("st")
        .with_expiration("ttl")
        .with_in_progress_expiration("lease_ms")
        .with_owner("holder")
        .with_data("result")
        .with_validation("hash")
        .with_sort_key("sk", STATIC);
    support::dynamodb::fresh_single_table_store_named(names).await
}

fn renamed_flags(table: &str) -> Vec<String> {
    [
        "--table",
        table,
        "--json",
        "--key-attribute",
        "pk",
        "--status-attribute",
        "st",
        "--expiration-attribute",
        "ttl",
        "--in-progress-expiration-attribute",
        "lease_ms",
        "--owner-attribute",
        "holder",
        "--data-attribute",
        "result",
        "--validation-attribute",
        "hash",
        "--sort-key-attribute",
        "sk",
        "--static-partition-key",
        STATIC,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

async fn exists(store: &DynamoDbStore, pk: &str, sk: &str) -> bool {
    item_exists(store, &[("pk", pk), ("sk", sk)]).await
}

/// An item's attributes beside its key.
type Attributes = Vec<(&'static str, AttributeValue)>;

#[tokio::test]
async fn evict_leaves_an_item_that_is_not_a_record_alone() {
    let Some(store) = support::dynamodb::fresh_single_table_store().await else {
        return;
    };
    let table = store.table().to_string();
    let n = |v: &str| AttributeValue::N(v.into());
    // Other items of the shared table, under the records' partition key value, with a
    // `status` attribute of their own (a common attribute name in a single-table design),
    // some even with a numeric `expiration` (a table has one TTL attribute): none is a
    // record the library reads.
    let items: [(&str, Attributes, &str); 5] = [
        (
            "settings",
            vec![("status", s("COMPLETED"))],
            "no expiration",
        ),
        // The status `release` acts on.
        ("job", vec![("status", s("INPROGRESS"))], "no expiration"),
        (
            "negative",
            vec![("status", s("COMPLETED")), ("expiration", n("-5"))],
            "expiration is not an integer: -5",
        ),
        (
            "fraction",
            vec![("status", s("FAILED")), ("expiration", n("1.5"))],
            "expiration is not an integer: 1.5",
        ),
        (
            "lease-text",
            vec![
                ("status", s("COMPLETED")),
                ("expiration", n("1795306000")),
                ("in_progress_expiration", s("soon")),
            ],
            "in_progress_expiration is not a number",
        ),
    ];
    for (sk, attributes, reason) in items {
        let mut put = store
            .client()
            .put_item()
            .table_name(&table)
            .item("pk", s(STATIC))
            .item("sk", s(sk));
        for (name, value) in attributes {
            put = put.item(name, value);
        }
        put.send().await.unwrap();
        let on_item = |command: &str, json: &[&str]| {
            let layout = [
                "--table",
                &table,
                "--key-attribute",
                "pk",
                "--sort-key-attribute",
                "sk",
                "--static-partition-key",
                STATIC,
            ];
            cli(&[&[command, sk][..], json, &layout[..]].concat())
        };
        // `release` refuses such an item as `evict` does (it exited 3, a store error, before).
        for command in ["evict", "release"] {
            let run = on_item(command, &[]);
            assert!(
                exists(&store, STATIC, sk).await,
                "{command} deleted an item that is not a record: {run:?}"
            );
            // Refused, nothing changed; the item is named for what it is.
            assert_eq!(run.code, 1, "{command}: {run:?}");
            assert!(
                run.stderr.contains(&format!(
                    "refused: item {sk:?} is not a record ({reason}): {command} deletes only \
                     records"
                )),
                "{run:?}"
            );
        }
        // `get` names it a malformed record, as `list` does (it was a store error before).
        let run = on_item("get", &["--json"]);
        assert_eq!(run.code, 3, "get: {run:?}");
        assert!(
            run.stderr
                .contains(&format!("error: malformed record {sk:?}: {reason}")),
            "{run:?}"
        );
        assert!(run.stdout.contains(r#""error":"malformed""#), "{run:?}");
    }
}

#[tokio::test]
async fn evict_leaves_a_record_changed_since_it_was_read_alone() {
    let Some(store) = renamed_single_table().await else {
        return;
    };
    let now = SystemTime::now();
    let key = key_of("renamed-changed");
    completed(&store, &key, now - Duration::from_secs(60)).await;
    let read = records::get(&store, key.as_str()).await.unwrap();
    // Expired, taken over by a new delivery and completed again before the delete.
    completed(&store, &key, now + Duration::from_secs(3600)).await;
    let answer = records::delete_as_read(&store, &read).await.unwrap();
    assert_eq!(answer, Fenced::LeaseLost);
    let now_stored = store
        .get(&key)
        .await
        .unwrap()
        .expect("the new record is kept");
    assert_eq!(now_stored.status, Status::Completed);
    assert_ne!(now_stored.expiration_secs, read.expiration_secs);
}

#[tokio::test]
async fn list_queries_filters_and_pages_with_renamed_attributes() {
    let Some(store) = renamed_single_table().await else {
        return;
    };
    let table = store.table().to_string();
    let now = SystemTime::now();
    let hour = Duration::from_secs(3600);
    let (expired, stuck, live, fresh) = (
        key_of("renamed-expired"),
        key_of("renamed-stuck"),
        key_of("renamed-live"),
        key_of("renamed-fresh"),
    );
    completed(&store, &expired, now - 2 * hour).await;
    completed(&store, &fresh, now + 2 * hour).await;
    acquire(&store, &stuck, now - hour).await;
    acquire(&store, &live, now + hour).await;
    // A non-record under the static partition, and an item of another partition.
    for (pk, sk) in [(STATIC, "zz-meta"), ("customer#1", "profile")] {
        store
            .client()
            .put_item()
            .table_name(&table)
            .item("pk", s(pk))
            .item("sk", s(sk))
            .item("kind", s("other"))
            .send()
            .await
            .unwrap();
    }
    let list = |extra: &[&str]| {
        let mut args = vec!["list".to_string()];
        args.extend(extra.iter().map(|s| s.to_string()));
        args.extend(renamed_flags(&table));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let run = cli(&args).ok();
        let mut ids: Vec<String> = run
            .json_lines()
            .iter()
            .map(|l| l["id"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        (ids, run)
    };
    let sorted = |keys: &[&lambda_idempotency::key::IdempotencyKey]| {
        let mut v: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        v.sort();
        v
    };
    let (ids, run) = list(&["--page-size", "1"]);
    assert_eq!(ids, sorted(&[&expired, &stuck, &live, &fresh]), "{run:?}");
    assert!(
        run.stderr
            .contains(r#"skipped: malformed record "zz-meta": no status"#),
        "{run:?}"
    );
    // The records' partition alone was read (4 records and the item that is not one), a
    // record a page, and a last empty page.
    assert!(
        run.stderr
            .contains("done: scanned 5 items in 6 pages, 4 matched"),
        "{run:?}"
    );
    let (ids, run) = list(&[
        "--status",
        "INPROGRESS",
        "--older-than",
        "15m",
        "--page-size",
        "2",
    ]);
    assert_eq!(ids, sorted(&[&stuck]), "{run:?}");
    let (ids, run) = list(&["--older-than", "15m"]);
    assert_eq!(ids, sorted(&[&expired, &stuck]), "{run:?}");
    let (ids, run) = list(&["--status", "COMPLETED"]);
    assert_eq!(ids, sorted(&[&expired, &fresh]), "{run:?}");
    // Flags before the subcommand.
    let mut args = renamed_flags(&table);
    args.push("list".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = cli(&args).ok();
    assert_eq!(run.json_lines().len(), 4, "{run:?}");
}

#[tokio::test]
async fn release_is_fenced_and_evict_deletes_with_renamed_attributes() {
    let Some(store) = renamed_single_table().await else {
        return;
    };
    let table = store.table().to_string();
    let now = SystemTime::now();
    let stuck = key_of("renamed-fence");
    let owner = acquire(&store, &stuck, now - Duration::from_secs(60)).await;
    let read = records::get(&store, stuck.as_str()).await.unwrap();
    assert_eq!(read.status, Status::InProgress);
    // The holder's heartbeat extends the elapsed lease after the read.
    let extended = store
        .extend(&ExtendRequest {
            key: stuck.clone(),
            owner: owner.clone(),
            lease_expiration_ms: epoch_ms(now + Duration::from_secs(600)),
            expiration_secs: epoch_ms(now + Duration::from_secs(7200)) / 1000,
            now,
        })
        .await
        .unwrap();
    assert_eq!(extended, Fenced::Applied);
    let answer = records::release_held(&store, &read, false).await;
    assert!(matches!(answer, Err(CliError::Changed(_))), "{answer:?}");
    assert!(store.get(&stuck).await.unwrap().is_some());
    // Live now: the binary refuses; forced it releases.
    let mut args = vec!["release".to_string(), stuck.to_string()];
    args.extend(renamed_flags(&table));
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = cli(&a);
    assert_eq!(run.code, 1, "{run:?}");
    args.push("--force".into());
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    cli(&a).ok();
    assert!(store.get(&stuck).await.unwrap().is_none());
    // evict and get with renamed attributes.
    let done = key_of("renamed-done");
    completed(&store, &done, now + Duration::from_secs(3600)).await;
    let mut args = vec!["get".to_string(), done.to_string()];
    args.extend(renamed_flags(&table));
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let shown = cli(&a).ok().json();
    assert_eq!(shown["status"], "COMPLETED");
    args[0] = "evict".into();
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    cli(&a).ok();
    assert!(store.get(&done).await.unwrap().is_none());
}

#[tokio::test]
async fn layout_flags_split_around_the_subcommand_are_accepted() {
    let Some(store) = support::dynamodb::fresh_single_table_store().await else {
        return;
    };
    let table = store.table().to_string();
    let run = cli(&[
        "--key-attribute",
        "pk",
        "--sort-key-attribute",
        "sk",
        "list",
        "--table",
        &table,
        "--static-partition-key",
        STATIC,
    ]);
    assert_eq!(run.code, 0, "{run:?}");
}

#[tokio::test]
async fn names_come_from_the_environment_and_a_flag_wins() {
    let Some(store) = renamed_single_table().await else {
        return;
    };
    let table = store.table().to_string();
    let key = key_of("renamed-from-env");
    completed(&store, &key, SystemTime::now() + Duration::from_secs(3600)).await;
    let id = key.to_string();
    let vars = [
        ("IDEMPOTENCY_TABLE", table.as_str()),
        ("IDEMPOTENCY_KEY_ATTRIBUTE", "pk"),
        ("IDEMPOTENCY_STATUS_ATTRIBUTE", "st"),
        ("IDEMPOTENCY_EXPIRATION_ATTRIBUTE", "ttl"),
        ("IDEMPOTENCY_IN_PROGRESS_EXPIRATION_ATTRIBUTE", "lease_ms"),
        ("IDEMPOTENCY_OWNER_ATTRIBUTE", "holder"),
        ("IDEMPOTENCY_DATA_ATTRIBUTE", "result"),
        ("IDEMPOTENCY_VALIDATION_ATTRIBUTE", "hash"),
        ("IDEMPOTENCY_SORT_KEY_ATTRIBUTE", "sk"),
        ("IDEMPOTENCY_STATIC_PARTITION_KEY", STATIC),
    ];
    // Every name from the environment: the record is read as the library stored it.
    let run = cli_with(&["get", &id, "--json"], &vars).ok();
    let got = &run.json_lines()[0];
    assert_eq!(got["id"], id.as_str(), "{run:?}");
    assert_eq!(got["status"], "COMPLETED", "{run:?}");
    let run = cli_with(&["list", "--json"], &vars).ok();
    let ids: Vec<String> = run
        .json_lines()
        .iter()
        .map(|l| l["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, vec![id.clone()], "{run:?}");
    // A flag wins over its variable: a wrong status name in the environment, the right one
    // as a flag.
    let mut wrong = vars;
    wrong[2] = ("IDEMPOTENCY_STATUS_ATTRIBUTE", "status");
    let run = cli_with(&["get", &id, "--json"], &wrong);
    assert_eq!(
        run.code, 3,
        "the wrong name is read from the environment: {run:?}"
    );
    for args in [
        ["get", &id, "--json", "--status-attribute", "st"],
        ["--status-attribute", "st", "get", &id, "--json"],
    ] {
        let run = cli_with(&args, &wrong).ok();
        assert_eq!(run.json_lines()[0]["status"], "COMPLETED", "{run:?}");
    }
    // Half a layout from the environment is the same usage error as from the flags.
    let half = [
        ("IDEMPOTENCY_TABLE", table.as_str()),
        ("IDEMPOTENCY_SORT_KEY_ATTRIBUTE", "sk"),
    ];
    let run = cli_with(&["get", &id], &half);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr.contains("IDEMPOTENCY_STATIC_PARTITION_KEY"),
        "{run:?}"
    );
}
