//! `get`, `evict` and `release` on records the library wrote.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use lambda_idempotency::key::IdempotencyKey;
use lambda_idempotency::record::OwnerToken;
use lambda_idempotency::record::Status;
use lambda_idempotency::store::{Acquire, AcquireRequest, Store};
use lambda_idempotency::Outcome;
use lambda_idempotency_cli::records::release_held;
use lambda_idempotency_cli::CliError;

use crate::common::{acquire, cli, completed, deliver, epoch_ms, key_of, rig};

#[tokio::test]
async fn get_shows_completed_and_in_progress_records() {
    let Some(rig) = rig().await else {
        return;
    };
    let runs = Arc::new(AtomicUsize::new(0));
    assert_eq!(deliver(&rig.store, &runs, "m-get").await, Outcome::Executed);
    let id = key_of("m-get").to_string();
    let t = rig.table.as_str();

    let done = cli(&["get", &id, "--table", t, "--json"]).ok().json();
    assert_eq!(done["found"], true);
    assert_eq!(done["id"], id.as_str());
    assert_eq!(done["status"], "COMPLETED");
    assert_eq!(done["data"], r#"{"charged":42}"#);
    assert_eq!(done["expired"], false);
    assert!(done["expiration_rfc3339"].as_str().unwrap().ends_with('Z'));
    assert!(done["expiration_relative"]
        .as_str()
        .unwrap()
        .starts_with("in "));
    assert!(done["in_progress_expiration"].is_null());
    let text = cli(&["get", &id, "--table", t]).ok().stdout;
    assert!(text.contains("status:     COMPLETED"), "{text}");
    assert!(text.contains(r#"data:       {"charged":42}"#), "{text}");

    let held = IdempotencyKey::derive("cli-test", b"m-held");
    let lease_end = SystemTime::now() + Duration::from_secs(600);
    let owner = acquire(&rig.store, &held, lease_end).await;
    let shown = cli(&["get", held.as_str(), "--table", t, "--json"])
        .ok()
        .json();
    assert_eq!(shown["status"], "INPROGRESS");
    assert_eq!(shown["lease_owner"], owner.as_str());
    assert_eq!(shown["in_progress_expiration"], epoch_ms(lease_end));
    assert_eq!(shown["lease_live"], true);
    assert_eq!(shown["validation"], "v2:hash");
    let relative = shown["in_progress_expiration_relative"].as_str().unwrap();
    assert!(relative == "in 10m" || relative == "in 9m", "{relative}");
    let text = cli(&["get", held.as_str(), "--table", t]).ok().stdout;
    assert!(text.contains(&format!("owner:      {owner}")), "{text}");
    assert!(text.contains(", live)"), "{text}");

    let missing = cli(&["get", "cli-test#nope", "--table", t]);
    assert_eq!(missing.code, 1, "{missing:?}");
    assert!(missing.stderr.contains("no record"), "{missing:?}");
    let missing = cli(&["get", "cli-test#nope", "--table", t, "--json"]);
    assert_eq!(missing.code, 1);
    assert_eq!(missing.json(), serde_json::json!({ "found": false }));
}

#[tokio::test]
async fn evict_deletes_finished_records_only() {
    let Some(rig) = rig().await else {
        return;
    };
    let t = rig.table.as_str();
    let runs = Arc::new(AtomicUsize::new(0));
    assert_eq!(deliver(&rig.store, &runs, "m-ev").await, Outcome::Executed);
    assert_eq!(deliver(&rig.store, &runs, "m-ev").await, Outcome::Replayed);
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    let id = key_of("m-ev").to_string();
    let evicted = cli(&["evict", &id, "--table", t, "--json"]).ok().json();
    assert_eq!(evicted["evicted"], true);
    assert_eq!(evicted["record"]["status"], "COMPLETED");
    assert!(rig.store.get(&key_of("m-ev")).await.unwrap().is_none());
    // The next delivery runs the handler again.
    assert_eq!(deliver(&rig.store, &runs, "m-ev").await, Outcome::Executed);
    assert_eq!(runs.load(Ordering::SeqCst), 2);

    let held = key_of("m-held");
    acquire(
        &rig.store,
        &held,
        SystemTime::now() + Duration::from_secs(600),
    )
    .await;
    let refused = cli(&["evict", held.as_str(), "--table", t]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(refused.stderr.contains("INPROGRESS"), "{refused:?}");
    assert!(refused.stderr.contains("release"), "{refused:?}");
    assert!(rig.store.get(&held).await.unwrap().is_some());

    let absent = cli(&["evict", "cli-test#nope", "--table", t]);
    assert_eq!(absent.code, 1, "{absent:?}");
    assert!(absent.stderr.contains("no record"), "{absent:?}");
}

#[tokio::test]
async fn release_respects_live_leases_unless_forced() {
    let Some(rig) = rig().await else {
        return;
    };
    let t = rig.table.as_str();
    let live = key_of("m-live");
    acquire(
        &rig.store,
        &live,
        SystemTime::now() + Duration::from_secs(600),
    )
    .await;
    let refused = cli(&["release", live.as_str(), "--table", t]);
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(refused.stderr.contains("--force"), "{refused:?}");
    assert!(rig.store.get(&live).await.unwrap().is_some());
    let forced = cli(&["release", live.as_str(), "--force", "--table", t, "--json"]).ok();
    assert_eq!(forced.json()["released"], true);
    assert!(rig.store.get(&live).await.unwrap().is_none());

    let elapsed = key_of("m-elapsed");
    acquire(
        &rig.store,
        &elapsed,
        SystemTime::now() - Duration::from_secs(60),
    )
    .await;
    let released = cli(&["release", elapsed.as_str(), "--table", t]).ok();
    assert!(released.stdout.starts_with("released"), "{released:?}");
    assert!(rig.store.get(&elapsed).await.unwrap().is_none());

    let runs = Arc::new(AtomicUsize::new(0));
    deliver(&rig.store, &runs, "m-done").await;
    let done = cli(&["release", key_of("m-done").as_str(), "--table", t]);
    assert_eq!(done.code, 1, "{done:?}");
    assert!(done.stderr.contains("evict"), "{done:?}");
    let absent = cli(&["release", "cli-test#nope", "--table", t]);
    assert_eq!(absent.code, 1, "{absent:?}");
}

/// The delete requires the owner and status that were read: a record taken over, or
/// completed, after the read is not released.
#[tokio::test]
async fn release_of_a_record_changed_since_the_read_is_refused() {
    let Some(rig) = rig().await else {
        return;
    };
    let key = key_of("m-race");
    acquire(
        &rig.store,
        &key,
        SystemTime::now() - Duration::from_secs(60),
    )
    .await;
    let read = rig.store.get(&key).await.unwrap().unwrap();
    // Another invocation takes the elapsed lease over between the read and the write.
    let new_owner = OwnerToken::generate();
    let takeover = AcquireRequest {
        key: key.clone(),
        owner: new_owner.clone(),
        now: SystemTime::now(),
        lease_expiration_ms: epoch_ms(SystemTime::now() + Duration::from_secs(600)),
        expiration_secs: epoch_ms(SystemTime::now()) / 1000 + 3600,
        validation: None,
    };
    assert_eq!(
        rig.store.acquire(&takeover).await.unwrap(),
        Acquire::Acquired
    );
    let err = release_held(&rig.store, &read, false).await.unwrap_err();
    assert!(matches!(err, CliError::Changed(_)), "{err}");
    assert_eq!(err.exit_code(), 1);
    assert!(err.to_string().contains(new_owner.as_str()), "{err}");
    let now = rig.store.get(&key).await.unwrap().unwrap();
    assert_eq!(now.owner, Some(new_owner));

    // Completed between the read and the write.
    let done = key_of("m-race-done");
    let expires = SystemTime::now() + Duration::from_secs(3600);
    let owner = acquire(
        &rig.store,
        &done,
        SystemTime::now() - Duration::from_secs(1),
    )
    .await;
    let read = rig.store.get(&done).await.unwrap().unwrap();
    assert_eq!(read.owner.as_ref(), Some(&owner));
    let complete = lambda_idempotency::store::CompleteRequest {
        key: done.clone(),
        owner,
        status: Status::Completed,
        data: "1".into(),
        expiration_secs: epoch_ms(expires) / 1000,
        now: SystemTime::now(),
    };
    rig.store.complete(&complete).await.unwrap();
    let err = release_held(&rig.store, &read, false).await.unwrap_err();
    assert!(err.to_string().contains("COMPLETED"), "{err}");
    let kept = rig.store.get(&done).await.unwrap().unwrap();
    assert_eq!(kept.status, Status::Completed);
    // `completed` is the helper the list tests use; keep it exercised here too.
    completed(&rig.store, &key_of("m-other"), expires).await;
}

#[tokio::test]
async fn release_refuses_a_lease_its_holder_extended_after_the_read() {
    let Some(rig) = rig().await else {
        return;
    };
    let key = key_of("m-extended");
    let owner = acquire(&rig.store, &key, SystemTime::now() - Duration::from_secs(1)).await;
    let read = rig.store.get(&key).await.unwrap().unwrap();
    assert!(!lambda_idempotency_cli::view::lease_live(
        &read,
        SystemTime::now()
    ));
    // The holder's late heartbeat extends the elapsed lease between the read and the delete.
    let extend = lambda_idempotency::store::ExtendRequest {
        key: key.clone(),
        owner: owner.clone(),
        lease_expiration_ms: epoch_ms(SystemTime::now() + Duration::from_secs(600)),
        expiration_secs: epoch_ms(SystemTime::now()) / 1000 + 3600,
        now: SystemTime::now(),
    };
    assert_eq!(
        rig.store.extend(&extend).await.unwrap(),
        lambda_idempotency::store::Fenced::Applied
    );
    let err = release_held(&rig.store, &read, false).await.unwrap_err();
    assert!(matches!(err, CliError::Changed(_)), "{err}");
    let kept = rig.store.get(&key).await.unwrap().unwrap();
    assert_eq!(kept.owner, Some(owner.clone()), "the live lease is kept");
    // With --force the read owner's record goes, extended or not.
    release_held(&rig.store, &read, true).await.unwrap();
    assert!(rig.store.get(&key).await.unwrap().is_none());
}
