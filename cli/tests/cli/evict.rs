//! `evict` on every kind of record, the library's and other tools', and the exit status of
//! each way it can end (found in review, helper-53).

use std::time::{Duration, SystemTime};

use aws_sdk_dynamodb::types::AttributeValue;
use lambda_idempotency::record::{OwnerToken, Status};
use lambda_idempotency::store::{
    Commit, CommitRequest, CompleteRequest, Fenced, Store, TransactionalStore,
};
use lambda_idempotency_cli::records;

use crate::common::{acquire, cli, completed, epoch_ms, item_exists, key_of, rig, s, Rig};

fn n(v: &str) -> AttributeValue {
    AttributeValue::N(v.into())
}

/// Puts an item written by another tool under `id`.
async fn put(rig: &Rig, id: &str, attributes: &[(&str, AttributeValue)]) {
    let mut put = rig
        .client
        .put_item()
        .table_name(&rig.table)
        .item("id", s(id));
    for (name, value) in attributes {
        put = put.item(*name, value.clone());
    }
    put.send().await.unwrap();
}

async fn present(rig: &Rig, id: &str) -> bool {
    item_exists(&rig.store, &[("id", id)]).await
}

#[tokio::test]
async fn evict_deletes_every_kind_of_finished_record() {
    let Some(rig) = rig().await else {
        return;
    };
    let t = rig.table.clone();
    let now = SystemTime::now();
    let hour = Duration::from_secs(3600);
    let expiration_secs = epoch_ms(now + hour) / 1000;
    // The library's: completed in lease mode, failed, committed in optimistic mode (an
    // owner, no lease end), expired and not yet deleted by TTL.
    let lease = key_of("evict-lease");
    completed(&rig.store, &lease, now + hour).await;
    let failed = key_of("evict-failed");
    let owner = acquire(&rig.store, &failed, now + Duration::from_secs(60)).await;
    let complete = CompleteRequest {
        key: failed.clone(),
        owner,
        status: Status::Failed,
        data: "\"boom\"".into(),
        expiration_secs,
        now,
    };
    assert_eq!(
        rig.store.complete(&complete).await.unwrap(),
        Fenced::Applied
    );
    let optimistic = key_of("evict-optimistic");
    let commit = CommitRequest {
        key: optimistic.clone(),
        owner: OwnerToken::generate(),
        now,
        status: Status::Completed,
        data: "1".into(),
        expiration_secs,
        validation: Some("v2:h".into()),
        writes: vec![],
    };
    let committed = rig.store.commit_fresh(&commit).await.unwrap();
    assert!(matches!(committed, Commit::Applied), "{committed:?}");
    let expired = key_of("evict-expired");
    completed(&rig.store, &expired, now - hour).await;
    for key in [&lease, &failed, &optimistic, &expired] {
        let run = cli(&["evict", key.as_str(), "--table", &t]);
        assert_eq!(run.code, 0, "{key}: {run:?}");
        assert!(!present(&rig, key.as_str()).await, "{key}");
    }
    // Other tools' (Powertools'): no owner, a lease end kept or not, an expiry written in
    // another form, an owner that is not a string (the library reads it as none).
    let exp = expiration_secs.to_string();
    let lease_end = (epoch_ms(now) + 1000).to_string();
    let items: [(&str, Vec<(&str, AttributeValue)>); 4] = [
        (
            "pt-lease-end-kept",
            vec![
                ("status", s("COMPLETED")),
                ("expiration", n(&exp)),
                ("in_progress_expiration", n(&lease_end)),
                ("data", s("{}")),
            ],
        ),
        (
            "pt-no-lease-end",
            vec![("status", s("FAILED")), ("expiration", n(&exp))],
        ),
        (
            "pt-expiry-form",
            vec![
                ("status", s("COMPLETED")),
                ("expiration", n(&format!("{exp}.000"))),
            ],
        ),
        (
            "null-owner",
            vec![
                ("status", s("COMPLETED")),
                ("expiration", n(&exp)),
                ("lease_owner", AttributeValue::Null(true)),
            ],
        ),
    ];
    for (id, attributes) in &items {
        put(&rig, id, attributes).await;
        let run = cli(&["evict", id, "--table", &t, "--json"]);
        assert_eq!(run.code, 0, "{id}: {run:?}");
        assert!(!present(&rig, id).await, "{id}");
    }
}

#[tokio::test]
async fn evict_answers_each_ending_with_its_exit_status() {
    let Some(rig) = rig().await else {
        return;
    };
    let t = rig.table.clone();
    let error = |args: &[&str], code: i32, kind: &str| {
        let run = cli(args);
        assert_eq!(run.code, code, "{args:?}: {run:?}");
        assert_eq!(run.json()["error"], kind, "{args:?}: {run:?}");
    };
    error(
        &["evict", "absent", "--table", &t, "--json"],
        1,
        "not_found",
    );
    put(&rig, "other", &[("status", s("COMPLETED"))]).await;
    error(&["evict", "other", "--table", &t, "--json"], 1, "refused");
    assert!(present(&rig, "other").await);
    let held = key_of("evict-held");
    acquire(
        &rig.store,
        &held,
        SystemTime::now() + Duration::from_secs(60),
    )
    .await;
    error(
        &["evict", held.as_str(), "--table", &t, "--json"],
        1,
        "refused",
    );
    assert!(rig.store.get(&held).await.unwrap().is_some());
    error(
        &["evict", "x", "--table", "no-such-table", "--json"],
        3,
        "store",
    );
    // Deleted by someone else between the read and the delete.
    let gone = key_of("evict-gone");
    completed(
        &rig.store,
        &gone,
        SystemTime::now() + Duration::from_secs(60),
    )
    .await;
    let read = records::get(&rig.store, gone.as_str()).await.unwrap();
    rig.client
        .delete_item()
        .table_name(&t)
        .key("id", s(gone.as_str()))
        .send()
        .await
        .unwrap();
    assert_eq!(
        records::delete_as_read(&rig.store, &read).await.unwrap(),
        Fenced::LeaseLost
    );
}
