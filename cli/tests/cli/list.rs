//! `list`: filters, pagination through every page, progress on stderr, JSON lines.

use std::time::{Duration, SystemTime};

use serde_json::Value;

use crate::common::{acquire, cli, completed, key_of, rig};

fn ids(lines: &[Value]) -> Vec<String> {
    let mut ids: Vec<String> = lines
        .iter()
        .map(|l| l["id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

fn sorted(keys: &[&str]) -> Vec<String> {
    let mut ids: Vec<String> = keys.iter().map(|k| key_of(k).to_string()).collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn list_filters_by_status_and_age_through_every_page() {
    let Some(rig) = rig().await else {
        return;
    };
    let t = rig.table.as_str();
    let now = SystemTime::now();
    let hour = Duration::from_secs(3600);
    completed(&rig.store, &key_of("c-fresh-1"), now + 24 * hour).await;
    completed(&rig.store, &key_of("c-fresh-2"), now + 24 * hour).await;
    completed(&rig.store, &key_of("c-expired"), now - 2 * hour).await;
    acquire(
        &rig.store,
        &key_of("p-live"),
        now + Duration::from_secs(600),
    )
    .await;
    acquire(&rig.store, &key_of("p-stuck"), now - hour).await;

    let all = cli(&[
        "list",
        "--table",
        t,
        "--json",
        "--page-size",
        "2",
        "--progress-every",
        "2",
    ])
    .ok();
    assert_eq!(all.json_lines().len(), 5, "{all:?}");
    // 5 items, 2 a page: 3 pages at least, a progress line after each 2 items.
    let progress: Vec<&str> = all
        .stderr
        .lines()
        .filter(|l| l.starts_with("scanned "))
        .collect();
    assert!(progress.len() >= 2, "{all:?}");
    assert!(
        progress[0].starts_with("scanned 2 items in 1 pages"),
        "{all:?}"
    );
    let done = all.stderr.lines().last().unwrap();
    assert!(done.starts_with("done: scanned 5 items in "), "{done}");
    let pages: u64 = done.split_whitespace().nth(5).unwrap().parse().unwrap();
    assert!(pages >= 3, "{done}");
    assert!(done.ends_with("5 matched"), "{done}");

    let in_progress = cli(&["list", "--table", t, "--json", "--status", "INPROGRESS"]).ok();
    assert_eq!(
        ids(&in_progress.json_lines()),
        sorted(&["p-live", "p-stuck"])
    );
    let stuck = cli(&[
        "list",
        "--table",
        t,
        "--json",
        "--status",
        "INPROGRESS",
        "--older-than",
        "15m",
    ])
    .ok();
    let stuck = stuck.json_lines();
    assert_eq!(ids(&stuck), sorted(&["p-stuck"]));
    assert_eq!(stuck[0]["lease_live"], false);
    let old = cli(&["list", "--table", t, "--json", "--older-than", "1h"]).ok();
    assert_eq!(ids(&old.json_lines()), sorted(&["c-expired", "p-stuck"]));
    let none = cli(&["list", "--table", t, "--older-than", "3h"]).ok();
    assert_eq!(none.stdout, "");
    let completed_text = cli(&["list", "--table", t, "--status", "completed"]).ok();
    assert_eq!(
        completed_text.stdout.lines().count(),
        3,
        "{completed_text:?}"
    );
    assert!(completed_text
        .stdout
        .lines()
        .all(|l| l.contains("  COMPLETED  ")));

    let bad = cli(&["list", "--table", t, "--older-than", "soon"]);
    assert_eq!(bad.code, 2, "{bad:?}");
}
